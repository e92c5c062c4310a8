"""The documentation in docs/ stays true: it builds with ``mkdocs build --strict``, its
Python examples run, and every ``hubstore ...`` command line it shows exists."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from hubstore.cli import main

CHECKOUT = Path(__file__).resolve().parents[1]
DOCS = CHECKOUT / "docs"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text()
    return [body for lang, body in FENCE.findall(text) if lang == language]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason='mkdocs is not installed (pip install -e ".[docs]")')
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                          "--site-dir", str(tmp_path / "site")], cwd=CHECKOUT,
                         capture_output=True, text=True, check=False, timeout=300,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)})
    assert run.returncode == 0, run.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("register_agent", "prune_messages", "ValidationError", "MessageFeed",
                 "hub_store", "AgentFactory", "AsyncHubStore"):
        assert name in api, f"the API reference lacks {name}"


def test_every_page_is_in_the_navigation() -> None:
    nav = (CHECKOUT / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*([\w-]+\.md)\s*$", nav, re.M))
    committed = subprocess.run(["git", "ls-files", "docs"], cwd=CHECKOUT, capture_output=True,
                               text=True, check=True).stdout.split()
    pages = {Path(p).name for p in committed if p.endswith(".md")}
    assert listed <= {p.name for p in DOCS.glob("*.md")}  # nothing listed is missing
    assert {"index.md", "api.md", "behaviour.md", "migrations.md", "operations.md",
            "testing.md"} <= listed
    assert pages <= listed, f"pages left out of mkdocs.yml's nav: {pages - listed}"


def _command_lines() -> list[str]:
    """The ``hubstore`` command lines of the pages' shell, text and cron blocks."""
    lines = []
    for page in sorted(DOCS.glob("*.md")):
        for language in ("bash", "text", "cron"):
            for body in blocks(page.name, language):
                for raw in body.splitlines():
                    line = raw.strip().removeprefix("$ ")
                    if language == "cron":
                        line = " ".join(line.split()[5:])
                    if line.startswith("hubstore "):
                        lines.append(line.split(" #")[0].split(" |")[0].split("|")[0].strip())
    return lines


def _options(command: click.Command) -> dict[str, click.Parameter]:
    return {o: p for p in command.params for o in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("line", _command_lines())
def test_every_command_line_shown_exists(line: str) -> None:
    command: click.Command = main
    words = iter(shlex.split(line.replace("$(date +%F)", "DATE"))[1:])
    rest: list[str] = []
    for word in words:
        if isinstance(command, click.Group) and word.startswith("-"):  # a group's option
            option = _options(command).get(word)
            assert option is not None, f"{line!r}: {command.name} has no option {word}"
            if isinstance(option, click.Option) and not (option.is_flag or option.count):
                next(words)  # its value
            continue
        if not isinstance(command, click.Group) or word not in command.commands:
            rest = [word, *words]
            break
        command = command.commands[word]
    assert not isinstance(command, click.Group), f"{line!r} names no command"
    for option in re.findall(r"(?<!\S)(--?[a-z][\w-]*)", " ".join(rest)):
        assert option in _options(command), f"{line!r}: {command.name} has no option {option}"


def test_the_first_hub_example_runs(tmp_path: Path) -> None:
    (example,) = blocks("index.md", "python")
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    upgrade = subprocess.run([sys.executable, "-m", "hubstore", "db", "upgrade", "--url", url],
                             capture_output=True, text=True, check=False)
    assert upgrade.returncode == 0, upgrade.stderr
    run = subprocess.run([sys.executable, "-c", example.replace("sqlite:///hub.db", url)],
                         capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout) == (0, "completed\n"), run.stderr


def test_the_testing_page_examples_pass(pytester: pytest.Pytester) -> None:
    tests = "\n\n".join(b for b in blocks("testing.md", "python") if "def test_" in b)
    pytester.makepyfile(test_user=tests)
    result = pytester.runpytest_subprocess("-p", "hubstore.testing", "-q",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
