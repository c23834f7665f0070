"""Strip invisible Unicode from tool arguments and results; make text safe for a
terminal (`terminal_safe`, `TerminalStream`); parse JSON a model or server wrote (`loads`).

Not from file content: a tool lists the arguments that are data (`raw_arguments`, e.g.
write_file's content), which are written byte for byte; `bidi_note` says when they hold bidi
controls.

Zero-width characters, bidi overrides, odd spaces and control codes are how indirect prompt
injection hides text from the human reading a trace. What stays: ASCII space, tab, newline and
every printable character.
"""
from __future__ import annotations

import json
import re
from typing import Any

from .errors import BantamError

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


# --- text shown on a terminal ---------------------------------------------------------------------
# The model's answer and reasoning, tool traces and server messages reach the user's terminal, which
# acts on escape sequences: OSC 52 writes the clipboard, CSI moves the cursor and clears the screen,
# OSC 0 sets the window title, and C1 controls (U+0080-U+009F) do the same in one character. What
# bantam draws itself (colours, Markdown) is added after this cleaning. Whole sequences go (their
# payload is not text); then every control character but tab and newline goes, which is what makes
# the result safe whatever the sequence regexes miss. Bidi overrides and isolates go too: they make
# the terminal show text in another order than it is read (trojan source). Everything else, joiners
# and non-ASCII spaces included, is kept as it came (emoji, CJK and RTL text need them).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"                                            # CSI
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, SOS, PM, APC
    r"|\x1b(?:[ -/]+[0-~]|[0-OQ-WYZ\\`-~])")  # ESC c, ESC 7, ESC ( B: not ESC [ or ESC ], begun above
_UNFINISHED = re.compile(  # the start of one of those, cut off at the end of the text
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*\x1b?"
    r"|\x1b[ -/]*")
_INTRODUCER = re.compile(r"[\x1b\x90\x98\x9b\x9d\x9e\x9f]")
_TERMINAL_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOLD_CHARS = 4096  # the longest unfinished sequence held back; past it, it is shown as (clean) text


def terminal_safe(text: str) -> str:
    """`text` as it may be written to a terminal: no escape sequence, no control character but
    tab and newline, no bidi override; every other character kept."""
    return _TERMINAL_UNSAFE.sub("", _SEQUENCE.sub("", text))


def visible(text: str) -> str:
    """`text` as one line on a terminal with nothing hidden: every character that is not printable
    (escape sequences' ESC, newline, tab, C1 and bidi controls, zero-width characters) is shown as
    its Python escape (`\\x1b`, `\\n`, `\\u202e`) instead of being acted on or dropped. For a value
    a file supplies that the user is asked to judge (the command a project's .mcp.json would run,
    a config value): a newline in it cannot fake a line of its own, and what terminal_safe would
    silently drop stays in sight. The result holds no control character at all."""
    if text.isascii():
        return _ASCII_CONTROL_ALL.sub(_escaped, text)
    return "".join(c if c.isprintable() else _escaped_char(c) for c in text)


_ASCII_CONTROL_ALL = re.compile(r"[\x00-\x1f\x7f]")


def visible_lines(text: str) -> str:
    """`text` of several lines (a listing, a command's output) with nothing hidden: each line as
    `visible` shows it, the newlines between the lines and the tabs within them kept as they are
    (a tab moves the cursor on, over nothing). The result holds no control character but those."""
    return "\n".join("\t".join(visible(part) for part in line.split("\t")) for line in text.split("\n"))


def _escaped(match: re.Match) -> str:
    return _escaped_char(match.group())


def _escaped_char(c: str) -> str:
    return c.encode("unicode_escape").decode("ascii")


class TerminalStream:
    """terminal_safe for text that arrives in pieces (a streamed answer): an escape sequence split
    across two pieces is held back until the rest arrives, so none of it is shown, not even half."""

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, piece: str) -> str:
        text = _SEQUENCE.sub("", self.pending + piece)
        cut = _unfinished_start(text)
        self.pending = text[cut:]
        return _TERMINAL_UNSAFE.sub("", text[:cut])

    def flush(self) -> str:
        """The end of the stream: what was held back, cleaned (an unfinished sequence's ESC goes)."""
        text, self.pending = self.pending, ""
        return _TERMINAL_UNSAFE.sub("", text)


def _unfinished_start(text: str) -> int:
    """Where an escape sequence that `text` ends in the middle of starts; len(text) if none does."""
    for found in _INTRODUCER.finditer(text, max(0, len(text) - HOLD_CHARS)):
        if _UNFINISHED.fullmatch(text, found.start()):
            return found.start()
    return len(text)


# --- JSON from a model or a server ----------------------------------------------------------------
MAX_JSON_DEPTH = 100  # no tool's arguments and no API response nest deeper; a hostile one may


class TooDeep(BantamError, ValueError):
    """JSON nested deeper than MAX_JSON_DEPTH. A ValueError, so each `except ValueError` that
    handles invalid JSON handles this too."""


def loads(text: str | bytes) -> Any:
    """json.loads for what a model or a server wrote: nesting past MAX_JSON_DEPTH is TooDeep, never
    a RecursionError (json's parser recurses, and so does every walker of the value after it,
    such as sanitising tool arguments or json.dumps on the next request). A control character
    inside a string is taken as written (strict=False): a model's raw newline in an argument
    means a newline, and refusing the call over it made a small model give up the task."""
    try:
        value = json.loads(text, strict=False)
    except RecursionError:
        raise TooDeep(f"JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    if _deeper_than(value, MAX_JSON_DEPTH):
        raise TooDeep(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects in `value` nest more than `limit` deep (walked without recursion)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
