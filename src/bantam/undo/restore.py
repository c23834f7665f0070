"""Undoing turns: a plan (what will be restored, removed, what conflicts, what cannot be undone),
then a journal, then the changes.

    p = plan(store, key, count)       # reads only; conflicts and what cannot be undone are listed
    problems = apply(store, p, force)  # journal first (fsynced), then the workspace
    p = plan_redo(store, key)         # the turn undone last, back as it was after it

Crash safety: the journal (every path with its state before the undo and the state to restore,
all contents already in the store) is written and fsynced before the workspace is touched, and
removed only after every restored file and folder is fsynced and the turns are marked undone.
Each file is replaced by a rename, so a path is always either its old or its new state. Whoever
next locks the store (`recover`: a scan, `bantam undo`, `bantam undo --list`) finds the journal
and completes it, so a workspace is as before the undo or as after it, never half.
"""
from __future__ import annotations

import os
import secrets
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BantamError
from ..fsutil import write_all
from .store import SECRET, SPECIAL, Entry, Store, same, sync_dir
from .turns import finish_cut, record_path, redoable, undoable

JOURNAL = "journal.json"


class UndoError(BantamError):
    """Nothing to undo, or the undo cannot go ahead as asked."""


@dataclass
class Action:
    path: str
    expect: Entry | None   # what the undone turns left there
    target: Entry | None   # what to restore (None: remove)
    now: Entry | None = None

    @property
    def verb(self) -> str:
        if self.target is None:
            return "remove folder" if self.now and self.now[0] == "d" else "remove"
        return "recreate" if self.now is None else "restore"


@dataclass
class Plan:
    key: str
    folder: Path
    records: list[dict]                    # the turns undone (redone: oldest first), newest first
    actions: list[Action] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # changed since the turn: not silently overwritten
    cannot: list[tuple[str, str]] = field(default_factory=list)  # (path, why it cannot be undone)
    redo: bool = False  # reapplies turns undone before, instead of undoing turns

    @property
    def cut(self) -> int:
        """Messages (without the system prompt) to keep for /rewind: those before the oldest turn undone."""
        return min(int(r.get("cut", 0)) for r in self.records)

    def lines(self) -> list[str]:
        turns = ", ".join(str(r.get("turn", "?")) for r in sorted(self.records, key=lambda r: int(r["seq"])))
        word = "redo" if self.redo else "undo"
        out = [f"{word} turn{'s' if len(self.records) > 1 else ''} {turns} of {self.key}, in {self.folder}:"]
        out += [f"  {a.verb:<13} {shown(a.path)}" + ("   (changed since the turn)" if a.path in self.conflicts else "")
                for a in self.actions]
        out += [f"  cannot {word}   {shown(path)}: {why}" for path, why in self.cannot]
        if not self.actions:
            out.append(f"  nothing to restore: the files are already as they were {'after' if self.redo else 'before'}")
        return out


def shown(path: str) -> str:
    """A path as a terminal may print it: a name the model gave escape codes or newlines is quoted."""
    return path if path.isprintable() else ascii(path)


def plan(store: Store, key: str, count: int = 1) -> Plan:
    """What undoing the last `count` turns of `key` that changed files would do. Reads only."""
    recover(store)
    chosen = undoable(store, key)[:count]
    if not chosen:
        raise UndoError(f"nothing to undo in {key}: no recorded turn changed files")
    return check(store, Plan(key, one_folder(chosen), chosen), *merge(chosen))


def plan_redo(store: Store, key: str, count: int = 1) -> Plan:
    """What reapplying the `count` turns undone last of `key` would do: each path back to its
    state after them, where it is still as the undo left it. Reads only."""
    recover(store)
    chosen = redoable(store, key)[:count]
    if not chosen:
        raise UndoError(f"nothing to redo in {key}: no turn was undone since the last one that changed files")
    merged: dict[str, Action] = {}
    for record in chosen:  # oldest first: each path goes to its state after the last of them
        kept = set(record.get("skipped", []))  # left as the person made them: never undone
        for path, (before, after) in record["changes"].items():
            if path in merged:
                merged[path].target = after
            elif path not in kept:
                merged[path] = Action(path, before, after)
    return check(store, Plan(key, one_folder(chosen), chosen[::-1], redo=True), merged, set())


def one_folder(chosen: list[dict]) -> Path:
    folders = {r["folder"] for r in chosen}
    if len(folders) > 1:
        raise UndoError(f"those turns worked in different folders ({', '.join(sorted(folders))}); undo fewer")
    return Path(folders.pop())


