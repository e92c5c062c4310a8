"""Every Python example of README.md and docs/*.md runs, and passes ``mypy --strict``.

An example is a fenced ``python`` block. By default it is a program of its own: it runs
with ``python`` in an empty temporary folder, as printed, so its ``sqlite:///hub.db`` is a
new SQLite file there: an example that needs a migrated database says so where a reader
sees it (issue 40: an HTML comment made the test migrate it, and a reader got
SchemaNotCurrent). Either it opens the store with ``auto_migrate=True``, or its first
line names the command to run first, which the test runs in that folder first:

    # First: hubstore db upgrade --url sqlite:///hub.db   (why, in parentheses)

An HTML comment on the line just before the block says how else it runs:

    <!-- example: continued, migrated -->

- ``continued``: the example goes on from the page's previous one (one program, one
  folder, one namespace; one module for mypy).
- ``postgresql``: it runs against a temporary empty PostgreSQL database: each
  ``postgresql://`` and ``postgresql+psycopg://`` URL in it is pointed at that
  database, its query string kept. Skipped where the test server is
  unreachable, as every PostgreSQL test.
- ``pytest``: a file of a user's test suite, named by its first line (``# conftest.py``),
  else ``test_example_N.py``; ``continued`` files are of the same suite. ``pytest`` runs
  the suite in a temporary folder, and every test in it must pass.
- ``not run: REASON``: type-checked only. For snippets that cannot run; keep them few.

When the paragraph after a program's last block is ``prints`` followed by a ``text``
block, the program's output must be exactly that block.

mypy runs once over every example (each program one module), strict, with no
configuration of this project: as a user's ``mypy --strict`` would.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from tests.conftest import PostgresDatabases

CHECKOUT = Path(__file__).resolve().parents[2]
PAGES = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]
PYTHON = {"python", "py", "python3"}
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)"
                   r"^(?P=indent)```[ ]*$", re.S | re.M)
MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<words>.*?)\s*-->\s*$")
OPTIONS = {"continued", "postgresql", "pytest", "not run"}
#: A program's first line that names the command to run before it (in its folder).
FIRST = re.compile(r"\A# First: (?P<command>hubstore\s[^\n]*?)(?:\s+\([^\n]*\))?[ ]*\n")
PRINTS = re.compile(r"\s*\n[^\n]*\bprints:?[ ]*\n\s*\n```text\n(?P<output>.*?)^```", re.S | re.M)
PG_URL = re.compile(r"(?P<scheme>postgresql(?:\+psycopg)?://)[^/\s\"']+/[\w-]+")
FILE_NAME = re.compile(r"\A#\s*(?P<name>\w+\.py)\s*\n")


def shown(page: Path) -> str:
    """The page's name in messages: its path in the checkout."""
    return str(page.relative_to(CHECKOUT)) if page.is_relative_to(CHECKOUT) else page.name


@dataclass
class Example:
    page: Path
    line: int
    source: str
    options: dict[str, str]

    @property
    def where(self) -> str:
        return f"{shown(self.page)}:{self.line}"


@dataclass
class Program:
    """Examples run together: one program, or the files of one pytest suite."""

    examples: list[Example]
    output: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return self.examples[0].where

    @property
    def slug(self) -> str:
        first = self.examples[0]
        return re.sub(r"\W", "_", f"{first.page.stem}_{first.line}").lower()

    @property
    def source(self) -> str:
        return "".join(e.source for e in self.examples)

    def locate(self, line: int) -> str:
        """Where line ``line`` of :attr:`source` is on its page."""
        for example in self.examples:
            lines = example.source.count("\n")
            if line <= lines:
                return f"{shown(example.page)}:{example.line + line}"
            line -= lines
        return f"{self.where} (line {line} after its end)"

    def files(self) -> dict[str, str]:
        """A pytest suite's files by name."""
        named: dict[str, str] = {}
        for n, example in enumerate(self.examples, 1):
            match = FILE_NAME.match(example.source)
            name = match.group("name") if match else f"test_example_{n}.py"
            assert name not in named, f"{example.where}: a second {name} in one suite"
            named[name] = example.source
        return named


