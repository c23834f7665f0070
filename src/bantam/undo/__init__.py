"""Undo: every file change a turn made, shell commands' included, can be taken back.

    guard = UndoGuard(thread_key("T"), folder, keep=cfg.undo_keep, on_event=render)
    loop.run(provider, messages, toolbox, limits, render, guards=[*loop.default_guards(limits), guard])

    p = plan(session_key(sid), 2)      # the last two turns that changed files; reads only
    print("\\n".join(p.lines()))        # what is restored, removed, conflicts, cannot be undone
    problems = apply(p, force=False)   # a file changed by hand since the turn is left (p.conflicts)
    del history[p.cut:]                # /rewind: the conversation as before those turns
    p = plan_redo(session_key(sid))    # the turn undone last, back as it was after it (then apply)

How a turn is recorded (UndoGuard, a loop guard): before the turn's first tool call that may
change files (anything but read_file, list_files, read_image, read_pdf) the whole workspace is
scanned into the content store (store.py: files by SHA-256, so an unchanged file costs a stat,
not a copy) and the turn's record is written, marked running, beside that scan (turns.py).
After each such call the paths a watch saw touched (watch.py; without one, the whole workspace)
are described again, and the difference from the first scan is the turn's record. A record a
kill left running is finished by the next start, from the folder as the kill left it. Undoing
restores each changed path to its state before the turn: created files removed, deleted ones
recreated, modified ones restored byte for byte with every permission bit, symlinks and empty
folders too; journalled, so a kill cannot leave it half done (restore.py). Nothing is written
in the user's `.git`.
"""
from __future__ import annotations

from pathlib import Path
from typing import IO, Callable, TypeVar

from ..events import Notice, OnEvent, ignore
from ..tools import Outcome
from . import restore, turns
from .restore import Plan, UndoError
from .store import Manifest, Rules, Store, TooLarge
from .turns import changes, session_key, thread_key
from .watch import Watch

__all__ = ["UndoGuard", "Plan", "UndoError", "plan", "plan_redo", "apply", "undoable", "redoable", "recover",
           "session_key", "thread_key", "READ_ONLY"]

T = TypeVar("T")
READ_ONLY = frozenset({"read_file", "list_files", "read_image", "read_pdf"})  # tools that change no file


def plan(key: str, count: int = 1, store: Store | None = None) -> Plan:
    """What undoing the last `count` turns of conversation `key` that changed files would do."""
    return restore.plan(store or Store(), key, count)


def plan_redo(key: str, count: int = 1, store: Store | None = None) -> Plan:
    """What reapplying the `count` turns of `key` undone last would do (none changed since)."""
    return restore.plan_redo(store or Store(), key, count)


def apply(p: Plan, force: bool = False, store: Store | None = None) -> list[str]:
    """Carry out `p`; returns what could not be restored, each line with why."""
    return restore.apply(store or Store(), p, force)


def undoable(key: str, store: Store | None = None) -> list[dict]:
    """The turns of `key` that can be undone, newest first (records: turns.py)."""
    store = store or Store()
    restore.recover(store)
    return turns.undoable(store, key)


def redoable(key: str, store: Store | None = None) -> list[dict]:
    """The undone turns of `key` a redo can reapply, the next one first (turns.redoable)."""
    store = store or Store()
    restore.recover(store)
    return turns.redoable(store, key)


def recover(store: Store | None = None) -> list[str]:
    """Complete an undo that a killed bantam left half done."""
    return restore.recover(store or Store())


class UndoGuard:
    """Records the file changes of one turn (a new guard for each turn)."""

    def __init__(self, key: str, folder: Path, keep: int = 50, on_event: OnEvent = ignore,
                 store: Store | None = None) -> None:
        self.key, self.folder, self.keep, self.on_event = key, folder, keep, on_event
        self.store = store or Store()
        self.before: Manifest | None = None  # the workspace before the turn's first change
        self.last: Manifest | None = None
        self.record: dict | None = None
        self.hold: IO[bytes] | None = None  # the turn's scan file, flocked while this turn lives
        self.watch: Watch | None = None  # what changes in the workspace while the turn runs
        self.turn = self.cut = 0
        self.off = keep < 1

    def before_request(self, messages: list[dict]) -> None:
        if self.turn:
            return
        history = [m for m in messages if m.get("role") != "system"]
        users = [i for i, m in enumerate(history) if m.get("role") == "user"]
        self.cut = users[-1] if users else len(history)  # /rewind keeps what came before the request
        self.turn = len(users)

    def before_call(self, name: str, arguments: str) -> str | None:
        if name in READ_ONLY or self.off:
            return None
        if self.before is None:
            self.open()
        elif self.record is not None and not self.record["running"]:
            self.record["running"] = True  # on disk before the call: a kill during it is finished later
            self.attempt(lambda: turns.save_record(self.store, self.record or {}))
        return None

    def after_call(self, name: str, arguments: str, outcome: Outcome) -> None:
        if name in READ_ONLY or self.before is None or self.record is None or self.off:
            return
        after = self.attempt(self.scan)
        if after is None:
            return  # the record stays running: the next start finishes it from the folder
        self.last = after
        if self.watch is None:
            self.record["changes"] = changes(self.before, after)
        else:  # only what the watch described again can differ from the record so far
            kept = {p: pair for p, pair in self.record["changes"].items() if p not in self.watch.dirty}
            self.record["changes"] = dict(sorted({**kept, **changes(self.before, after, self.watch.dirty)}.items()))
        self.record["running"] = False
        self.attempt(lambda: turns.save_record(self.store, self.record or {}))

    def open(self) -> None:
        """The scan before the turn's first change, and its record, on disk before the call runs."""
        before = self.attempt(self.first_scan)
        opened = None if before is None else self.attempt(lambda: turns.open_record(
            self.store, self.key, self.folder, self.turn, self.cut, self.keep, before))
        if before is not None and opened is not None:
            self.before, (self.record, self.hold) = before, opened

    def first_scan(self) -> Manifest:
        restore.recover(self.store)  # an undo or a turn a kill interrupted is finished before anything is recorded
        rules = Rules.of(self.folder)
        found = self.store.scan(self.folder, rules=rules)
        self.watch = Watch.of(self.store, rules, found)
        return found

    def scan(self) -> Manifest:
        """The workspace after a call: what the watch saw touched, else every path again."""
        last = self.last or self.before or {}
        found = self.watch.update(last) if self.watch else None
        if found is None:
            self.watch = None  # it could not say exactly: scans from now on
            found = self.store.scan(self.folder, last)
        return found

    def attempt(self, work: Callable[[], T]) -> T | None:
        try:
            return work()
        except (TooLarge, OSError) as e:
            self.off = True
            self.on_event(Notice(message=f"undo: this turn's file changes are not recorded ({e})"))
            return None
