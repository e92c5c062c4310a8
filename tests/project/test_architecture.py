"""The package's architecture, as docs/architecture.md draws it: layers, no import
circle, dialect differences in the dialect components, SQLAlchemy's private API in one
module, and how a statement runs (services through hubstore.execution only, each
Prepared built once)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

PACKAGE = Path(__file__).resolve().parents[2] / "hubstore"
ROOT = PACKAGE.parent


def test_each_module_imports_only_the_layers_below_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """pyproject.toml's import-linter contracts: the package's layers, and the layers inside
    hubstore/migrations (type-only imports count)."""
    exit_code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                             no_logo=True)
    out = capsys.readouterr().out
    assert exit_code == 0, out
    assert "3 kept, 0 broken" in out


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
    files = [*sorted((PACKAGE / "services").rglob("*.py")), PACKAGE / "transaction.py",
             PACKAGE / "operations.py", PACKAGE / "uow.py"]
    named = {str(path.relative_to(ROOT)): sorted(_string_constants(path)
                                                 & {"sqlite", "postgresql"})
             for path in files}
    assert {name: found for name, found in named.items() if found} == {}


#: A PostgreSQL-only SQL function called by name (func.pg_..., func.jsonb_...).
DIALECT_FUNCTION = re.compile(r"\bfunc\.(pg_\w+|jsonb_\w+)")


def test_services_call_no_dialects_own_sql_function() -> None:
    """PostgreSQL's own functions (pg_*, jsonb_*) are the dialect component's to call:
    a service asks it (``tx.sql.json_object``, ``sql.claim_slots``)."""
    found = {str(path.relative_to(ROOT)): DIALECT_FUNCTION.findall(path.read_text("utf-8"))
             for path in sorted((PACKAGE / "services").rglob("*.py"))}
    assert {name: calls for name, calls in found.items() if calls} == {}
    assert DIALECT_FUNCTION.findall("func.pg_backend_pid() + func.jsonb_build_object()") == [
        "pg_backend_pid", "jsonb_build_object"]


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
    for path in sorted((PACKAGE / "services").rglob("*.py")):
        found = sorted({f"{node.value.id}.{node.attr}"
                        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                        if isinstance(node, ast.Attribute)
                        and isinstance(node.value, ast.Name) and node.value.id in ("tx", "uow")
                        and node.attr in ("connection", "session", "driver", "begin")})
        if found:
            reached[path.name] = found
    assert reached == {}


def _builds_prepared(node: ast.AST) -> bool:
    return any(isinstance(call, ast.Call) and (
        (isinstance(call.func, ast.Name) and call.func.id == "Prepared")
        or (isinstance(call.func, ast.Attribute) and call.func.attr == "Prepared"))
        for call in ast.walk(node))


def prepared_built_per_call(source: str) -> list[str]:
    """The functions of ``source`` that build an ``execution.Prepared`` more than once:
    those that are not cached (``functools.cache``, ``lru_cache``) and are called from
    somewhere that is not built once itself (an uncached function, or another module).
    A Prepared at module level, or in a function only cached ones call, is built once."""
    functions = {node.name: node for node in ast.parse(source).body
                 if isinstance(node, ast.FunctionDef)}
    callers: dict[str, set[str | None]] = {name: set() for name in functions}
    for caller, function in functions.items():
        for call in ast.walk(function):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id in callers and call.func.id != caller):
                callers[call.func.id].add(caller)

    def once(name: str, seen: frozenset[str] = frozenset()) -> bool:
        function = functions[name]
        if any("cache" in ast.unparse(d) for d in function.decorator_list):
            return True
        return bool(callers[name]) and name not in seen and all(
            caller is not None and once(caller, seen | {name}) for caller in callers[name])

    return sorted(name for name, function in functions.items()
                  if _builds_prepared(function) and not once(name))


def test_the_prepared_scanner_finds_a_statement_built_per_call() -> None:
    sample = '''
import functools
from hubstore import execution
from hubstore.execution import Prepared

AT_IMPORT = Prepared(select(t))

@functools.cache
def cached(sql): return Prepared(select(t))

@functools.lru_cache(maxsize=8)
def helped(sql): return helper(sql)

def helper(sql): return Prepared(select(t))  # called from a cached function only

def per_call(uow): return Prepared(select(t)).rows(uow)

def by_module(uow): return execution.Prepared(select(t)).rows(uow)

def shared(sql): return Prepared(select(t))  # one of its callers is not cached

def uses_shared(uow): return shared(uow.sql).rows(uow)

def exported(sql): return Prepared(select(t))  # called from another module, maybe
'''
    assert prepared_built_per_call(sample) == ["by_module", "exported", "per_call", "shared"]


def test_a_prepared_statement_is_built_once() -> None:
    """Prepared compiles its statement once and keeps it: built per call, it would cost
    more than SQLAlchemy's execution layer, which caches compiled statements by shape."""
    found = {path.name: names for path in sorted((PACKAGE / "services").rglob("*.py"))
             if (names := prepared_built_per_call(path.read_text(encoding="utf-8")))}
    assert found == {}