def parse_options(words: str, where: str) -> dict[str, str]:
    options = {}
    for word in filter(None, (w.strip() for w in words.split(","))):
        key, _, value = (part.strip() for part in word.partition(":"))
        if key not in OPTIONS:
            raise ValueError(f"{where}: unknown example option {key!r} (known: {OPTIONS})")
        options[key] = value
    return options


def examples(page: Path) -> list[tuple[Example, int]]:
    """The page's Python examples, each with the offset where its block ends."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        if match.group("lang") not in PYTHON:
            continue
        line = text.count("\n", 0, match.start()) + 1
        where = f"{shown(page)}:{line}"
        before = text[:match.start()].rstrip("\n").rpartition("\n")[2]
        marker = MARKER.match(before)
        options = parse_options(marker.group("words"), where) if marker else {}
        indent = len(match.group("indent"))
        body = "".join(raw[indent:] for raw in match.group("body").splitlines(keepends=True))
        found.append((Example(page, line, body, options), match.end()))
    return found


def programs(pages: list[Path]) -> list[Program]:
    collected: list[Program] = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        previous: Program | None = None
        for example, end in examples(page):
            if "continued" in example.options:
                if previous is None:
                    raise ValueError(f"{example.where}: 'continued' with no example before it")
                if ("pytest" in example.options) != ("pytest" in previous.options):
                    raise ValueError(f"{example.where}: continues an example of another kind")
                previous.examples.append(example)
            else:
                previous = Program([example])
                collected.append(previous)
            previous.options.update(example.options)
            printed = PRINTS.match(text, end)
            previous.output = printed.group("output") if printed else None
    return collected


PROGRAMS = programs(PAGES)
RUN = [p for p in PROGRAMS if "not run" not in p.options]


def test_the_first_line_names_the_command_to_run_first() -> None:
    found = FIRST.match("# First: hubstore db upgrade --url sqlite:///hub.db   (above)\nx\n")
    assert found is not None
    assert found.group("command") == "hubstore db upgrade --url sqlite:///hub.db"
    plain = FIRST.match("# First: hubstore db upgrade --url sqlite:///hub.db\n")
    assert plain is not None and plain.group("command").endswith("hub.db")


def test_the_examples_are_found() -> None:
    """Every page's python blocks are here (none is lost to a stray fence)."""
    for page in PAGES:
        shown = len(re.findall(r"^ *```py(?:thon3?)?\s*$", page.read_text(encoding="utf-8"),
                               re.M))
        assert len(examples(page)) == shown, page
    assert sum(len(p.examples) for p in PROGRAMS) >= 18
    not_run = [p.where for p in PROGRAMS if "not run" in p.options]
    assert len(not_run) <= 2, f"keep the snippets that cannot run few: {not_run}"
    for program in PROGRAMS:
        if "not run" in program.options:
            assert program.options["not run"], f"{program.where}: say why it is not run"


def test_the_markers_say_how_examples_run(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\n"
        "<!-- example: continued -->\n```python\nprint(x)\n```\n\nprints\n\n```text\n1\n```\n\n"
        "<!-- example: not run: it waits forever -->\n```python\nwait()\n```\n\n"
        "- in a list:\n\n    <!-- example: pytest -->\n    ```python\n    # conftest.py\n"
        "    pytest_plugins = []\n    ```\n"
        "<!-- example: pytest, continued -->\n```python\ndef test_a() -> None: ...\n```\n",
        encoding="utf-8")
    first, waits, suite = programs([page])
    assert (first.source, first.output, first.where) == ("x = 1\nprint(x)\n", "1\n", "page.md:1")
    assert first.locate(2) == "page.md:7"
    assert waits.options == {"not run": "it waits forever"}
    assert list(suite.files()) == ["conftest.py", "test_example_2.py"]
    assert suite.files()["conftest.py"] == "# conftest.py\npytest_plugins = []\n"
    page.write_text("<!-- example: contiued -->\n```python\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown example option 'contiued'"):
        programs([page])


