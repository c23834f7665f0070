"""The one way bantam writes files: atomically, so a crash never leaves half a file. And the
one way it keeps a path inside a directory (`confine`, `open_confined`)."""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import Refused


def confine(root: Path, path: Any) -> Path:
    """The real path of `path`, relative to the resolved directory `root`; Refused (403) when it is
    not a plain relative path or could lead outside: absolute, `..`, or a symlink that resolves out."""
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise Refused("path must be a non-empty relative path")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise Refused(f"{path}: absolute paths are not allowed; use a path relative to the workspace")
    if ".." in pure.parts:
        raise Refused(f"{path}: '..' is not allowed; paths stay inside the workspace")
    real = Path(os.path.realpath(root / pure))  # follows every symlink on the way
    if not real.is_relative_to(root):
        raise Refused(f"{path}: resolves outside the workspace (a symlink); not allowed")
    return real


def open_confined(root: Path, path: Any) -> int:
    """A read-only descriptor for `confine(root, path)`. A symlink swapped in after the check is
    not followed, and the opened file's own path is checked again (where /proc tells it)."""
    real = confine(root, path)
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise Refused(f"{path}: {e.strerror or e}", 404) from None
    link = f"/proc/self/fd/{fd}"
    if os.path.exists(link) and not Path(os.readlink(link)).is_relative_to(root):
        os.close(fd)
        raise Refused(f"{path}: resolves outside the workspace (a symlink); not allowed")
    return fd


def atomic_write(path: str | os.PathLike, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `path` through a temp file in the same directory, fsync, then rename.

    `mode` defaults to the existing file's permissions, or the umask's for a new file.
    A symlink is written through (its target is replaced), so the link itself survives.
    """
    path = Path(os.path.realpath(path))
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def private_dir(path: str | os.PathLike) -> Path:
    """Create a directory (and any missing parents, e.g. ~/.bantam) readable only by the user."""
    path = Path(path)
    if not path.is_dir():
        if path.parent != path:
            private_dir(path.parent)  # mkdir(parents=True) would give the parents the umask's mode
        path.mkdir(mode=0o700, exist_ok=True)
    return path


def bantam_home() -> Path:
    """`$BANTAM_HOME`, else `~/.bantam`. Nothing is created here."""
    return Path(os.environ.get("BANTAM_HOME") or Path.home() / ".bantam")


def append(path: str | os.PathLike, data: bytes, *, sync: bool = True, lock: bool = False,
           mode: int = 0o600) -> tuple[int, int]:
    """Append `data` with one O_APPEND write (concurrent appenders never interleave within it),
    under flock when `lock`, and fsynced when `sync`: the one append of every log bantam keeps.
    Returns the file's (inode, size) right after the write."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        write_all(fd, data)
        if sync:
            os.fsync(fd)
        st = os.fstat(fd)
        return st.st_ino, st.st_size
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a regular file takes it in one write; the loop is for signals and huge lines
        view = view[os.write(fd, view):]


MAX_LOG_BYTES = 1 << 30  # a log larger than this is refused, never read into memory


class JsonlLog:
    """An append-only JSON Lines file of records (dicts): a thread, a session, a sub-agent's progress.

    `read` skips a torn last line (a crash mid-append) and, when `heal`, cuts it off the file;
    `torn` then names its line. `sync(records)` appends what is new since the last sync, or
    rewrites the file atomically when the records were replaced (a compaction), so the file
    always equals a prefix-complete list of records. With `owned`, a file that changed since this
    object last read or wrote it (another process wrote it meanwhile) is rewritten whole instead
    of appended to, so two writers never interleave their records: the last one wins.
    """

    def __init__(self, path: str | os.PathLike, *, owned: bool = False, limit: int = MAX_LOG_BYTES):
        self.path = Path(path)
        self.owned, self.limit = owned, limit
        self.saved = 0          # how many records the file holds
        self.last: object = None  # the last record object written, to notice a replaced list
        self.stamp: tuple[int, int] | None = None  # (inode, size) as this object left the file
        self.torn = 0           # the line number of a torn last line the last read skipped

    def read(self, heal: bool = True) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                data = f.read(self.limit + 1)  # bounded, even when the file grows meanwhile
                inode = os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            self.saved, self.last, self.stamp, self.torn = 0, None, None, 0
            return []
        if len(data) > self.limit:
            raise ValueError(f"larger than the {self.limit >> 20} MB bantam reads")
        whole = _whole(data)
        records, good, self.torn = whole or [], 0, 0
        for number, line in enumerate(data.split(b"\n") if whole is None else [], 1):
            end = good + len(line) + 1
            if not line.strip():
                good = min(end, len(data))
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or end > len(data):  # no newline: a torn append
                    raise ValueError("incomplete")
            except ValueError:
                if data[end - 1:].strip():  # something follows: not a torn tail but damage
                    raise ValueError(f"{self.path}:{number}: not a JSON object") from None
                self.torn = number
                if heal:  # drop the torn last line
                    with open(self.path, "r+b") as f:
                        f.truncate(good)
                break
            records.append(record)
            good = end
        if not self.torn:
            good = len(data)
        self.saved, self.last = len(records), records[-1] if records else None
        self.stamp = (inode, good if heal or not self.torn else -1)  # -1: a torn tail is still there
        return records

    def replaced(self, records: list[dict]) -> bool:
        """True when `records` is not the file's records plus new ones (a compaction, a /clear)."""
        return bool(self.saved) and (len(records) < self.saved or records[self.saved - 1] is not self.last)

    def sync(self, records: list[dict]) -> None:
        replaced = self.replaced(records)
        if not replaced and len(records) == self.saved:
            return
        if replaced or (self.owned and self._stamp_now() != self.stamp):
            atomic_write(self.path, b"".join(_line(r) for r in records), mode=0o600)
            self.stamp = self._stamp_now()
        else:
            private_dir(self.path.parent)
            data = b"".join(_line(r) for r in records[self.saved:])
            inode, size = append(self.path, data)
            expected = (self.stamp[1] if self.stamp else 0) + len(data)
            self.stamp = (inode, size if size == expected else -1)  # -1: someone else appended too
        self.saved, self.last = len(records), records[-1] if records else None

    def _stamp_now(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size


def _whole(data: bytes) -> list[dict] | None:
    """The records of a log that ends with a whole line, parsed as one JSON array (a few times
    faster than line by line); None when it needs the careful reading (a torn or damaged line)."""
    if data and not data.endswith(b"\n"):
        return None
    try:
        # a JSON text holds no raw newline, so each one separates two records
        records = json.loads(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
    except ValueError:
        return None
    return records if all(isinstance(r, dict) for r in records) else None


def _line(record: dict) -> bytes:
    from .envpolicy import redact  # a thread or progress log never holds a known secret
    return (redact(json.dumps(record, ensure_ascii=False)) + "\n").encode("utf-8")
