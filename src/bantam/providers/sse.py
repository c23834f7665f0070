"""Server-sent events, as real servers send them.

Handles `data:` with or without the space, CRLF line ends (split by httpx), comment and
keep-alive lines (`: OPENROUTER PROCESSING`), `event:` names (Anthropic) and multi-line data.
A stream that only keeps itself alive, or never stops talking, is cut off with an error.
"""
from __future__ import annotations

import time
from typing import Iterable, Iterator

from ..errors import ProviderError

MAX_STREAM_BYTES = 32 * 1024 * 1024  # no answer is this long; a stream this long is broken


def iter_sse(lines: Iterable[str], idle: float | None = None) -> Iterator[tuple[str, str]]:
    """Yield (event name, data) for each event; the name is "" when the server sent none.

    `idle`: seconds the server may send nothing but keep-alives before the stream counts as stalled
    (silence itself is caught by the HTTP client's read timeout)."""
    event = ""
    data: list[str] = []
    last_data = time.monotonic()
    size = 0
    for line in lines:
        size += len(line) + 1
        if size > MAX_STREAM_BYTES:
            raise ProviderError(f"the response stream passed {MAX_STREAM_BYTES >> 20} MB without ending")
        line = line.rstrip("\r")
        if not line:
            if data:
                yield event, "\n".join(data)
                last_data = time.monotonic()
            elif idle is not None and time.monotonic() - last_data > idle:
                raise ProviderError(f"the server sent only keep-alives for {idle:g}s")
            event, data = "", []
            continue
        if line.startswith(":"):
            if idle is not None and time.monotonic() - last_data > idle:
                raise ProviderError(f"the server sent only keep-alives for {idle:g}s")
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
