"""Each counter rule is stated once, in hubstore/figures.py; the migrations that install
trigger-kept counters froze copies of it, and every copy must agree."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import get_args

import pytest

from hubstore import figures
from hubstore.types import AssignStatus

VERSIONS = Path(__file__).resolve().parents[2] / "alembic" / "versions"


def revision(prefix: str) -> ModuleType:
    """The migration script whose file name starts with ``prefix``."""
    (path,) = VERSIONS.glob(f"{prefix}_*.py")
    spec = importlib.util.spec_from_file_location(f"revision_{prefix}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The counters a later revision added, each with that revision.
LATER = {"assign_cancelled": "0013"}


def counted_before_0013() -> dict[str, str]:
    return {name: count for name, count in figures.COUNTS.items() if name not in LATER}


def test_revision_0003_counts_what_figures_says() -> None:
    script = revision("0003")
    assert counted_before_0013() == script.COUNTERS
    for row in ("NEW", "OLD"):
        assert script._QUEUE.format(row=row) == figures.queue_bucket(f"{row}.priority")


def test_revision_0004_counts_what_figures_says() -> None:
    script = revision("0004")
    assert counted_before_0013() == script._INITIAL
    assert figures.queue_bucket("priority") == script._BUCKET
    assert revision("0013").BEFORE == script._STATUSES


def test_revision_0013_counts_what_figures_says() -> None:
    script = revision("0013")
    assert figures.COUNTS[script.COUNTER] == script.COUNT
    assert LATER == {script.COUNTER: "0013"}
    assert get_args(AssignStatus) == script.AFTER


def test_revision_0009_folds_what_figures_says() -> None:
    script = revision("0009")
    assert figures.queue_bucket("NEW.priority") == script._QUEUE
    assert figures.queue_code("NEW") in script.LOG_TRIGGER
    assert script.FOLDED == figures.LOG_FOLDED
    for upto in ("NEW.seq", "(SELECT max(seq) FROM message_log)"):
        assert script._pending_into_counters(upto) == figures.fold_log(upto)


def test_the_urgent_threshold_is_in_every_rule() -> None:
    threshold = f">= {figures.URGENT_PRIORITY}"
    assert threshold in figures.queue_bucket("p") and threshold in figures.queue_code("r")
    assert threshold in figures.COUNTS["messages_queued_urgent"]
    assert f"< {figures.URGENT_PRIORITY}" in figures.COUNTS["messages_queued_normal"]


@pytest.mark.parametrize("counter", sorted(figures.COUNTS))
def test_plain_counts_name_every_counter(counter: str) -> None:
    assert f" AS {counter}" in str(figures.PLAIN_COUNTS)


def test_revision_0015_counts_what_figures_says() -> None:
    assert revision("0015").WORKER_COUNTS == figures.WORKER_COUNTS
