"""Head-and-tail clipping: the one way bantam shortens a text for the model or a prompt."""
from __future__ import annotations


def clip_middle(data: str | bytes, limit: int, note: str = "") -> tuple[str, bool]:
    """`data` within `limit` (characters of a str, bytes of bytes): its head and its tail around a
    line saying how much was cut, and `note` when given. True when something was cut. Bytes are
    decoded as UTF-8; a character split at a cut is dropped, not garbled."""
    if len(data) <= limit:
        return _text(data, "replace"), False
    half = limit // 2
    cut = len(data) - 2 * half
    unit = "bytes" if isinstance(data, bytes) else "characters"
    line = f"[... {cut} {unit} clipped of {len(data)}" + (f": {note}" if note else "") + " ...]"
    return f"{_text(data[:half])}\n{line}\n{_text(data[len(data) - half:])}", True


def _text(data: str | bytes, errors: str = "ignore") -> str:
    return data.decode("utf-8", errors) if isinstance(data, bytes) else data