# --- no test or benchmark reaches for a private name of the package ---------------------

def _private(name: str) -> bool:
    """A name of the package's own (``_x``); dunder names (``__version__``) are public."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_path(dotted: str) -> bool:
    return dotted == "hubstore" or dotted.startswith("hubstore.")


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` (hubstore.x.y) names one of the package's modules (its files)."""
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def private_package_names(source: str) -> list[str]:
    """Where ``source`` reaches for a private name of hubstore, as ``line: what``: a
    from-import of a ``_`` name from a hubstore module; an import of a hubstore module
    with a ``_`` component; ``module._name`` on a hubstore module it imported;
    ``setattr``-like calls (``monkeypatch.setattr(module, "_name", ...)``, ``getattr``,
    ``patch.object``) naming a ``_`` attribute of such a module by string; and a string
    that is a dotted hubstore path with a ``_`` component (``patch("hubstore.x._y")``)."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # a local name -> the hubstore module it is bound to
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _package_path(alias.name):
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    found.add((node.lineno, f"import {alias.name}"))
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    modules["hubstore"] = "hubstore"
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and _package_path(node.module)):
            if any(_private(part) for part in node.module.split(".")):
                found.add((node.lineno, f"from {node.module} import ..."))
            for alias in node.names:
                if _private(alias.name):
                    found.add((node.lineno, f"from {node.module} import {alias.name}"))
                elif _is_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def module_of(node: ast.expr) -> str | None:
        """The hubstore module ``node`` names (through the names bound above), if any."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head not in modules:
            return None
        path = f"{modules[head]}.{rest}" if rest else modules[head]
        return path if _is_module(path) else None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            module = module_of(node.value)
            if module is not None:
                found.add((node.lineno, f"{module}.{node.attr}"))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            if (isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and _private(name.value)):
                module = module_of(target)
                if module is not None:
                    found.add((node.lineno, f"{module}.{name.value} (named by string)"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _package_path(node.value)
              and all(part.isidentifier() for part in node.value.split("."))
              and any(_private(part) for part in node.value.split("."))):
            found.add((node.lineno, f"{node.value!r}"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_the_scanner_finds_each_way_of_reaching_a_private_name() -> None:
    sample = '''
import hubstore._aio_ops
import hubstore.services.assigns as assigns_module
from hubstore import HubStore, __version__, aio, migrations
from hubstore.services.assigns import reports
from hubstore.services.messages import _poll_statement, poll_statement
from hubstore._aio_codegen import generate

def test(monkeypatch):
    aio._settle(None, None)
    assigns_module._SELECT.rows()
    hubstore.services.retention._BATCH
    monkeypatch.setattr(migrations, "_dangling_rows", None)
    getattr(reports, "_CLAIM")
    monkeypatch.setattr("hubstore.connections._restore_mode", None)
    # public, or not the package's: none of these counts
    aio.AsyncHubStore, migrations.upgrade, HubStore._private_method, __version__
    monkeypatch.setattr(migrations, "now_ms", None)
    monkeypatch.setattr(HubStore, "_open", None)
    other._private, "hubstore.services.assigns", "_x", hubstore.__version__
'''
    assert private_package_names(sample) == [
        "2: import hubstore._aio_ops",
        "6: from hubstore.services.messages import _poll_statement",
        "7: from hubstore._aio_codegen import ...",
        "10: hubstore.aio._settle",
        "11: hubstore.services.assigns._SELECT",
        "12: hubstore.services.retention._BATCH",
        "13: hubstore.migrations._dangling_rows (named by string)",
        "14: hubstore.services.assigns.reports._CLAIM (named by string)",
        "15: 'hubstore.connections._restore_mode'",
    ]


def test_no_test_or_benchmark_reaches_for_a_private_name_of_the_package() -> None:
    """Tests and benchmarks use what the package makes public: a private name is free to
    change without them (where one needs an object, the package names it publicly)."""
    found = [f"{path.relative_to(ROOT)}:{where}"
             for folder in ("tests", "benchmarks")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for where in private_package_names(path.read_text(encoding="utf-8"))]
    assert found == []
