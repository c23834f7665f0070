"""Watching a workspace while a turn runs (Linux inotify), so that after each tool call only
the paths something touched are described again, instead of every file below the folder being
stat'ed (a 20,000-file repository cost 0.4 s a call that way; bench/bench_undo.py).

    watch = Watch.of(store, rules, before)      # None: inotify unavailable, scan instead
    after = watch.update(last)                  # None: events were lost, scan instead
    watch.dirty                                 # the paths whose entry may differ from `last`

Every folder the scan walked is watched (not ignored ones, nor `.git`); a folder created later is
watched before it is walked, so nothing made inside it meanwhile is missed. Where the watch
cannot be exact (the kernel's queue overflowed, a folder was moved, so the paths of what lies
below it changed) it says so and the caller scans the whole folder, as without a watch.
"""
from __future__ import annotations

import dataclasses
import os
import stat
import struct
from typing import TYPE_CHECKING

from .store import Manifest, Rules, Scanner, Store, git_read

if TYPE_CHECKING:
    import ctypes

# inotify(7): what a watch reports, and what the events carry
CHANGES = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200  # modify, attrib, close_write, moved_from/to, create, delete
ONLYDIR, DONT_FOLLOW = 0x01000000, 0x02000000
MOVED, MOVE_SELF, OVERFLOW, IGNORED, ISDIR = 0x40 | 0x80, 0x800, 0x4000, 0x8000, 0x40000000
EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows


def _libc() -> ctypes.CDLL | None:
    import ctypes  # here: only a turn that changes files needs it, not every start of bantam
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch  # noqa: B018 (present: Linux)
    except (OSError, AttributeError):
        return None
    return libc


class Watch(Scanner):
    """The folders of one workspace under watch, and the scan they keep up to date."""

    def __init__(self, store: Store, rules: Rules, libc: ctypes.CDLL, fd: int) -> None:
        super().__init__(store, rules, {})
        self.libc, self.file = libc, open(fd, "rb", buffering=0)  # closed with the watch
        self.paths: dict[int, str] = {}
        self.dirty: set[str] = set()  # the paths the last update described again or dropped

    @classmethod
    def of(cls, store: Store, rules: Rules, found: Manifest) -> Watch | None:
        """Watch every folder in `found` (the scan just made); None where inotify is not there
        or a watch cannot be added (the user's limit of watches)."""
        libc = _libc()
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC) if libc else -1
        if libc is None or fd < 0:
            return None
        watch = cls(store, rules, libc, fd)
        try:
            for path in ["", *(p for p, e in found.items() if e[0] == "d")]:
                watch.watch(path)
        except OSError:
            return None
        return watch

    def watch(self, rel: str) -> None:
        full = os.fsencode(self.rules.folder / rel if rel else self.rules.folder)
        wd = self.libc.inotify_add_watch(self.file.fileno(), full, CHANGES | ONLYDIR | DONT_FOLLOW)
        if wd < 0:
            import ctypes
            raise OSError(ctypes.get_errno(), f"cannot watch {rel or '.'}")
        self.paths[wd] = rel

    def touched(self) -> set[str] | None:
        """The paths something created, changed, moved or removed since the last call; None when
        that cannot be known exactly."""
        touched: set[str] = set()
        while data := self.file.read(1 << 16):
            at = 0
            while at < len(data):
                wd, mask, _, size = EVENT.unpack_from(data, at)
                name = os.fsdecode(data[at + EVENT.size:at + EVENT.size + size].rstrip(b"\0"))
                at += EVENT.size + size
                if mask & OVERFLOW or mask & MOVE_SELF or (mask & MOVED and mask & ISDIR):
                    return None  # lost events, or a folder moved: the paths below it are not what they were
                if mask & IGNORED:
                    self.paths.pop(wd, None)  # its folder was removed
                elif wd in self.paths and name:
                    touched.add(f"{self.paths[wd]}/{name}" if self.paths[wd] else name)
        return touched

    def update(self, last: Manifest) -> Manifest | None:
        """`last` with every path touched since described again; None: scan the folder instead."""
        touched = self.touched()
        if touched is None:
            return None
        self.found, self.dirty = dict(last), set()  # no stat cache: a touched file is read again, whatever its times
        self.ignore(sorted(p for p in touched if p not in last))
        try:
            with self.store.locked(exclusive=False):
                for path in sorted(touched):
                    self.visit(path)
        except OSError:
            return None
        return self.found

    def visit(self, path: str) -> None:
        full = str(self.rules.folder / path)
        was = self.found.pop(path, None)
        self.dirty.add(path)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            st = None
        if was and was[0] == "d" and not (st and stat.S_ISDIR(st.st_mode)):
            for gone in [p for p in self.found if p.startswith(path + "/")]:
                del self.found[gone]
                self.dirty.add(gone)
        if st is not None and self.add(path, os.path.basename(path), full, st) and not (was and was[0] == "d"):
            self.run(path)  # a new folder: watched, then walked

    def add(self, path: str, name: str, full: str, st: os.stat_result) -> bool:
        self.dirty.add(path)
        return super().add(path, name, full, st)

    def listing(self, rel: str) -> list[os.DirEntry]:
        self.watch(rel)  # before it is read: what is made in it from now on is reported
        entries = super().listing(rel)
        self.ignore([f"{rel}/{e.name}" for e in entries])
        return entries

    def ignore(self, new: list[str]) -> None:
        """Ask git which of these new paths it ignores (a plain folder ignores by name)."""
        if self.rules.ignored is None or not new:
            return
        out = git_read(self.rules.folder, ["check-ignore", "-z", "--stdin"], b"".join(os.fsencode(p) + b"\0" for p in new),
                       ok=(0, 1))  # 1: none of them is ignored
        if out:
            ignored = self.rules.ignored | {os.fsdecode(p) for p in out.split(b"\0") if p}
            self.rules = dataclasses.replace(self.rules, ignored=frozenset(ignored))