def check(store: Store, p: Plan, merged: dict[str, Action], between: set[str]) -> Plan:
    """Fill `p` with the actions still needed, what conflicts and what cannot be done."""
    for path in sorted(merged):
        a = merged[path]
        why = unrestorable(store, a)
        if why:
            p.cannot.append((path, why))
            continue
        a.now = store.entry(p.folder, path)
        if same(a.now, a.target):
            continue
        if path in between or not same(a.now, a.expect):
            p.conflicts.append(path)
        p.actions.append(a)
    return p


def merge(chosen: list[dict]) -> tuple[dict[str, Action], set[str]]:
    """Newest turn first: each path goes back to its state before the oldest turn that changed it.
    A path whose state between two of these turns differs was changed by hand meanwhile."""
    merged: dict[str, Action] = {}
    between: set[str] = set()
    for record in chosen:
        for path, (before, after) in record["changes"].items():
            if path in merged:
                if not same(merged[path].target, after):
                    between.add(path)
                merged[path].target = before
            else:
                merged[path] = Action(path, after, before)
    return merged, between


def unrestorable(store: Store, a: Action) -> str:
    """Why this change cannot be undone, or ''."""
    if a.target is None and a.expect and (a.expect[0] == "b" or a.expect[2].startswith((SECRET, SPECIAL))):
        return ""  # created by the turn: removing it needs no copy of its content
    for e in (a.expect, a.target):
        if e and e[0] == "b":
            return "larger than 10 MB, its content was not kept"
        if e and e[0] == "i":
            if a.path == ".git" or a.path.endswith("/.git"):
                return "git's own state (.git); bantam never touches it"
            if e[2].startswith(SECRET):
                return "it may hold keys (a config file, .env, a private key), so its content was not kept"
            return "ignored (.gitignore, a cache folder, or not a file), not recorded"
    if a.target and a.target[0] == "f" and not store.blob_path(a.target[2]).exists():
        return "its earlier content is missing from the undo store"
    return ""


def apply(store: Store, p: Plan, force: bool = False) -> list[str]:
    """Carry out `p`; returns the paths it could not restore, each with why. A file changed since
    the turn is left as it is (`p.conflicts`, the caller names them) unless `force`. Raises
    UndoError when every change conflicts and not `force`, or when the workspace changed since
    the plan."""
    if p.redo and p.conflicts and not force:
        raise UndoError("changed since the undo (not overwritten; --force overwrites them): " + ", ".join(
            shown(c) for c in p.conflicts))
    skipped = set() if force else set(p.conflicts)
    actions = [a for a in p.actions if a.path not in skipped]
    if skipped and not actions:
        raise UndoError("nothing undone: every file it would restore changed since the turn (--force overwrites them)")
    with store.locked(exclusive=True):
        _recover(store)
        for a in actions:
            now = store.entry(p.folder, a.path, keep=a.path in p.conflicts)  # a forced-over file stays in the store
            if not same(now, a.now):
                raise UndoError(f"{a.path} changed while the undo was being prepared; run it again")
        journal = {"id": secrets.token_hex(4), "key": p.key, "folder": str(p.folder),
                   "seqs": [int(r["seq"]) for r in p.records], "skipped": sorted(skipped), "redo": p.redo,
                   "actions": [{"path": a.path, "now": a.now, "target": a.target} for a in actions]}
        store.write_json(store.path / JOURNAL, journal)  # fsynced: from here on the undo completes
        return complete(store, journal)


def recover(store: Store) -> list[str]:
    """Complete an undo a killed process left half done, and the records of turns a kill cut
    (there is nothing to do almost always)."""
    finish_cut(store)
    if not (store.path / JOURNAL).exists():
        return []
    with store.locked(exclusive=True):
        return _recover(store)


def _recover(store: Store) -> list[str]:
    journal = store.read_json(store.path / JOURNAL)
    if journal is None:
        (store.path / JOURNAL).unlink(missing_ok=True)  # atomic_write: never torn; absent meanwhile
        return []
    return complete(store, journal)


