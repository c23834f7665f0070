"""Mail: files dropped into mail_inbox/ become "[mail from <unix user>] <name>\\n<preview>" messages.

Each file is delivered once: the message is appended, then the file is moved to
mail_inbox/processed/ (a crash between the two delivers it again: at-least-once, never lost).
The operator is told over chat. Dot-files and files still being written (changed in the last
SETTLE_S seconds) wait for the next scan.
"""
from __future__ import annotations

import os
import pwd
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Refused
from ..fsutil import open_inside, read_up_to

if TYPE_CHECKING:
    from .agent import Agent

SETTLE_S = 0.5  # a file younger than this may still be being copied in


def run(agent: "Agent", stop: threading.Event, wake: threading.Event) -> None:
    while not stop.is_set():
        waiting = False
        try:
            waiting = check_inbox(agent)
        except OSError as e:
            agent.log("mail", f"inbox scan failed: {e}")
        wake.wait(SETTLE_S if waiting else agent.settings.inbox_tick)
        wake.clear()


def check_inbox(agent: "Agent") -> bool:
    """Deliver what has settled; True if a file is still too fresh (look again soon)."""
    waiting = False
    for path in sorted((agent.dir / "mail_inbox").iterdir(), key=lambda p: p.name):
        if path.name.startswith(".") or not path.is_file():
            continue
        st = path.stat()
        if time.time() - st.st_mtime < SETTLE_S:
            waiting = True
            continue
        deliver(agent, path, st)
    return waiting


def deliver(agent: "Agent", path: Path, st: os.stat_result) -> None:
    sender = owner(st.st_uid)
    target = unique(agent.dir / "mail_inbox" / "processed" / path.name)
    shown = preview(path, agent.settings.inbox_preview, agent.dir.rel(target))
    agent.deliver_user(f"[mail from {sender}] {path.name}\n{shown}")
    os.replace(path, target)
    agent.log("mail", f"delivered {path.name} from {sender}")
    agent.tell_operator(f"[mail] {path.name} from {sender} arrived")


def preview(path: Path, limit: int, kept_as: str) -> str:
    try:  # a file someone dropped in the inbox: not a link out of it, a FIFO or a device
        with os.fdopen(open_inside(path.parent, path.name), "rb") as f:
            head = read_up_to(f, limit * 4 + 4)  # enough bytes for `limit` characters of any UTF-8
            size = os.fstat(f.fileno()).st_size
    except Refused as e:
        return f"({e}; kept as {kept_as})"
    if b"\0" in head[:8192]:
        return f"(binary, {size} bytes; kept as {kept_as})"
    text = head.decode("utf-8", "replace")
    if len(text) > limit or size > len(head):
        return f"{text[:limit]}\n[... preview clipped; the whole file is {kept_as} ({size} bytes)]"
    return text


def owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def unique(target: Path) -> Path:
    """processed/<name>, or processed/<name>.N when a mail of that name came before."""
    candidate, n = target, 1
    while candidate.exists():
        candidate = target.with_name(f"{target.name}.{n}")
        n += 1
    return candidate
