"""Head-and-tail clipping: the one way bantam shortens a text for the model or a prompt.

`HeadTail` holds the rule (past `limit`, the first and the last half of it are kept, the middle is
counted) for a stream too long to hold, as shell_exec's output is; `clip_middle` applies it to a
whole text and says what was cut on a line between the two."""
from __future__ import annotations

from typing import AnyStr, Callable, Generic


class HeadTail(Generic[AnyStr]):
    """The head and the tail of everything `add`ed, within `limit` (characters of str, bytes of
    bytes): all of it while it fits, then half the limit from each end."""

    def __init__(self, limit: int, empty: AnyStr):
        self.limit, self.half = limit, limit // 2
        self.head: AnyStr = empty
        self.tail: AnyStr = empty
        self.total = 0

    @property
    def over(self) -> bool:
        return self.total > self.limit

    @property
    def cut(self) -> int:
        """How much of the middle is not kept."""
        return self.total - len(self.head) - len(self.tail)

    def add(self, data: AnyStr) -> bool:
        """Keep `data`'s share; True when this made the whole go past the limit."""
        was_over = self.over
        self.total += len(data)
        if was_over:
            self.tail = _last(self.tail + data, self.half)
            return False
        self.head += data
        if not self.over:
            return False
        self.head, self.tail = self.head[:self.half], _last(self.head, self.half)
        return True


def _last(data: AnyStr, count: int) -> AnyStr:
    return data[len(data) - count:]  # not data[-count:]: that is all of it when count is 0


def clip_middle(data: AnyStr, limit: int, note: str = "",
                mark: Callable[[int, int], str] | None = None) -> tuple[str, bool]:
    """`data` within `limit` (characters of a str, bytes of bytes): its head and its tail around a
    line saying how much was cut, and `note` when given (`mark(cut, total)` writes another line).
    True when something was cut. Bytes are decoded as UTF-8; a character split at a cut is
    dropped, not garbled."""
    if len(data) <= limit:
        return _text(data, "replace"), False
    keep = HeadTail(limit, data[:0])
    keep.add(data)
    unit = "bytes" if isinstance(data, bytes) else "characters"
    line = mark(keep.cut, keep.total) if mark else \
        f"[... {keep.cut} {unit} clipped of {keep.total}" + (f": {note}" if note else "") + " ...]"
    return f"{_text(keep.head)}\n{line}\n{_text(keep.tail)}", True


def _text(data: str | bytes, errors: str = "ignore") -> str:
    return data.decode("utf-8", errors) if isinstance(data, bytes) else data
