"""The documentation in docs/ stays true: it builds with ``mkdocs build --strict``, its
Python examples run, and every ``hubstore ...`` command line it shows exists."""

from __future__ import annotations

import html
import importlib.util
import inspect
import pydoc
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

import hubstore
from hubstore import errors
from hubstore.cli import main
from hubstore.operations import store_methods

CHECKOUT = Path(__file__).resolve().parents[2]
DOCS = CHECKOUT / "docs"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text()
    return [body for lang, body in FENCE.findall(text) if lang == language]


NO_MKDOCS = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                               reason='mkdocs is not installed (pip install -e ".[docs]")')
ID = re.compile(r"""\sid=["']([^"']+)["']""")

#: What the API page shows of each class: hubstore's public contract (its API.md), and the
#: extras the other pages tell callers to use (listen_url: waiting.md's PgBouncer part;
#: uow.connection: concurrency.md; run_sync: the async way to a Session). Nothing else:
#: no helper of the services, no private name. The store methods are the ones
#: HubOperations lists (docs/api.md's members are written from it too).
STORE_METHODS = {"open", "close", "unit_of_work", "on_assign_status_change", "listen_url",
                 *store_methods()}
MODELS = {"Agent", "Message", "MessageInbox", "HumanRequest", "DeadLetter", "AssignJob",
          "PipelineState", "ReflexionEntry"}