def clean_environment() -> dict[str, str]:
    """This environment without the variables that would point hubstore elsewhere."""
    return {k: v for k, v in os.environ.items()
            if k not in {"HUBSTORE_URL", "HUBSTORE_TEST_URL", "PYTEST_ADDOPTS"}}


def run(command: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False,
                          timeout=300, env=clean_environment())


@pytest.mark.parametrize("program", RUN, ids=[p.where for p in RUN])
def test_the_example_runs(program: Program, tmp_path: Path, request: pytest.FixtureRequest
                          ) -> None:
    source = program.source
    if "postgresql" in program.options:
        postgres: PostgresDatabases = request.getfixturevalue("postgres")
        url = postgres.create("hubstore_doc")
        request.addfinalizer(lambda: postgres.drop(url))
        source = point_at(source, url)
    first = FIRST.match(source)
    if first is not None:  # the command the example's first line says to run first
        done = run([sys.executable, "-m", *shlex.split(first.group("command"))], tmp_path)
        assert done.returncode == 0, f"{program.where}: {first.group('command')}:\n" \
                                     f"{done.stderr}"
    if "pytest" in program.options:
        files = program.files()
        for name, text in files.items():
            (tmp_path / name).write_text(text, encoding="utf-8")
        done = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], tmp_path)
        tests = sum(len(re.findall(r"^def test_", text, re.M)) for text in files.values())
        assert done.returncode == 0, f"{program.where}:\n{done.stdout}\n{done.stderr}"
        assert re.search(rf"\b{tests} passed\b", done.stdout), done.stdout
        return
    (tmp_path / "example.py").write_text(source, encoding="utf-8")
    done = run([sys.executable, "example.py"], tmp_path)
    assert done.returncode == 0, f"{program.where}:\n{done.stderr}"
    if program.output is not None:
        assert done.stdout == program.output, f"{program.where} prints otherwise"


def point_at(source: str, url: URL) -> str:
    """The source with its PostgreSQL URLs pointed at ``url`` (their query strings kept)."""
    server = url.render_as_string(hide_password=False).split("://", 1)[1]
    pointed = PG_URL.sub(lambda m: m.group("scheme") + server, source)
    assert pointed != source, "a PostgreSQL example names no PostgreSQL URL"
    return pointed


def test_every_example_passes_mypy_strict(tmp_path: Path, request: pytest.FixtureRequest
                                          ) -> None:
    api = pytest.importorskip("mypy.api")
    modules: dict[str, Program] = {}  # file name: its program (a pytest file: its example)
    for program in PROGRAMS:
        if "pytest" in program.options:
            for example, (name, text) in zip(program.examples, program.files().items(),
                                             strict=True):
                modules[f"{program.slug}__{name}"] = Program([example])
                (tmp_path / f"{program.slug}__{name}").write_text(text, encoding="utf-8")
        else:
            modules[f"{program.slug}.py"] = program
            (tmp_path / f"{program.slug}.py").write_text(program.source, encoding="utf-8")
    config = tmp_path / "mypy.ini"  # none of this project's settings: a user's mypy
    config.write_text("[mypy]\n", encoding="utf-8")
    store = getattr(request.config, "cache", None)  # (none with -p no:cacheprovider)
    cache = store.mkdir("mypy-doc-examples") if store is not None else tmp_path / "cache"
    out, err, status = api.run(["--strict", "--config-file", str(config), "--cache-dir",
                                str(cache), "--no-error-summary", "--show-error-codes",
                                *(str(tmp_path / name) for name in modules)])
    assert not err, err

    def on_the_page(found: re.Match[str]) -> str:
        return modules[Path(found.group(1)).name].locate(int(found.group(2))) + ":"

    assert status == 0, re.sub(r"^(\S+\.py):(\d+):", on_the_page, out, flags=re.M)
