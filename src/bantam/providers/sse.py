"""Server-sent events, as real servers send them.

Handles `data:` with or without the space, CRLF line ends (split by httpx), comment and
keep-alive lines (`: OPENROUTER PROCESSING`), `event:` names (Anthropic) and multi-line data.
"""
from __future__ import annotations

from typing import Iterable, Iterator


def iter_sse(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Yield (event name, data) for each event; the name is "" when the server sent none."""
    event, data = "", []
    for line in lines:
        line = line.rstrip("\r")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event, "\n".join(data)
