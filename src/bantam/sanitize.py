"""Strip invisible Unicode from tool arguments and results (seed 001).

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
