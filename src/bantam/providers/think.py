"""Split `<think>...</think>` spans out of answer text, also when a tag arrives in pieces."""
from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


class ThinkSplitter:
    """Feed content deltas; get back (is_reasoning, text) pieces in order."""

    def __init__(self) -> None:
        self.inside = False
        self.pending = ""         # a possible partial tag held back until the next delta
        self.after_close = False  # drop the blank lines models put after </think>

    def feed(self, text: str) -> list[tuple[bool, str]]:
        text, self.pending = self.pending + text, ""
        pieces: list[tuple[bool, str]] = []
        while text:
            tag = CLOSE if self.inside else OPEN
            at = text.find(tag)
            if at < 0:
                keep = _partial_tag_length(text, tag)
                self.pending = text[len(text) - keep:] if keep else ""
                text = text[:len(text) - keep]
                self._emit(pieces, text)
                break
            self._emit(pieces, text[:at])
            self.inside = not self.inside
            self.after_close = not self.inside
            text = text[at + len(tag):]
        return pieces

    def flush(self) -> list[tuple[bool, str]]:
        pieces: list[tuple[bool, str]] = []
        self._emit(pieces, self.pending)
        self.pending = ""
        return pieces

    def _emit(self, pieces: list[tuple[bool, str]], text: str) -> None:
        if self.after_close and not self.inside:
            text = text.lstrip("\n")
            if text:
                self.after_close = False
        if text:
            pieces.append((self.inside, text))


def _partial_tag_length(text: str, tag: str) -> int:
    """Length of the longest end of `text` that could be the start of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0
