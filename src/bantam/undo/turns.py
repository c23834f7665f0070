"""Turn records: what one turn of one conversation changed in its folder, and their pruning.

A conversation is named by a key: `session-<id>` (the terminal's, the browser's, an editor's) or
`thread-<id>` (`bantam --thread ID`). Its turns are `turns/<key>/<seq>.json`, numbered in the
order they were recorded:

    {"key", "seq", "turn": the number of the turn's request among the user's messages,
     "cut": how many messages (no system prompt) came before that request: /rewind keeps these,
     "folder", "started", "updated", "undone": 0 or when,
     "running": true while one of its tool calls runs,
     "changes": {path: [entry before the turn, entry after it]}}   (entries: store.py; null: absent)

The record is written before the turn's first call that may change files, beside the scan of
the folder before it (`<seq>.base.json`), which the live turn holds an flock on. A record left
`running` by a process that died (SIGKILL, a power cut), or by a call that never returned, is finished
by the next user of the store (`finish_cut`): the folder as it is now against that scan, so
what the cut command had done can be undone too.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from .store import Manifest, Store, TooLarge, same, sync_dir

TMP_AGE = 3600.0  # a temporary file this old in the store was left by a killed process
SCAN_AGE = 86400.0  # a folder's scan is kept this long even before a record names it (a turn just begun)


def session_key(session_id: str) -> str:
    return f"session-{session_id}"


def thread_key(thread_id: str) -> str:
    return f"thread-{thread_id}"


def changes(before: Manifest, after: Manifest, paths: set[str] | None = None) -> dict[str, list]:
    """Every path (of `paths`, when given) whose state differs, as [before, after] (None: absent)."""
    return {p: [before.get(p), after.get(p)] for p in sorted(before.keys() | after.keys() if paths is None else paths)
            if not same(before.get(p), after.get(p))}


def folder_of(store: Store, key: str) -> Path:
    return store.path / "turns" / key


def records(store: Store, key: str) -> list[dict]:
    """The conversation's turn records, oldest first (unreadable ones are skipped)."""
    folder = folder_of(store, key)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json") and n[:-5].isdigit())
    except FileNotFoundError:
        return []
    found = [store.read_json(folder / n) for n in names]
    return [r for r in found if r is not None]


def undoable(store: Store, key: str) -> list[dict]:
    """The turns that can still be undone, newest first."""
    return [r for r in reversed(records(store, key)) if not r.get("undone") and r.get("changes")]


def redoable(store: Store, key: str) -> list[dict]:
    """The turns undone after the last one still standing, oldest first: the first of them is
    the one undone last, which a redo reapplies. A turn recorded since an undo ends them all."""
    done = [r for r in records(store, key) if r.get("changes") and not r.get("running")]
    standing = max((i for i, r in enumerate(done) if not r.get("undone")), default=-1)
    return done[standing + 1:]


def record_path(store: Store, key: str, seq: int) -> Path:
    return folder_of(store, key) / f"{seq:08d}.json"


def base_path(store: Store, key: str, seq: int) -> Path:
    return folder_of(store, key) / f"{seq:08d}.base.json"


def open_record(store: Store, key: str, folder: Path, turn: int, cut: int, keep: int,
                before: Manifest) -> tuple[dict, IO[bytes]]:
    """The record of a turn about to run its first call that may change files, with the scan
    before it, and the open scan file whose flock says the turn is alive (held until closed).
    The oldest records beyond `keep` are pruned, after this one is on disk, so the contents it
    needs are never taken for garbage."""
    with store.locked(exclusive=True):
        past = records(store, key)
        seq = max((int(r.get("seq", 0)) for r in past), default=0) + 1
        base = base_path(store, key, seq)
        store.write_json(base, {"folder": str(folder), "entries": before})
        hold = open(base, "rb")
        fcntl.flock(hold, fcntl.LOCK_EX)
        doc = {"key": key, "seq": seq, "turn": turn, "cut": cut, "folder": str(folder), "started": time.time(),
               "updated": time.time(), "undone": 0, "running": True, "changes": {}}
        store.write_json(record_path(store, key, seq), doc)
        done = [r for r in past if r.get("changes") and not r.get("running")]
        dropped = done[:max(0, len(done) + 1 - keep)]
        for old in dropped:
            record_path(store, key, int(old["seq"])).unlink(missing_ok=True)
        if dropped:
            collect(store)
    return doc, hold


