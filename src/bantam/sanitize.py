"""Strip invisible Unicode from tool arguments and results (seed 001).

Not from file content: a tool lists the arguments that are data (`raw_arguments`, e.g.
write_file's content), which are written byte for byte; `bidi_note` says when they hold bidi
controls.

Zero-width characters, bidi overrides, odd spaces and control codes are how indirect prompt
injection hides text from the human reading a trace. What stays: ASCII space, tab, newline and
every printable character.
"""
from __future__ import annotations

import re

_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def sanitize(text: str) -> str:
    if text.isascii():  # the common case, done in C
        return _ASCII_CONTROL.sub("", text)
    return "".join(c for c in text if c.isprintable() or c in "\t\n")


# The "trojan source" characters: they reorder how text is shown, not what it is.
BIDI_CONTROLS = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def bidi_note(text: str) -> str:
    """A sentence for the model when `text` holds bidi controls, else "". File content keeps them
    (it is data: RTL text needs them); the writer is told, so nothing hides in plain sight."""
    if text.isascii():
        return ""
    found = sorted({f"U+{ord(c):04X}" for c in text if c in BIDI_CONTROLS})
    if not found:
        return ""
    return (f"; note: the content holds bidi control characters ({', '.join(found)}), which can make "
            "text display in a different order than it is read (\"trojan source\")")
