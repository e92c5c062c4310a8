"""Build helpers for the documentation (mkdocs.yml loads this file twice).

- As an mkdocs hook (``hooks:``): every built page must have unique ``id`` attributes,
  or a link to a heading goes to the first element with its id. A duplicate is a
  warning, so ``mkdocs build --strict`` fails on it. And a page's ``- STORE_METHODS``
  line (in docs/api.md, the store's members) becomes one member line per store method,
  read from ``HubOperations`` (:func:`hubstore.operations.store_methods`), so the API
  page lists every method without a list to keep by hand.
- As a Griffe extension (mkdocstrings' ``extensions:``, ``MarkdownDocstrings``): the
  docstrings' reStructuredText habits, rendered for Markdown. A doctest block (a
  paragraph of ``>>>`` lines) becomes a ``pycon`` code block, without its doctest
  directives (``# doctest: +SKIP`` is for doctest, not for readers; Sphinx's
  ``trim_doctest_flags`` leaves them out too); Markdown alone would render it as three
  nested quotes. A Sphinx role (``:class:`~hubstore.uow.UnitOfWork```) becomes inline
  code of the name it shows (``UnitOfWork``).
- As a Griffe extension too (``StoreMethods``): the store methods, which the facade
  (hubstore/operations.py) sets as class attributes (``set_assign_limit =
  limits.set_assign_limit``), rendered as the methods they are: the service function's
  signature with ``self`` for its scope (not shown), its docstring (errors, example).
  Statically read, they were attributes with no signature and no docstring;
  ``operations.as_method`` does the same at run time (``help``, ``inspect.signature``).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

import griffe

log = logging.getLogger(f"mkdocs.plugins.{__name__}")

ID = re.compile(r"""\sid=["']([^"']+)["']""")
#: A doctest directive at the end of a source line (``>>>`` or ``...``) of a doctest.
DOCTEST_FLAG = re.compile(r"^(?P<code>[ \t]*(?:>>>|\.\.\.).*?)[ \t]*#[ \t]*doctest:.*$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj):"
                  r"`(?P<tilde>~?)(?P<path>[^`]+)`")


def duplicate_ids(html: str) -> list[str]:
    """The ids that more than one element of ``html`` has."""
    return sorted(name for name, count in Counter(ID.findall(html)).items() if count > 1)


#: The line of a page that :func:`on_page_markdown` makes the store methods' members.
STORE_METHODS = re.compile(r"^(?P<indent>[ \t]*)- STORE_METHODS[ \t]*$", re.M)


def store_method_members(markdown: str) -> str:
    """``markdown`` with each ``- STORE_METHODS`` line made one ``- name`` line per
    store method (the facade's order), at its indentation."""
    if not STORE_METHODS.search(markdown):
        return markdown
    from hubstore.operations import store_methods

    names = list(store_methods())
    return STORE_METHODS.sub(
        lambda m: "\n".join(f"{m['indent']}- {name}" for name in names), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, **kwargs: Any) -> str:
    return store_method_members(markdown)


def on_post_page(output: str, page: Any, config: Any, **kwargs: Any) -> str:
    duplicates = duplicate_ids(output)
    if duplicates:
        log.warning("%s: %d ids are used more than once (each must be unique): %s",
                    page.file.src_uri, len(duplicates), ", ".join(duplicates))
    return output


def doctest_blocks_as_code(text: str) -> str:
    """``text`` with each doctest block (a paragraph that starts with ``>>>``, outside
    code blocks) fenced as ``pycon``, its doctest directives left out."""
    lines = text.split("\n")
    out: list[str] = []
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.lstrip().startswith(">>>") and (not out or not out[-1].strip()):
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(DOCTEST_FLAG.sub(r"\g<code>", lines[i]))
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def roles_as_code(text: str) -> str:
    """``text`` with each Sphinx role as inline code of what Sphinx would show."""
    def shown(role: re.Match[str]) -> str:
        path = role.group("path")
        return f"`{path.rpartition('.')[2] if role.group('tilde') else path}`"

    return ROLE.sub(shown, text)


class MarkdownDocstrings(griffe.Extension):
    """Doctest blocks and Sphinx roles of every docstring, rendered for Markdown."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader,
                  **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = roles_as_code(doctest_blocks_as_code(obj.docstring.value))


#: The facade classes whose class attributes are store methods (hubstore/operations.py).
FACADES = ("operations.HubOperations", "operations.StoreOperations")


def store_method(name: str, target: griffe.Function) -> griffe.Function:
    """The service function ``target`` as the store method ``name``: its parameters
    but the scope (``self`` in its place), its return type and docstring."""
    scope, *parameters = list(target.parameters)
    method = griffe.Function(
        name, lineno=target.lineno, endlineno=target.endlineno,
        parameters=griffe.Parameters(griffe.Parameter("self", kind=scope.kind),
                                     *parameters),
        returns=target.returns)
    if target.docstring is not None:
        method.docstring = griffe.Docstring(target.docstring.value,
                                            lineno=target.docstring.lineno,
                                            endlineno=target.docstring.endlineno,
                                            parent=method)
    return method


class StoreMethods(griffe.Extension):
    """Each store method of the facade, a Function of the class (see the module)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        if pkg.path != "hubstore":
            return
        for path in FACADES:
            facade = pkg[path]
            for name, member in list(facade.members.items()):
                value = getattr(member, "value", None)
                if not isinstance(member, griffe.Attribute) or not isinstance(
                        value, griffe.ExprAttribute) or len(value.values) != 2:
                    continue
                module, function = (str(part) for part in value.values)
                imported = facade.module.imports.get(module)
                if imported is None:
                    continue
                target = loader.modules_collection[f"{imported}.{function}"]
                if isinstance(target, griffe.Function):
                    facade.set_member(name, store_method(name, target))
