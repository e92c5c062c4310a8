"""The assign-job state machine and its helpers, pure (no database).

The expected transition table is written out here by hand from the issue and
REFERENCE.md section 3, not derived from ``hubstore.assign_rules``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from hubstore import assign_rules as rules
from hubstore.assign_rules import Move, check_transition, next_values, normalize_status
from hubstore.errors import IllegalTransition, ValidationError

STATES = ("queued", "running", "succeeded", "failed", "timed_out", "cancelled")

# A = applied, N = no-op (repeating the terminal move), - = IllegalTransition.
#                 to: queued running succeeded failed timed_out cancelled
PLAIN_TABLE = {
    "queued":    ("-",  "A",    "A",      "A",   "A",      "A"),
    "running":   ("-",  "A",    "A",      "A",   "A",      "A"),
    "succeeded": ("-",  "-",    "N",      "-",   "-",      "-"),
    "failed":    ("-",  "-",    "-",      "N",   "-",      "-"),
    "timed_out": ("-",  "-",    "-",      "-",   "N",      "-"),
    "cancelled": ("-",  "-",    "-",      "-",   "-",      "N"),
}
# A retry may also re-queue a failed or timed-out job (never a cancelled one); nothing
# else changes.
RETRY_TABLE = {
    "queued":    ("-",  "A",    "A",      "A",   "A",      "A"),
    "running":   ("-",  "A",    "A",      "A",   "A",      "A"),
    "succeeded": ("-",  "-",    "N",      "-",   "-",      "-"),
    "failed":    ("A",  "-",    "-",      "N",   "-",      "-"),
    "timed_out": ("A",  "-",    "-",      "-",   "N",      "-"),
    "cancelled": ("-",  "-",    "-",      "-",   "-",      "N"),
}

# A put-back (a claim whose waiter was cancelled) only moves a running job back to queued.
PUT_BACK_TABLE = {
    "queued":    ("-",  "A",    "A",      "A",   "A",      "A"),
    "running":   ("A",  "A",    "A",      "A",   "A",      "A"),
    "succeeded": ("-",  "-",    "N",      "-",   "-",      "-"),
    "failed":    ("-",  "-",    "-",      "N",   "-",      "-"),
    "timed_out": ("-",  "-",    "-",      "-",   "N",      "-"),
    "cancelled": ("-",  "-",    "-",      "-",   "-",      "N"),
}


def _cases(table: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str, str]]:
    return [(src, dst, table[src][i]) for src in STATES for i, dst in enumerate(STATES)]


@pytest.mark.parametrize(("via_retry", "table"), [(False, PLAIN_TABLE), (True, RETRY_TABLE)],
                         ids=["plain", "via_retry"])
def test_every_pair_of_states(via_retry: bool, table: Mapping[str, tuple[str, ...]]) -> None:
    for src, dst, expected in _cases(table):
        label = f"{src} -> {dst} (via_retry={via_retry})"
        if expected == "-":
            with pytest.raises(IllegalTransition) as caught:
                check_transition(src, dst, via_retry=via_retry)
            assert caught.value.code == "ASSIGN_ILLEGAL_TRANSITION", label
        else:
            want = Move.APPLY if expected == "A" else Move.NOOP
            assert check_transition(src, dst, via_retry=via_retry) is want, label


def test_the_tables_cover_all_36_pairs_once() -> None:
    for table in (PLAIN_TABLE, RETRY_TABLE, PUT_BACK_TABLE):
        assert len(_cases(table)) == 36
        assert set(table) == set(STATES)


def test_requeue_without_a_retry_names_the_retry_in_its_message() -> None:
    with pytest.raises(IllegalTransition, match="only by a retry"):
        check_transition("failed", "queued")


@pytest.mark.parametrize(("src", "dst"), [("bogus", "queued"), ("queued", "bogus"),
                                          ("", "running"), ("queued", "")])
def test_unknown_statuses_are_illegal(src: str, dst: str) -> None:
    for via_retry in (False, True):
        with pytest.raises(IllegalTransition):
            check_transition(src, dst, via_retry=via_retry)


@pytest.mark.parametrize("via_retry", [False, True])
def test_allowed_sources_agree_with_the_table(via_retry: bool) -> None:
    table = RETRY_TABLE if via_retry else PLAIN_TABLE
    for i, dst in enumerate(STATES):
        expected = {src for src in STATES if table[src][i] == "A"}
        assert set(rules.allowed_sources(dst, via_retry=via_retry)) == expected, dst


# --- normalization -------------------------------------------------------------------

@pytest.mark.parametrize(("reported", "expected"), [
    ("running", "running"), ("in_progress", "running"),
    ("succeeded", "succeeded"), ("success", "succeeded"), ("completed", "succeeded"),
    ("failed", "failed"), ("error", "failed"),
    ("timed_out", "timed_out"), ("timeout", "timed_out"),
    ("  In_Progress ", "running"), ("SUCCESS", "succeeded"), ("Error\n", "failed"),
])
def test_status_aliases(reported: str, expected: str) -> None:
    assert normalize_status(reported) == expected


@pytest.mark.parametrize(("metadata", "expected"), [
    ({"result": "failed"}, "failed"),
    ({"result": "error"}, "failed"),
    ({"status": "failed"}, "failed"),
    ({"outcome": "ERROR "}, "failed"),
    ({"result": "timed_out"}, "timed_out"),
    ({"status": "timeout"}, "timed_out"),
    ({"outcome": "Timed_Out"}, "timed_out"),
    ({"result": "ok"}, "succeeded"),
    ({"result": "succeeded"}, "succeeded"),
    ({}, "succeeded"),
    (None, "succeeded"),
    # The reference reads result ?? status ?? outcome: only the first one set counts.
    ({"result": "ok", "status": "failed"}, "succeeded"),
    ({"result": None, "status": "failed"}, "failed"),
    ({"status": "timeout", "outcome": "failed"}, "timed_out"),
    ({"result": False, "outcome": "failed"}, "succeeded"),
    # A tag that is not a string, or metadata that is not a mapping, matches nothing.
    ({"result": ["failed"]}, "succeeded"),
    (["failed"], "succeeded"),
])
def test_completed_reads_the_metadata_tag(metadata: object, expected: str) -> None:
    assert normalize_status("completed", metadata) == expected


@pytest.mark.parametrize("reported", ["failed", "success", "running", "timeout"])
def test_metadata_tags_only_qualify_completed(reported: str) -> None:
    plain = normalize_status(reported)
    assert normalize_status(reported, {"result": "failed"}) == plain
    assert normalize_status(reported, {"outcome": "timeout"}) == plain


@pytest.mark.parametrize("reported", ["queued", "done", "", "succeed", "cancelled"])
def test_unknown_reported_statuses_are_refused(reported: str) -> None:
    with pytest.raises(ValidationError) as caught:
        normalize_status(reported)
    assert caught.value.code == "VALIDATION"


@pytest.mark.parametrize("reported", [None, 1, b"running", ["running"]])
def test_non_string_statuses_are_refused(reported: object) -> None:
    with pytest.raises(ValidationError):
        normalize_status(reported)


# --- next_values and retry_patch (REFERENCE.md section 2, "update status" and "retry") -

NOW = 1_700_000_000_000


def job(**overrides: Any) -> dict[str, Any]:
    """A current row as next_values and retry_patch read it."""
    row: dict[str, Any] = {
        "job_id": "j1", "supervisor_agent": "lead", "worker_agent": "w1",
        "topic": "assign.job", "task": "t", "payload": {"k": 1}, "status": "queued",
        "attempt": 1, "retry_count": 0, "max_retries": 2, "priority": 5,
        "ttl_ms": 50_000, "timeout_ms": 60_000, "deadline_ms": NOW + 5_000,
        "trace_id": "tr", "correlation_id": "co", "last_message_id": "m1",
        "result": None, "error": None, "created_at_ms": NOW - 1_000,
        "updated_at_ms": NOW - 1_000, "started_at_ms": None, "completed_at_ms": None,
        "last_retry_at_ms": None, "not_before_ms": None, "retry_backoff_ms": 0,
    }
    row.update(overrides)
    return row


def test_next_values_sets_status_and_updated_at_and_keeps_the_rest() -> None:
    values = next_values(job(), "running", {}, NOW)
    assert values["status"] == "running"
    assert values["updated_at_ms"] == NOW
    for name in ("supervisor_agent", "worker_agent", "topic", "task", "payload", "attempt",
                 "retry_count", "max_retries", "priority", "ttl_ms", "timeout_ms",
                 "trace_id", "correlation_id", "last_message_id", "result", "error",
                 "last_retry_at_ms", "not_before_ms", "retry_backoff_ms"):
        assert values[name] == job()[name], name


def test_deadline_named_in_the_patch_wins_even_when_terminal() -> None:
    assert next_values(job(), "succeeded", {"deadline_ms": NOW + 9}, NOW)["deadline_ms"] \
        == NOW + 9
    assert next_values(job(), "running", {"deadline_ms": None}, NOW)["deadline_ms"] is None


@pytest.mark.parametrize("terminal", ["succeeded", "failed", "timed_out"])
def test_terminal_clears_the_deadline_and_sets_completed_at(terminal: str) -> None:
    values = next_values(job(status="running"), terminal, {}, NOW)
    assert values["deadline_ms"] is None
    assert values["completed_at_ms"] == NOW
    kept = next_values(job(completed_at_ms=NOW - 7), terminal, {}, NOW)
    assert kept["completed_at_ms"] == NOW - 7


def test_running_without_a_deadline_gets_now_plus_timeout() -> None:
    values = next_values(job(deadline_ms=None), "running", {}, NOW)
    assert values["deadline_ms"] == NOW + 60_000
    with_new_timeout = next_values(job(deadline_ms=None), "running", {"timeout_ms": 2_000}, NOW)
    assert with_new_timeout["deadline_ms"] == NOW + 2_000


def test_running_with_a_deadline_keeps_it() -> None:
    assert next_values(job(), "running", {}, NOW)["deadline_ms"] == NOW + 5_000


def test_started_at_is_set_once_when_running() -> None:
    assert next_values(job(), "running", {}, NOW)["started_at_ms"] == NOW
    assert next_values(job(started_at_ms=NOW - 3), "running", {}, NOW)["started_at_ms"] \
        == NOW - 3
    assert next_values(job(), "succeeded", {}, NOW)["started_at_ms"] is None
    assert next_values(job(), "running", {"started_at_ms": 42}, NOW)["started_at_ms"] == 42


def test_a_field_named_with_none_clears_it_only_where_the_reference_clears() -> None:
    current = job(result={"r": 1}, error="e", last_retry_at_ms=NOW - 1, task="keep me")
    values = next_values(current, "running",
                         {"result": None, "error": None, "last_message_id": None,
                          "last_retry_at_ms": None, "task": None, "priority": None,
                          "payload": None, "attempt": None}, NOW)
    for name in ("result", "error", "last_message_id", "last_retry_at_ms"):
        assert values[name] is None, name
    assert values["task"] == "keep me"
    assert values["priority"] == 5
    assert values["payload"] == {"k": 1}
    assert values["attempt"] == 1


def test_patch_numbers_are_clamped_like_the_reference() -> None:
    values = next_values(job(), "running", {"priority": 42, "timeout_ms": 5,
                                            "ttl_ms": 10**12, "retry_count": -3,
                                            "attempt": 0}, NOW)
    assert values["priority"] == 9
    assert values["timeout_ms"] == 1_000
    assert values["ttl_ms"] == 86_400_000
    assert values["retry_count"] == 0
    assert values["attempt"] == 1  # 0 is not a number the reference keeps: current stays
    assert next_values(job(), "running", {"priority": "x"}, NOW)["priority"] == 5


def test_retry_patch_requeues_for_the_next_attempt() -> None:
    current = job(status="failed", attempt=2, retry_count=1, result={"partial": True},
                  error={"message": "boom"}, started_at_ms=NOW - 50, completed_at_ms=NOW - 9,
                  deadline_ms=None)
    patch = rules.retry_patch(current, {}, NOW)
    assert patch == {
        "retry_count": 2, "attempt": 3, "timeout_ms": 60_000, "ttl_ms": 50_000,
        "deadline_ms": NOW + 60_000, "completed_at_ms": None, "started_at_ms": None,
        "last_retry_at_ms": NOW, "result": None, "error": {"message": "boom"},
        "last_message_id": None, "not_before_ms": None,
    }
    values = next_values(current, "queued", patch, NOW)
    assert values["status"] == "queued"
    assert values["deadline_ms"] == NOW + 60_000
    assert values["last_message_id"] is None


def test_retry_patch_takes_named_fields() -> None:
    current = job(status="timed_out", attempt=2, error="old")
    patch = rules.retry_patch(current, {"error": None, "result": {"r": 1}, "timeout_ms": 0,
                                        "attempt": 1, "retry_count": 7, "ttl_ms": 3_000}, NOW)
    assert patch["error"] is None
    assert patch["result"] == {"r": 1}
    assert patch["timeout_ms"] == 1_000  # named 0 is clamped, not replaced by the current
    assert patch["deadline_ms"] == NOW + 1_000
    assert patch["attempt"] == 3  # never below current + 1
    assert patch["retry_count"] == 7
    assert patch["ttl_ms"] == 3_000
    assert rules.retry_patch(current, {"attempt": 9}, NOW)["attempt"] == 9


def test_unknown_patch_fields_are_refused() -> None:
    rules.check_patch({"result": 1, "deadline_ms": None})
    with pytest.raises(ValidationError, match="statuss"):
        rules.check_patch({"statuss": "queued"})
    with pytest.raises(ValidationError):
        rules.check_patch({"job_id": "other"})


@pytest.mark.parametrize(("value", "expected"), [
    (500, 1_000), (1_000, 1_000), (30_000, 30_000), (86_400_001, 86_400_000),
    # JavaScript's Number(null) is 0 (clamped up to 1 s); NaN falls back to the default.
    ("2500", 2_500), ("soon", 600_000), (None, 1_000), (float("nan"), 600_000),
    ("1_000", 600_000), (" 2e3 ", 2_000), ("0x7D0", 2_000), ("-Infinity", 600_000),
])
def test_clamp_timeout(value: object, expected: int) -> None:
    assert rules.clamp_timeout(value) == expected


def test_status_event_prefers_result_then_error() -> None:
    assert rules.status_event(job(status="succeeded", result={"r": 1}, error="e",
                                  updated_at_ms=1_700_000_000_123)) == {
        "job_id": "j1", "status": "succeeded", "result": {"r": 1},
        "timestamp": "2023-11-14T22:13:20.123Z"}
    assert rules.status_event(job(error="e"))["result"] == "e"
    assert rules.status_event(job(result=0, error="e"))["result"] == 0
    assert rules.status_event(job())["result"] is None


@pytest.mark.parametrize(("ms", "iso"), [(0, "1970-01-01T00:00:00.000Z"),
                                         (1_700_000_000_005, "2023-11-14T22:13:20.005Z"),
                                         (1_709_251_199_999, "2024-02-29T23:59:59.999Z"),
                                         # (node's own answers for years past 9999 and
                                         # before 0: datetime cannot hold them)
                                         (-1, "1969-12-31T23:59:59.999Z"),
                                         (10**15, "+033658-09-27T01:46:40.000Z"),
                                         (253_402_300_800_000, "+010000-01-01T00:00:00.000Z"),
                                         (-62_198_755_200_000, "-000001-01-01T00:00:00.000Z"),
                                         (-62_167_219_200_001, "-000001-12-31T23:59:59.999Z"),
                                         (-8_640_000_000_000_000,
                                          "-271821-04-20T00:00:00.000Z")])
def test_iso_timestamp(ms: int, iso: str) -> None:
    assert rules.iso_timestamp(ms) == iso


def test_terminal_and_active_sets() -> None:
    assert set(rules.TERMINAL) == {"succeeded", "failed", "timed_out", "cancelled"}
    assert set(rules.ACTIVE) == {"queued", "running"}


@pytest.mark.parametrize(("src", "dst", "want"), _cases(PUT_BACK_TABLE))
def test_a_put_back_moves_running_back_to_queued_only(src: str, dst: str, want: str) -> None:
    if want == "-":
        with pytest.raises(IllegalTransition):
            check_transition(src, dst, via_put_back=True)
    else:
        assert check_transition(src, dst, via_put_back=True) is (
            Move.NOOP if want == "N" else Move.APPLY)
    assert rules.allowed_sources("queued", via_put_back=True) == ("running",)


def test_the_one_statement_moves_take_their_sources_from_the_table() -> None:
    assert rules.moving_sources("running") == ("queued",)
    for end in ("succeeded", "failed", "timed_out"):
        assert rules.moving_sources(end) == ("queued", "running") == rules.ACTIVE
    assert rules.CLAIMABLE == "queued"


@pytest.mark.parametrize(("started", "deadline", "want_started", "want_deadline"), [
    (1_000, 1_000 + 60_000, None, None),      # both set by the claim: cleared again
    (500, 1_000 + 60_000, 500, None),         # started before the claim: kept
    (1_000, 99_999, None, 99_999),            # a deadline of its own: kept
    (None, None, None, None),
])
def test_put_back_values_undo_what_the_claim_set(
        started: int | None, deadline: int | None, want_started: int | None,
        want_deadline: int | None) -> None:
    current = {"started_at_ms": started, "deadline_ms": deadline, "timeout_ms": 60_000}
    assert rules.put_back_values(current, 1_000, 2_000) == {
        "status": "queued", "updated_at_ms": 2_000, "started_at_ms": want_started,
        "deadline_ms": want_deadline}


@pytest.mark.parametrize(("backoff", "retries_before", "delay"), [
    (0, 0, 0), (0, 5, 0),
    (1_000, 0, 1_000), (1_000, 1, 2_000), (1_000, 3, 8_000),
    (1_000, 30, rules.MAX_BACKOFF_MS), (1_000, 10**6, rules.MAX_BACKOFF_MS),
    (rules.MAX_BACKOFF_MS * 5, 0, rules.MAX_BACKOFF_MS),
])
def test_a_retrys_delay_doubles_up_to_a_day(backoff: int, retries_before: int,
                                           delay: int) -> None:
    assert rules.retry_delay(backoff, retries_before) == delay


def test_a_retry_with_back_off_waits_and_its_deadline_counts_from_then() -> None:
    current = job(status="failed", attempt=2, retry_count=1, retry_backoff_ms=1_000)
    patch = rules.retry_patch(current, {}, NOW)
    assert patch["not_before_ms"] == NOW + 2_000  # the second retry: twice the back-off
    assert patch["deadline_ms"] == NOW + 2_000 + 60_000
    assert rules.retry_patch(current, {"retry_backoff_ms": 0}, NOW)["not_before_ms"] is None
    values = next_values(current, "queued", patch, NOW)
    assert (values["not_before_ms"], values["retry_backoff_ms"]) == (NOW + 2_000, 1_000)
