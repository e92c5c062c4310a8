"""Writes hubstore/aio_methods.py: every store method as a typed coroutine.

Python's type system cannot turn a class's methods into coroutines (there is no mapped
type over methods), and a ``__getattr__`` would hand users ``Any``. So the async methods
are written out, from the source of the service functions that :class:`HubOperations`
lists (:func:`~hubstore.operations.store_methods`): the same names, parameters (the
scope becomes ``self``), defaults and annotations, each awaiting the sync method through
``_call`` (typed with a ParamSpec, so mypy checks every forwarding). The waits
(:mod:`hubstore.services.waiting`) are left out: :class:`~hubstore.aio.AsyncHubStore`
writes its own, which wait on the event loop instead of holding a lane.

Run ``python -m hubstore.aio_codegen`` after changing a store method's signature;
tests/waiting/test_aio.py fails while the written file is not what this produces.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hubstore.operations import store_methods
from hubstore.services import waiting

TARGET = Path(__file__).with_name("aio_methods.py")

HEADER = '''"""Generated from HubOperations by ``python -m hubstore.aio_codegen``.

Do not edit: run it again instead.

Every store method as a coroutine with the sync method's signature; ``_call`` runs the
sync method off the event loop (see :mod:`hubstore.aio`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

{imports}

if TYPE_CHECKING:
    from hubstore.operations import HubOperations
{checking_imports}

_P = ParamSpec("_P")
_T = TypeVar("_T")


class AsyncOperations:
    """The store methods as coroutines (:class:`~hubstore.aio.AsyncHubStore` and
    :class:`~hubstore.aio.AsyncUnitOfWork`)."""

    def _sync_ops(self) -> HubOperations:
        """The sync object whose methods these await."""
        raise NotImplementedError

    async def _call(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
                    ) -> _T:
        """Run ``fn(*args, **kwargs)`` off the event loop."""
        raise NotImplementedError
'''


@dataclass
class ModuleNames:
    """Where each top-level name of a module comes from: (module, name, type-only)."""

    module: str
    origin: dict[str, tuple[str, str, bool]] = field(default_factory=dict)


def _module_names(module: str, tree: ast.Module) -> ModuleNames:
    names = ModuleNames(module)

    def imports(body: list[ast.stmt], checking: bool) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    names.origin[alias.asname or alias.name] = (node.module, alias.name,
                                                                checking)
            elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                imports(node.body, True)
            elif isinstance(node, ast.ClassDef | ast.FunctionDef):
                names.origin.setdefault(node.name, (module, node.name, False))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        names.origin.setdefault(target.id, (module, target.id, False))

    imports(tree.body, False)
    return names


def _used_names(nodes: list[ast.AST | None], quoted: bool = True) -> set[str]:
    """The names the nodes use (``quoted``: in string annotations too)."""
    used: set[str] = set()
    for node in nodes:
        if node is None:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                used.add(sub.id)
            elif quoted and isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                with contextlib.suppress(SyntaxError):  # a quoted annotation
                    used |= _used_names([ast.parse(sub.value, mode="eval")])
    return used


def _forwarding(args: ast.arguments) -> str:
    parts = [a.arg for a in [*args.posonlyargs, *args.args][1:]]
    if args.vararg is not None:
        parts.append("*" + args.vararg.arg)
    parts += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg is not None:
        parts.append("**" + args.kwarg.arg)
    return ", ".join(parts)


def _first_line(doc: str | None) -> str:
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ").strip()


def _docstring(text: str) -> str:
    """``text`` as a method's docstring, wrapped to the line length."""
    quote = '"' * 3
    body = textwrap.fill(text.replace(quote, "'" * 3), width=92,
                         initial_indent=" " * 8 + quote, subsequent_indent=" " * 8)
    return body + ("\n" + " " * 8 + quote if "\n" in body else quote)


def store_functions() -> list[Any]:
    """The service functions HubOperations lists, in its order, but the waits (written
    by hand in hubstore.aio)."""
    return [value for value in store_methods().values()
            if value.__module__ != waiting.__name__]


def generate() -> str:
    """The module's text, before formatting."""
    methods: list[str] = []
    runtime: dict[str, set[str]] = {}
    checking: dict[str, set[str]] = {}
    for function in store_functions():
        path = Path(inspect.getfile(function))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = _module_names(function.__module__, tree)
        for item in tree.body:
            if not isinstance(item, ast.FunctionDef) or item.name != function.__name__:
                continue
            args = item.args
            first = [*args.posonlyargs, *args.args][0]
            first.arg, first.annotation = "self", None  # the scope: the async object
            annotations: list[ast.AST | None] = [
                a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
            annotations += [args.vararg and args.vararg.annotation,
                            args.kwarg and args.kwarg.annotation, item.returns]
            defaults: list[ast.AST | None] = [*args.defaults, *args.kw_defaults]
            for used, into in ((_used_names(annotations), None),
                               (_used_names(defaults, quoted=False), runtime)):
                for name in sorted(used):
                    if hasattr(builtins, name) or name == "self":
                        continue
                    module, real, type_only = names.origin[name]
                    if real != name:
                        raise ValueError(f"{function.__module__}.{item.name}: aliased import "
                                         f"{name}")
                    target = into if into is not None else (checking if type_only else runtime)
                    target.setdefault(module, set()).add(name)
            signature = ast.unparse(args)
            returns = ast.unparse(item.returns) if item.returns is not None else "None"
            doc = _first_line(ast.get_docstring(item))
            doc_line = f"Await :meth:`HubStore.{item.name}`"
            doc_line += f": {doc}" if doc else "."
            forward = _forwarding(args)
            call = f"self._sync_ops().{item.name}" + (f", {forward}" if forward else "")
            methods.append(
                f"    async def {item.name}({signature}) -> {returns}:\n"
                f"{_docstring(doc_line)}\n"
                f"        return await self._call({call})\n")
    for module, imported in runtime.items():  # a runtime import serves annotations too
        if module in checking:
            checking[module] -= imported
    runtime_lines = [f"from {m} import {', '.join(sorted(ns))}" for m, ns in
                     sorted(runtime.items())]
    checking_lines = [f"    from {m} import {', '.join(sorted(ns))}" for m, ns in
                      sorted(checking.items()) if ns]
    text = HEADER.format(imports="\n".join(runtime_lines),
                         checking_imports="\n".join(checking_lines))
    return text + "\n" + "\n".join(methods)


def formatted(text: str) -> str:
    """``text`` as ruff (the project's configuration) sorts and formats it."""
    name = str(TARGET.relative_to(TARGET.parents[1]))
    for command in (["check", "--fix", "--select", "I", "--quiet", "--exit-zero"],
                    ["format", "--quiet"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", name, "-"],
            input=text, capture_output=True, text=True, check=True,
            cwd=TARGET.parents[1]).stdout
    return text


def main() -> None:
    TARGET.write_text(formatted(generate()), encoding="utf-8")
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
