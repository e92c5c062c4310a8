"""The package's architecture, as docs/architecture.md draws it: layers, no import
circle, dialect differences in the dialect components, SQLAlchemy's private API in one
module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

PACKAGE = Path(__file__).resolve().parents[1] / "hubstore"
ROOT = PACKAGE.parent


def test_each_module_imports_only_the_layers_below_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """pyproject.toml's import-linter contract (type-only imports count)."""
    exit_code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                             no_logo=True)
    out = capsys.readouterr().out
    assert exit_code == 0, out
    assert "1 kept, 0 broken" in out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_in_the_package() -> None:
    graph = grimp.build_graph("hubstore", exclude_type_checking_imports=False)
    modules = {m for m in graph.modules if m != "hubstore"}  # (the root only re-exports)
    edges = {m: {other for other in graph.find_modules_directly_imported_by(m)
                 if other in modules} for m in modules}
    assert _cycles(edges) == []
    # The check itself finds a circle where there is one.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _string_constants(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_services_and_the_transaction_never_test_the_dialects_name() -> None:
    """Dialect differences live in hubstore/dialects (one component per dialect)."""
    files = [*sorted((PACKAGE / "services").glob("*.py")), PACKAGE / "transaction.py",
             PACKAGE / "operations.py", PACKAGE / "uow.py"]
    named = {str(path.relative_to(ROOT)): sorted(_string_constants(path)
                                                 & {"sqlite", "postgresql"})
             for path in files}
    assert {name: found for name, found in named.items() if found} == {}


#: SQLAlchemy's private API that hubstore uses: allowed in hubstore/execution.py only.
PRIVATE_SQLALCHEMY = re.compile(
    r"\b(_result_columns|_handle_dbapi_exception|InstanceState|DEFAULT_STATE_ATTR|"
    r"sqlalchemy\.orm\.base)\b|\._echo\b")


def test_sqlalchemys_private_api_is_used_in_the_execution_module_only() -> None:
    users = sorted(str(path.relative_to(ROOT)) for path in PACKAGE.rglob("*.py")
                   if PRIVATE_SQLALCHEMY.search(path.read_text(encoding="utf-8")))
    assert users == ["hubstore/execution.py"]


def test_services_run_statements_through_the_execution_module_only() -> None:
    """No service reaches past hubstore.execution to the connection, the Session or the
    driver, and none begins a transaction itself (its Scope's unit of work does)."""
    reached = {}
    for path in sorted((PACKAGE / "services").glob("*.py")):
        found = sorted({f"{node.value.id}.{node.attr}"
                        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                        if isinstance(node, ast.Attribute)
                        and isinstance(node.value, ast.Name) and node.value.id == "uow"
                        and node.attr in ("connection", "session", "driver", "begin")})
        if found:
            reached[path.name] = found
    assert reached == {}
