"""Text shown as it is stored: the characters a reader cannot see or that reorder what
follows (bidi controls, zero-width and other format characters, controls, unusual
spaces, blank letters) shown as ``⟨U+202E⟩``, as code editors mark them, so that
``"lead\\u202e..."`` cannot pass for another requester."""

from __future__ import annotations

import re
import unicodedata

from markupsafe import Markup, escape

#: Letters and symbols that draw nothing (Hangul fillers, the Braille blank, ...).
BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u17b5")
#: What text may hold and still read as it shows.
PLAIN = frozenset("\t\n\r ")


def hidden(char: str) -> bool:
    """Whether ``char`` is one a reader cannot see as itself."""
    if char in PLAIN:
        return False
    category = unicodedata.category(char)
    return (category in ("Cf", "Cc", "Zl", "Zp", "Zs", "Co", "Cn", "Cs")
            or char in BLANK or "\ufe00" <= char <= "\ufe0f")


_CANDIDATES = re.compile(r"[^\w.,:;!?'\"()\[\]{}<>/\\@#$%^&*+=|~`-]")


def visible(value: object) -> Markup:
    """``value`` as escaped HTML, each hidden character as a marked ``⟨U+XXXX⟩``."""
    text = "" if value is None else str(value)
    parts: list[str] = []
    start = 0
    for match in _CANDIDATES.finditer(text):
        char = match.group()
        if hidden(char):
            parts.append(str(escape(text[start:match.start()])))
            parts.append(f'<span class="hidden-char" title="a character that shows '
                         f'nothing">⟨U+{ord(char):04X}⟩</span>')
            start = match.end()
    parts.append(str(escape(text[start:])))
    return Markup("".join(parts))
