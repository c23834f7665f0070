"""Memory pressure: the blob store, clipping, and moving a range of the conversation to a blob.

- `Blobs.put(text)` saves content under blobs/<hash> (content-addressed: the same text, one blob).
- `clip(text)` keeps the head and tail of an over-long tool result and stashes the whole.
- `stash_range(...)` replaces lines of a messages.jsonl by one wrapped "[stash <hash>]" message
  carrying a summary from the model. Ranges snap so that a tool-call block is never split.
- `directive(message)` recognises "STASH_MESSAGE: <start> <end>" / "STASH_MESSAGE: all".
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Callable

from ..clip import clip_middle
from ..envpolicy import redact
from ..fsutil import atomic_write
from ..providers.http import CHARS_PER_TOKEN as CHARS_PER_TOKEN  # bantam's one estimate (4
# characters a token); re-exported for agent.py. It over-counts base64 images, the safe direction here.
from .bus import MessageFile, system_message, unwrap

PRESSURE = 0.8          # auto-stash past this share of context_window
SUMMARY_PROMPT = (
    "The messages below are being moved out of an agent's context into an archive. Summarise them "
    "for the agent in a few sentences: who asked for what, what was done and decided, what is "
    "still open, and any fact it will need later. Reply with the summary only.")
_DIRECTIVE = re.compile(r"\A\s*(?:\[trigger [^\]]*\]\s*)?STASH_MESSAGE:\s*(all|(\d+)\s+(\d+))\s*\Z")


class Blobs:
    def __init__(self, folder: Path, rel: str):
        self.folder = folder
        self.rel = rel  # how the agent names the folder: "agent/blobs"

    def put(self, data: str | bytes) -> str:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        digest = hashlib.sha256(raw).hexdigest()[:16]
        path = self.folder / digest
        if not path.exists():
            atomic_write(path, raw, mode=0o600)
        return digest

    def clip(self, text: str, limit: int) -> str:
        """`<head>\\n... N chars truncated, [stash <hash>] ...\\n<tail>` past `limit`."""
        text = redact(text)  # before the cut (no secret half-shown) and before the blob is written
        if len(text) <= limit:
            return text
        digest = self.put(text)
        return clip_middle(text, limit, mark=lambda cut, total: f"... {cut} chars truncated, [stash {digest}] "
                           f"(READ_FILE {self.rel}/{digest}) ...")[0]


def directive(message: dict) -> str | tuple[int, int] | None:
    """"all", (start, end) 1-based inclusive, or None when the message is no stash directive."""
    if message.get("role") != "user":
        return None
    match = _DIRECTIVE.match(unwrap(message.get("content"))[1])
    if not match:
        return None
    return "all" if match.group(1) == "all" else (int(match.group(2)), int(match.group(3)))


def is_stash(message: dict) -> bool:
    """The "[stash <hash>] lines a-b ... Summary: ..." message a stash leaves behind."""
    wrapped, text = unwrap(message.get("content"))
    return message.get("role") == "user" and wrapped and text.startswith("[stash ")


def middle_half(messages: list[dict]) -> tuple[int, int]:
    n = len(messages)
    return n // 4, (3 * n) // 4


def snap(messages: list[dict], start: int, end: int) -> tuple[int, int]:
    """Move a 0-based [start, end) range off tool results so that no block is cut in two."""
    start, end = max(0, start), min(len(messages), end)
    while start < end and messages[start].get("role") == "tool":
        start += 1
    while 0 < end < len(messages) and messages[end].get("role") == "tool":
        end += 1
    return start, end


def over_budget(chars: int, context_window: int) -> bool:
    return chars / CHARS_PER_TOKEN > context_window * PRESSURE


def stash_range(conv: MessageFile, blobs: Blobs, summarize: Callable[[list[dict]], str],
                start: int, end: int) -> str:
    """Stash 0-based [start, end) (snapped) of `conv`; returns a line saying what happened.
    The summary is asked for outside the lock; the rewrite happens only if the range is unchanged."""
    messages = conv.read()
    start, end = snap(messages, start, end)
    if end - start < 1:
        return f"nothing to stash in lines {start + 1}-{end}"
    chosen = messages[start:end]
    digest = blobs.put("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in chosen))
    summary = summarize(chosen)
    marker = system_message(
        f"[stash {digest}] lines {start + 1}-{end} ({len(chosen)} messages) were moved to "
        f"{blobs.rel}/{digest}. Summary: {summary}")

    def replace(current: list[dict]) -> list[dict] | None:
        if current[start:end] != chosen:  # someone rewrote the file meanwhile: do not guess
            return None
        return current[:start] + [marker] + current[end:]
    if not conv.edit(replace):
        return "the conversation changed while it was being summarised; nothing was stashed"
    return f"[stash {digest}] lines {start + 1}-{end} ({len(chosen)} messages) stashed"


def render(messages: list[dict], limit: int) -> str:
    """Messages as text for the summariser, clipped to `limit` characters (middle elided)."""
    lines = []
    for m in messages:
        content = unwrap(m.get("content"))[1]
        calls = [c.get("function", {}).get("name", "") for c in m.get("tool_calls") or []]
        lines.append(f"{m.get('role')}: {content}" + (f" [calls: {', '.join(calls)}]" if calls else ""))
    text = "\n".join(lines)
    return clip_middle(text, limit)[0]
