"""A recorded turn's file changes as a unified diff, as `git diff` shows them, from the undo store.

    text = turn_diff(session_key(sid), seq)   # UndoError when the conversation has no such turn

Each changed path gets a `diff --git a/PATH b/PATH` header; a text file its hunks (a new file
against /dev/null, a removed one to it); a binary file, a folder, a symlink or a mode says
what changed in one line; a file whose content the store never keeps (over 10 MB, one that may
hold keys, an ignored one) says why it is not shown. Nothing is read from the workspace: the
diff is the turn as recorded, whatever happened to the files since.
"""
from __future__ import annotations

import difflib

from .restore import UndoError
from .store import SECRET, Entry, Store
from .turns import record_path

CONTEXT = 3  # lines of context around each change, as git's default


def turn_diff(key: str, seq: int, store: Store | None = None) -> str:
    """The diff of turn record `seq` of conversation `key`."""
    store = store or Store()
    record = store.read_json(record_path(store, key, seq)) if seq > 0 else None
    if record is None or not isinstance(record.get("changes"), dict):
        raise UndoError(f"no recorded turn {seq} in {key}")
    return "".join(path_diff(store, path, *pair) for path, pair in sorted(record["changes"].items()))


def path_diff(store: Store, path: str, before: Entry | None, after: Entry | None) -> str:
    head = f"diff --git a/{path} b/{path}\n"
    kinds = {e[0] for e in (before, after) if e}
    if kinds & {"d", "l"}:
        return head + f"{shape(before)} -> {shape(after)}\n"
    old, new = content(store, before), content(store, after)
    for side in (old, new):
        if isinstance(side, str):
            return head + f"not shown: {side}\n"
    head += modes(before, after)
    a, b = name(path, before, "a"), name(path, after, "b")
    if old is None or new is None:
        return head + f"Binary files {a} and {b} differ\n"
    return head + "".join(ended(line) for line in difflib.unified_diff(old, new, a, b, n=CONTEXT))


def modes(before: Entry | None, after: Entry | None) -> str:
    """git's lines for a file made, removed, or whose permission bits changed."""
    if before is None:
        return f"new file mode {after[1]:o}\n" if after else ""
    if after is None:
        return f"deleted file mode {before[1]:o}\n"
    return "" if before[1] == after[1] else f"old mode {before[1]:o}\nnew mode {after[1]:o}\n"


def ended(line: str) -> str:
    return line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


def name(path: str, entry: Entry | None, side: str) -> str:
    return f"{side}/{path}" if entry else "/dev/null"


def shape(entry: Entry | None) -> str:
    """A path's state in a few words, for what a diff of lines cannot show."""
    if entry is None:
        return "(absent)"
    return {"d": "folder", "l": f"symlink to {entry[2]}"}.get(entry[0], "file")


def content(store: Store, entry: Entry | None) -> list[str] | str | None:
    """A side's lines ([] when absent), None for a binary file, or why it is not shown."""
    if entry is None:
        return []
    if entry[0] == "b":
        return "larger than 10 MB, its content was not kept"
    if entry[0] != "f":
        return "it may hold keys, so its content was not kept" if entry[2].startswith(SECRET) \
            else "ignored or not a regular file, its content was not recorded"
    data = store.get(entry[2])
    if data is None:
        return "its content is missing from the undo store"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text.splitlines(keepends=True)