def complete(store: Store, journal: dict) -> list[str]:
    """Bring every path of the journal to its target (idempotent), then mark the turns undone."""
    restorer = Restorer(store, Path(journal["folder"]), journal["id"])
    todo = restorer.pending(journal["actions"])
    for a in sorted(todo, key=depth, reverse=True):
        restorer.remove(a)
    for a in sorted(todo, key=depth):
        restorer.create(a)
    for a in sorted(todo, key=depth, reverse=True):
        restorer.set_mode(a)
    restorer.finish(journal["actions"])
    for seq in journal["seqs"]:
        path = record_path(store, journal["key"], seq)
        doc = store.read_json(path)
        if doc is not None and journal.get("redo") and doc.get("undone"):
            doc["undone"], doc["skipped"] = 0, []
            store.write_json(path, doc)
        elif doc is not None and not journal.get("redo") and not doc.get("undone"):
            doc["undone"], doc["skipped"] = time.time(), journal.get("skipped", [])  # left as the person made them
            store.write_json(path, doc)
    (store.path / JOURNAL).unlink(missing_ok=True)
    sync_dir(store.path)
    return restorer.problems


def depth(a: dict) -> int:
    return a["path"].count("/")


class Restorer:
    """The file operations of one journal, never through a link."""

    def __init__(self, store: Store, folder: Path, jid: str) -> None:
        self.store, self.folder, self.jid = store, folder, jid
        self.base = Path(os.path.realpath(folder))
        self.problems: list[str] = []
        self.bad: set[str] = set()  # paths that failed: nothing more is done to them
        self.touched: set[Path] = set()

    def pending(self, actions: list[dict]) -> list[dict]:
        """The actions not done yet. A path that is neither as the undo found it, nor restored,
        nor removed on the way (a kill between the two halves of a type change) is left alone."""
        todo = []
        for a in actions:
            cur = self.store.entry(self.folder, a["path"])
            if same(cur, a["target"]):
                continue
            if cur is not None and not same(cur, a["now"]):
                self.fail(a, "changed while the undo was interrupted; left as it is")
                continue
            todo.append(a)
        return todo

    def locate(self, rel: str) -> Path | None:
        """The path, when its folder is reached without a link (else the undo could write elsewhere)."""
        parent = os.path.dirname(rel)
        real = self.base / parent if parent else self.base
        return real / os.path.basename(rel) if os.path.realpath(real) == str(real) else None

    def safe(self, a: dict) -> Path | None:
        if a["path"] in self.bad:
            return None
        path = self.locate(a["path"])
        if path is None:
            self.fail(a, "its folder is now a link or missing; not restored")
        return path

    def fail(self, a: dict, why: str) -> None:
        self.bad.add(a["path"])
        self.problems.append(f"{shown(a['path'])}: {why}")

    def remove(self, a: dict) -> None:
        path, target = self.safe(a), a["target"]
        if path is None:
            return
        try:
            kind = _kind(os.lstat(path))
        except FileNotFoundError:
            return
        if target is not None and target[0] == kind:
            return  # the same kind of thing: replaced in place by create()
        try:
            os.rmdir(path) if kind == "d" else os.unlink(path)
            self.touched.add(path.parent)
        except OSError as e:
            self.fail(a, f"not removed ({e.strerror}; it holds files no turn recorded)")

    def create(self, a: dict) -> None:
        target, path = a["target"], self.safe(a)
        if target is None or path is None:
            return
        tmp = self.tmp(path)
        try:
            if target[0] == "d":
                os.makedirs(path, exist_ok=True)
            elif target[0] == "l":
                tmp.unlink(missing_ok=True)
                os.symlink(target[2], tmp)
                os.replace(tmp, path)
            else:
                self.write(tmp, path, target)
            self.touched.add(path.parent)
        except OSError as e:
            self.fail(a, f"not restored ({e.strerror or e})")

    def write(self, tmp: Path, path: Path, target: Entry) -> None:
        data = self.store.get(target[2])
        if data is None:
            raise OSError(0, "its content is damaged in the undo store")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, data)
            os.fchmod(fd, target[1])  # every permission bit, set before the file appears
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def set_mode(self, a: dict) -> None:
        target, path = a["target"], self.safe(a)
        if target is not None and target[0] == "d" and path is not None:
            try:
                os.chmod(path, target[1])
            except OSError as e:
                self.fail(a, f"mode not restored ({e.strerror})")

    def tmp(self, path: Path) -> Path:
        return path.with_name(f".{path.name}.{self.jid}.undo")

    def finish(self, actions: list[dict]) -> None:
        """Leftover temporary files of a killed run go; every folder touched is fsynced."""
        for a in actions:
            path = self.locate(a["path"])
            if path is not None:
                self.tmp(path).unlink(missing_ok=True)
        for folder in self.touched:
            try:
                sync_dir(folder)
            except OSError:
                pass


def _kind(st: os.stat_result) -> str:
    return "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