SHOWN = {
    # what `from hubstore import ...` offers, but the errors (shown in hubstore.errors)
    "hubstore": set(hubstore.__all__) - set(errors.__all__) - {"__version__"},
    "hubstore.HubStore": STORE_METHODS,
    "hubstore.UnitOfWork": {"session", "connection"},
    "hubstore.MessageFeed": {"cursor", "next"},
    "hubstore.errors": set(errors.__all__),
    "hubstore.aio.AsyncHubStore": {"open", "close", "unit_of_work", "on_assign_status_change",
                                   "listen_url", "wait_for_assign", "wait_for_assigns",
                                   "wait_for_result", "message_feed", "run_sync"},
    "hubstore.aio.AsyncUnitOfWork": {"run_sync"},
    "hubstore.aio.AsyncMessageFeed": {"cursor", "next"},
    "hubstore.models": MODELS | {"AssignLimit", "AssignSchedule", "metadata"},
    "hubstore.testing": {"hub_store", "server_url", "URL_VARIABLE"},
    "hubstore.testing.factories": {f"{m}Factory" for m in MODELS} | {"bind", "unbind"},
    "hubstore.migrations": {"upgrade", "upgrade_and_report", "MigrationReport", "downgrade",
                            "current", "current_version", "Located", "head",
                            "include_app_name", "include_app_object"},
    "hubstore.maintenance": {"run_maintenance", "arun_maintenance", "sweep_once"},
    "hubstore.web": {"create_app"},
    "hubstore.reflexion": {"normalize_error", "recalc_confidence", "lookup_solution",
                           "learn_from_error", "report_outcome"},
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation, built once with ``mkdocs build --strict``."""
    folder = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                          "--site-dir", str(folder)], cwd=CHECKOUT,
                         capture_output=True, text=True, check=False, timeout=300,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)})
    assert run.returncode == 0, run.stderr
    return folder


@pytest.mark.slow
@NO_MKDOCS
def test_mkdocs_build_strict(site: Path) -> None:
    api = (site / "api" / "index.html").read_text()
    for name in ("register_agent", "prune_messages", "ValidationError", "MessageFeed",
                 "hub_store", "AgentFactory", "AsyncHubStore", "AssignJob", "uuidv7"):
        assert name in api, f"the API reference lacks {name}"


@pytest.mark.slow
@NO_MKDOCS
def test_no_page_has_a_duplicate_id(site: Path) -> None:
    """A link to a heading goes to the first element with its id (issue 26: the API page
    rendered the async classes twice, 14 ids each used twice)."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    for page in pages:
        ids = ID.findall(page.read_text(encoding="utf-8"))
        twice = sorted({i for i in ids if ids.count(i) > 1})
        assert not twice, f"{page.relative_to(site)}: {twice}"


@pytest.mark.slow
@NO_MKDOCS
def test_the_api_page_shows_the_contract_only(site: Path) -> None:
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    headings = re.findall(r'<h[2-6] id="(hubstore\.[\w.]+)"', api)
    for owner, names in SHOWN.items():
        shown = {h[len(owner) + 1:] for h in headings
                 if h.startswith(owner + ".") and "." not in h[len(owner) + 1:]}
        assert shown == names, (f"{owner}: not shown {sorted(names - shown)}, "
                                f"shown but not public {sorted(shown - names)}")
    assert all("._" not in h for h in headings), "a private name is shown"
    columns = {h.rpartition(".")[2] for h in headings if h.startswith("hubstore.models.AssignJob.")}
    assert {"job_id", "status", "payload", "result", "to_dict"} <= columns
    assert not columns & {"from_row", "blank", "column_keys", "key_column", "key_attr",
                          "metadata"}
    text = re.sub(r"<[^>]+>", "", api)  # nor an internal constructor's parameters
    assert "single_statement" not in text and "db: Database" not in text


@pytest.mark.slow
@NO_MKDOCS
def test_the_api_page_renders_docstring_examples_as_code(site: Path) -> None:
    """Doctest blocks are code without their directives; Sphinx roles are not shown raw."""
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "doctest" not in api
    assert "<blockquote>" not in api  # what Markdown makes of a bare >>> line
    assert not re.search(r":(class|meth|func|attr|mod|exc):", api)
    assert 'worker-1' in api and api.count('class="gp"') >= 2  # the examples, as pycon


@pytest.mark.slow
@NO_MKDOCS
def test_every_store_method_shows_its_signature_and_docstring(site: Path) -> None:
    """Issue 40: each store method rendered as ``set_assign_limit =
    limits.set_assign_limit``, with no signature and no docstring. Now as a method: its
    parameters without the scope, its return type, its docstring."""
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<[^>]+>", "", api))
    assert ("set_assign_limit(\n    key: str,\n    max_running: int | None = None,\n"
            "    max_starts: int | None = None,\n    per_ms: int | None = None,\n"
            ") -> AssignLimit") in text
    assert "Set (or replace) the limit of key" in text
    assert "= limits.set_assign_limit" not in text and "scope: Scope" not in text
    for name, function in store_methods().items():
        heading = api.find(f'id="hubstore.HubStore.{name}"')
        assert heading >= 0, name
        end = api.find('class="doc doc-heading"', heading + len(name) + 40)
        shown = html.unescape(re.sub(r"<[^>]+>", "", api[heading:end]))
        assert f"{name}(" in shown, name  # a signature, not an attribute's value
        summary = (function.__doc__ or "").split("\n")[0].split("``")[0].strip()
        assert " ".join(summary.split()[:3]) in " ".join(shown.split()), name


def test_store_methods_show_their_signature_without_the_scope() -> None:
    """help(HubStore.set_assign_limit) and inspect.signature show ``self`` where the
    service function takes its scope, as for any method; the bound method leaves it
    out. The method is the service function's code itself: a call costs the same."""
    from hubstore import HubStore
    from hubstore.services.assigns import limits

    assert str(inspect.signature(HubStore.set_assign_limit)) == (
        "(self, key: 'str', max_running: 'int | None' = None, max_starts: 'int | None' = "
        "None, per_ms: 'int | None' = None) -> 'AssignLimit'")
    shown = re.sub(".\b", "", pydoc.render_doc(HubStore.set_assign_limit,
                                                renderer=pydoc.TextDoc()))
    assert "set_assign_limit(self, key: 'str'," in shown and "scope" not in shown
    assert HubStore.set_assign_limit.__code__ is limits.set_assign_limit.__code__
    assert next(iter(inspect.signature(limits.set_assign_limit).parameters)) == "scope"
    for name, function in store_methods().items():
        method = getattr(HubStore, name)
        first, *rest = inspect.signature(method).parameters.values()
        assert first.name == "self" and first.annotation is inspect.Parameter.empty, name
        assert rest == list(inspect.signature(function).parameters.values())[1:], name
        assert "scope" not in inspect.signature(getattr(HubStore, name)).parameters


@pytest.mark.slow
@NO_MKDOCS
def test_a_duplicate_id_fails_the_strict_build(tmp_path: Path) -> None:
    """mkdocs.yml's hook (tools/docs_build.py) makes a duplicate id a build warning."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        '# Page\n\n<span id="twice"></span>\n\n<span id="twice"></span>\n')
    (tmp_path / "mkdocs.yml").write_text(
        f"site_name: t\nhooks:\n  - {CHECKOUT / 'tools' / 'docs_build.py'}\n")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                          "--site-dir", str(tmp_path / "site")], cwd=tmp_path,
                         capture_output=True, text=True, check=False, timeout=300,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)})
    assert run.returncode != 0
    assert "index.md: 1 ids are used more than once (each must be unique): twice" in run.stderr


def test_docstrings_are_rendered_for_markdown() -> None:
    pytest.importorskip("griffe", reason='griffe comes with mkdocstrings (".[docs]")')
    from tools.docs_build import doctest_blocks_as_code, roles_as_code

    docstring = ("The store.\n\n"
                 ">>> store = open()  # doctest: +SKIP\n"
                 "... x = 1  #doctest:+ELLIPSIS\n"
                 "'out'  # doctest: kept, not a >>> line\n\n"
                 "```python\n>>> fenced  # doctest: +SKIP\n```\n"
                 "Not a block: a >>> b  # doctest: +SKIP")
    assert doctest_blocks_as_code(docstring) == (
        "The store.\n\n"
        "```pycon\n>>> store = open()\n... x = 1\n'out'  # doctest: kept, not a >>> line\n```\n\n"
        "```python\n>>> fenced  # doctest: +SKIP\n```\n"
        "Not a block: a >>> b  # doctest: +SKIP")
    assert roles_as_code("see :class:`~hubstore.uow.UnitOfWork`, :meth:`HubStore.open` and "
                         ":py:attr:`x`") == "see `UnitOfWork`, `HubStore.open` and `x`"


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
    assert not isinstance(command, click.Group) or command.invoke_without_command, (
        f"{line!r} names no command")
    for option in re.findall(r"(?<!\S)(--?[a-z][\w-]*)", " ".join(rest)):
        assert option in _options(command), f"{line!r}: {command.name} has no option {option}"


#: A revision number named as the head ("head 0011", "0011 (head)", "head": "0011", a
#: command's report of reaching it): the head moves with each release that adds a
#: revision, so the pages say "the head", or write `<head>` where output shows it.
HEAD_BY_NUMBER = re.compile(
    r"\bhead(?: is)? \d{4}\b|\b\d{4} \(head\)|\"head\": \"\d{4}\"|"
    r"\bupgraded (?:from \S+ )?to \d{4}\b|\bdowngraded from \d{4}\b|"
    r"\bhealthy \(revision \d{4}\)")


def test_no_page_names_the_head_by_its_number() -> None:
    assert all(HEAD_BY_NUMBER.search(line) for line in (
        "# sqlite:///hub.db: already at head 0011, nothing to do",
        "`0011 (head)`, `0003 (head is 0011)`", '{"head": "0011"}',
        "adopted triflux schema 3 as 0001, upgraded to 0011",
        "downgraded from 0011 to 0005", "sqlite:///hub.db: healthy (revision 0011)"))
    assert not HEAD_BY_NUMBER.search("hubstore db upgrade 0005:head --sql")
    pages = [CHECKOUT / "README.md", *sorted(DOCS.glob("*.md"))]
    found = [f"{page.name}:{number}: {line.strip()}" for page in pages
             for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if HEAD_BY_NUMBER.search(line)]
    assert found == []


def test_the_first_hub_example_runs(tmp_path: Path) -> None:
    (example,) = blocks("index.md", "python")
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    upgrade = subprocess.run([sys.executable, "-m", "hubstore", "db", "upgrade", "--url", url],
                             capture_output=True, text=True, check=False)
    assert upgrade.returncode == 0, upgrade.stderr
    run = subprocess.run([sys.executable, "-c", example.replace("sqlite:///hub.db", url)],
                         capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout) == (0, "completed\n"), run.stderr