def finish_cut(store: Store) -> None:
    """Finish the records of turns no process holds any more: one left running (its process
    died, or its call was cut short) gets the changes its folder shows now against the scan
    before the turn; the scan then goes (and a record that changed nothing with it)."""
    for base in sorted((store.path / "turns").glob("*/*.base.json")):
        try:
            with open(base, "rb") as hold:
                fcntl.flock(hold, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: its turn is still going
                path = base.with_name(base.name.replace(".base", ""))
                doc = store.read_json(path)
                if doc is not None and doc.get("running"):
                    found = changes_since(store, base, Path(doc["folder"]))
                    doc["changes"], doc["running"] = doc["changes"] if found is None else found, False
                    save_record(store, doc)
                if doc is not None and not doc.get("changes"):
                    path.unlink(missing_ok=True)
                base.unlink(missing_ok=True)
        except (BlockingIOError, FileNotFoundError):
            continue  # a live turn's, or another process finished it first


def changes_since(store: Store, base: Path, folder: Path) -> dict[str, list] | None:
    """What changed in `folder` since the scan in `base`; None when that cannot be told (the
    folder is gone or cannot be scanned): the record keeps what its finished calls found."""
    try:
        return changes((store.read_json(base) or {}).get("entries", {}), store.scan(folder)) if folder.is_dir() else None
    except (TooLarge, OSError):
        return None


def save_record(store: Store, doc: dict) -> None:
    doc["updated"] = time.time()
    store.write_json(record_path(store, doc["key"], int(doc["seq"])), doc)


def collect(store: Store) -> int:
    """Remove the blobs nothing refers to any more, the scans of folders no record names, and
    temporary files killed processes left. A scan made lately is kept: its turn may have begun
    to change files without a record yet. Called with the store locked alone. Returns blobs removed."""
    live: set[str] = set()
    folders: set[str] = set()
    turns = store.path / "turns"
    for key in os.listdir(turns) if turns.is_dir() else []:
        for doc in records(store, key):
            folders.add(str(doc.get("folder")))
            live.update(e[2] for pair in doc.get("changes", {}).values() for e in pair if e and e[0] == "f")
    for base in turns.glob("*/*.base.json"):  # a turn going on, or cut: finish_cut needs its scan
        live.update(e[2] for e in (store.read_json(base) or {}).get("entries", {}).values() if e[0] == "f")
    for cache in (store.path / "folders").glob("*.json"):
        scan = store.read_json(cache)
        recent = time.time() - cache.stat().st_mtime < SCAN_AGE
        if scan is None or (scan.get("folder") not in folders and not recent):
            cache.unlink(missing_ok=True)  # a folder no turn needs: its copy goes with it
            continue
        live.update(e[2] for e in scan.get("entries", {}).values() if e[0] == "f")
    journal: dict = store.read_json(store.path / "journal.json") or {}
    live.update(a["target"][2] for a in journal.get("actions", []) if a.get("target") and a["target"][0] == "f")
    return _sweep(store.path / "objects", live)


def _sweep(objects: Path, live: set[str]) -> int:
    removed = 0
    for sub in objects.glob("??") if objects.is_dir() else []:
        for blob in sub.iterdir():
            old_tmp = blob.name.endswith(".tmp") and time.time() - blob.stat().st_mtime > TMP_AGE
            if old_tmp or (not blob.name.endswith(".tmp") and sub.name + blob.name not in live):
                blob.unlink(missing_ok=True)
                removed += 1
        sync_dir(sub)
    return removed
