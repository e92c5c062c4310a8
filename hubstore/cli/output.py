"""How the inspection commands print rows (issue 26: piped output must stay greppable).

- stdout is not a terminal (a pipe, a file): one line a row, its fields separated by a
  tab, with no heading and no title; nothing is cut, folded or padded. A tab, newline,
  carriage return or other control character inside a value is written ``\\t``, ``\\n``,
  ``\\r`` or ``\\xNN`` so that a row stays one line (backslashes are left as they are:
  ``--json`` gives the exact values). ``grep``, ``cut -f``, ``awk -F'\\t'`` and
  ``column -t -s$'\\t'`` work on it.
- stdout is a terminal: a table. Ids, statuses, numbers and times are never split; long
  text and JSON fold inside their column. When the terminal is too narrow for that, the
  columns a command marks as optional are left out, the least needed first; only when
  even the others do not fit is each row printed as a block of ``name  value`` lines.

JSON values (payload, topics) are written as ``--json`` writes them, on one line.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from hubstore.cli.common import writing

#: A folded column gets at least this many cells (or its longest value, if shorter) before
#: a table gives way to one block per row.
FOLDED_MIN = 20
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


@dataclass(frozen=True)
class Column:
    """A column: its heading, how a row's dict gives its value, and whether the value is
    one word that is never split (an id, a status, a number, a time)."""

    heading: str
    get: Callable[[dict[str, Any]], object]
    whole: bool = False
    right: bool = False


def key(heading: str, name: str, *, whole: bool = True, right: bool = False) -> Column:
    """A column showing ``row[name]``."""
    return Column(heading, lambda d: d.get(name), whole, right)


def text_of(value: object) -> str:
    """A value as the cell shows it: JSON on one line as ``--json`` writes it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict | bool):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def one_line(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with its control characters written out (``\\n``, ``\\t``, ``\\x1b``...)."""
    if text.isprintable():
        return text
    return "".join(
        char if (keep_newlines and char == "\n") or unicodedata.category(char) != "Cc"
        else _NAMED.get(char, f"\\x{ord(char):02x}") for char in text)


def show(title: str, columns: Sequence[Column], rows: Sequence[dict[str, Any]],
         optional: Sequence[str] = ()) -> None:
    """Print ``rows``: tab-separated lines in a pipe (every column), a table (or blocks)
    in a terminal. ``optional`` names the headings of the columns a narrow terminal may
    leave out, the first named first."""
    cells = [[text_of(column.get(row)) for column in columns] for row in rows]
    with writing():
        if sys.stdout.isatty():
            _terminal(f"{title} ({len(rows)})", columns, cells, optional)
        else:
            for line in cells:
                click.echo("\t".join(one_line(cell) for cell in line))


def _table(title: str, columns: Sequence[Column], cells: list[list[str]],
           shown: Sequence[int]) -> Table:
    """The table of the columns at the indexes ``shown``."""
    table = Table(title=title, title_justify="left")
    for i in shown:
        column = columns[i]
        longest = max([cell_len(line) for row in cells for line in row[i].splitlines()]
                      + [cell_len(column.heading)])
        if column.whole:
            table.add_column(column.heading, no_wrap=True, min_width=longest,
                             justify="right" if column.right else "left")
        else:
            table.add_column(column.heading, overflow="fold", min_width=min(longest, FOLDED_MIN))
    for row in cells:
        table.add_row(*(Text(one_line(row[i], keep_newlines=True)) for i in shown))
    return table


def _terminal(title: str, columns: Sequence[Column], cells: list[list[str]],
              optional: Sequence[str]) -> None:
    console = Console(soft_wrap=False)
    unbounded = console.options.update_width(sys.maxsize)  # (a measure is cut at the width)
    shown = list(range(len(columns)))
    headings = [column.heading for column in columns]
    for dropped in [None, *optional]:
        if dropped is not None:
            shown.remove(headings.index(dropped))
        table = _table(title, columns, cells, shown)
        if Measurement.get(console, unbounded, table).minimum <= console.width:
            if len(shown) < len(columns):
                left_out = ", ".join(headings[i] for i in range(len(columns))
                                     if i not in shown)
                table.caption = f"(too narrow for {left_out}: widen the terminal, or --json)"
                table.caption_justify = "left"
            console.print(table)
            return
    console.print(Text(title, style="bold"))  # too narrow: one block of lines per row
    for row in cells:
        block = Table.grid(padding=(0, 2))
        block.add_column(no_wrap=True, style="bold")
        block.add_column(overflow="fold")
        for column, cell in zip(columns, row, strict=True):
            if cell or column.heading not in optional:  # (an empty optional one: no line)
                block.add_row(column.heading, Text(one_line(cell, keep_newlines=True)))
        console.print()
        console.print(block)
