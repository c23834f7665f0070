"""messages.jsonl, the conversation: one JSON message per line, shared by every writer.

Writers are the agent loop, the channel threads (telegram, triggers, mail), background-work
emitters and other processes (the operator's tools, a test). Three rules keep the file whole:

1. Every change happens under `flock` on messages.jsonl itself.
2. An append is one `write` to a descriptor opened with O_APPEND, so writers never tear or lose
   each other's lines.
3. A rewrite (a stash, a heal, a collapsed trigger pair) goes through a recovery journal: the new
   content is written atomically to `.messages.jsonl.journal`, then copied over messages.jsonl in
   place (same inode, so the lock other writers wait on is still the live file's lock), then the
   journal is removed. Whoever takes the lock next and finds a journal finishes the copy first, so
   a crash at any point leaves the old conversation or the new one, never a mix.

Reading heals: malformed lines (handed to `on_unreadable` first, so they can be kept), orphan
tool results and tool-call blocks without all their results are dropped, a mid-stream `system`
message becomes a wrapped user message, and the file is rewritten (rule 3) when anything changed.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from ..envpolicy import redact
from ..fsutil import append, atomic_write, write_all

ROLES = ("user", "assistant", "tool")
WRAP_OPEN, WRAP_CLOSE = "<system-message>", "</system-message>"
_WRAPPED = re.compile(r"\A\s*<system-message>(.*)</system-message>\s*\Z", re.S)


def system_message(text: str) -> dict:
    """A harness injection (trigger, bg completion, stash marker, banner): never a mid-stream
    `system` role (the system prompt is a request's only system message); a user message wrapped
    so the agent can tell."""
    return {"role": "user", "content": f"{WRAP_OPEN}{text}{WRAP_CLOSE}"}


def unwrap(content: Any) -> tuple[bool, str]:
    """(was it wrapped, the text inside): the harness checks prefixes on the unwrapped text."""
    text = content if isinstance(content, str) else _text_of(content)
    match = _WRAPPED.match(text)
    return (True, match.group(1)) if match else (False, text)


def _text_of(content: Any) -> str:
    if isinstance(content, list):  # content parts: only the text parts say what the message is
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def encode(messages: list[dict]) -> bytes:
    """The JSONL bytes of `messages`; a known secret value (bantam.envpolicy) is written as ***."""
    return redact("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)).encode("utf-8")


def locked_append(path: Path, data: bytes) -> None:
    """One O_APPEND write under flock: the primitive for LIFE.md and messages.jsonl alike."""
    append(path, data, sync=False, lock=True)


class MessageFile:
    """messages.jsonl with the three rules above. `on_change` is called after every write."""

    def __init__(self, path: Path, on_change: Callable[[], None] | None = None,
                 on_unreadable: Callable[[list[tuple[int, bytes]]], None] | None = None):
        self.path = Path(path)
        self.journal = self.path.with_name(f".{self.path.name}.journal")
        self.on_change = on_change or (lambda: None)
        self.on_unreadable = on_unreadable  # (line number, raw line) of lines healing drops

    def signature(self) -> tuple[int, int, int]:
        """Changes whenever the file does: the loop's cheap "has anything happened?"."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return (0, 0, 0)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def read(self) -> list[dict]:
        with self._locked() as fd:
            return self._load(fd)

    def append(self, *messages: dict) -> None:
        with self._locked() as fd:
            if _ends_badly(fd):  # a torn or unterminated last line would swallow ours
                self._load(fd)
            write_all(fd, encode(list(messages)))
            os.fsync(fd)
        self.on_change()

    def edit(self, change: Callable[[list[dict]], list[dict] | None]) -> bool:
        """Read, `change` (None: leave it), write back: an append when the result only adds
        lines at the end, otherwise a journaled rewrite. All under one lock."""
        with self._locked() as fd:
            old = self._load(fd)
            new = change(old)
            if new is None:
                return False
            if len(new) >= len(old) and new[:len(old)] == old:
                write_all(fd, encode(new[len(old):]))
                os.fsync(fd)
            else:
                self._rewrite(new)
        self.on_change()
        return True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        # never through a link the model made: config.json read as the conversation would reach the model
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._finish_journal()
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def _finish_journal(self) -> None:
        """An interrupted rewrite: its journal is complete (written atomically), so copy it."""
        try:
            data = self.journal.read_bytes()
        except FileNotFoundError:
            return
        self._overwrite(data)
        os.unlink(self.journal)

    def _load(self, fd: int) -> list[dict]:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        raw = b"".join(chunks)
        messages, clean = heal(raw)
        if not clean:
            bad = unreadable(raw)
            if bad and self.on_unreadable is not None:
                self.on_unreadable(bad)
            self._rewrite(messages)
        return messages

    def _rewrite(self, messages: list[dict]) -> None:
        data = encode(messages)
        atomic_write(self.journal, data, mode=0o600)
        self._overwrite(data)
        os.unlink(self.journal)

    def _overwrite(self, data: bytes) -> None:
        """In place, keeping the inode: a new file renamed over it would strand the writers
        already waiting for the old one's lock, and their lines with it."""
        with open(self.path, "r+b") as f:
            f.write(data)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())


def _ends_badly(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def heal(raw: bytes) -> tuple[list[dict], bool]:
    """The valid conversation in `raw`, and whether `raw` already was exactly that."""
    parsed: list[dict] = []
    clean = not raw or raw.endswith(b"\n")
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        message = _parse(line)
        if message is None or message.get("role") == "system":
            clean = False
        if message is None:
            continue
        parsed.append(_system_to_user(message))
    messages = heal_blocks(parsed)
    return messages, clean and messages == parsed and len(parsed) == raw.count(b"\n")


def unreadable(raw: bytes) -> list[tuple[int, bytes]]:
    """The lines of `raw` that are no message at all (numbered from 1), as healing drops them."""
    return [(n, line) for n, line in enumerate(raw.split(b"\n"), 1)
            if line.strip() and _parse(line) is None]


def _parse(line: bytes) -> dict | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("role") not in (*ROLES, "system"):
        return None
    return message


def _system_to_user(message: dict) -> dict:
    """No mid-stream system role: keep the text, as a wrapped user message."""
    if message["role"] != "system":
        return message
    return system_message(_text_of(message.get("content")))


def heal_blocks(messages: list[dict]) -> list[dict]:
    """Keep tool-call blocks whole: an assistant message with tool_calls followed by one result
    per call. Incomplete blocks and orphan results are dropped; a message that landed inside a
    block (another writer, mid-step) is moved after it."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if message["role"] == "tool":  # a result with no call before it
            i += 1
            continue
        calls = message.get("tool_calls") if message["role"] == "assistant" else None
        if not calls:
            out.append(message)
            i += 1
            continue
        i = _take_block(messages, i, calls, out)
    return out


def _take_block(messages: list[dict], i: int, calls: list, out: list[dict]) -> int:
    pending = [c.get("id") for c in calls if isinstance(c, dict)]
    block, moved = [messages[i]], []
    j = i + 1
    while pending and j < len(messages):
        m = messages[j]
        if m["role"] == "tool":
            if m.get("tool_call_id") in pending:
                pending.remove(m.get("tool_call_id"))
                block.append(m)
        else:
            moved.append(m)
        j += 1
    if not pending:
        out.extend(block)
    out.extend(moved)
    return j
