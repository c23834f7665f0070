"""The one way bantam writes files: atomically, so a crash never leaves half a file. The one way
a file change the model asks for is made (`Boundary.write`: checked and written on the same
directory descriptors, so a link swapped in meanwhile cannot redirect it). And the one way it
keeps a path inside a directory for reading (`confine`, `open_confined`). And the one way bantam
reads, in its own process, a file it did not write itself (`read_inside`): whatever such a read
returns may reach the model, so it never follows a link out of its folder, never reads the kernel's
or bantam's own files, never blocks on a FIFO and never takes more than its bound."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from .errors import Refused, ToolError

Change = bytes | Callable[[bytes | None], bytes]  # new content, or old content (None: no file) -> new
# A directory descriptor that only names the directory (no read permission needed) where Linux has it.
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


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
    try:  # O_NONBLOCK: a FIFO does not hold the open
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise Refused(f"{path}: {e.strerror or e}", 404) from None
    link = f"/proc/self/fd/{fd}"
    if os.path.exists(link) and not Path(os.readlink(link)).is_relative_to(root):
        os.close(fd)
        raise Refused(f"{path}: resolves outside the workspace (a symlink); not allowed")
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.close(fd)
        raise Refused(f"{path}: not a regular file (a FIFO, a device or a socket)")
    return fd


# Files there are not files: /proc/self/environ is bantam's whole environment (commands see their
# own, scrubbed one), /dev/zero never ends, /sys describes the machine. Never read for the model.
SYSTEM_TREES = (Path("/proc"), Path("/dev"), Path("/sys"))
CONFIG_LIMIT = 1 << 20  # bytes of a settings file read (.bantam.cfg, .mcp.json, config.json): more is refused
EDIT_LIMIT = 64 << 20  # bytes of a file read for a splice or an edit (its old content is held whole)


def user_config_dir() -> Path:
    """`$XDG_CONFIG_HOME/bantam`, else `~/.config/bantam`: the user's settings, keys and MCP servers."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "bantam"


def guarded_dirs() -> tuple[Path, ...]:
    """bantam's own state and the user's bantam configuration (resolved): they hold keys, tokens and
    trust decisions, so the model never writes them, and nothing is read from them for the model."""
    return tuple(Path(os.path.realpath(p)) for p in (bantam_home(), user_config_dir()))


def read_inside(folder: str | os.PathLike, path: str | os.PathLike, limit: int, *,
                shown: str | None = None, refuse: Iterable[str | os.PathLike] = ()) -> bytes:
    """The first `limit` bytes of the file `open_inside` opens (see there)."""
    with os.fdopen(open_inside(folder, path, shown=shown, refuse=refuse), "rb") as f:
        return read_up_to(f, limit)


def open_inside(folder: str | os.PathLike, path: str | os.PathLike, *,
                shown: str | None = None, refuse: Iterable[str | os.PathLike] = ()) -> int:
    """A read-only descriptor for the file at `path` (relative to `folder`, or absolute), which
    bantam reads for the model or for its prompt but did not write itself. Refused (one line
    saying why, naming `shown`, default `path`) unless it is a regular file that lies, with every
    link on the way resolved, inside `folder`; never under /proc, /dev or /sys; outside bantam's own
    folders (unless `folder` is one of them: the skills in ~/.bantam/agent); and neither one of the
    `refuse` paths (files whose content is secret, such as the daemon's config.json) nor inside one.
    The check is made again on the descriptor after the open, so a link swapped in between is
    caught; the open does not block (a FIFO is refused, not waited on). An OSError where there is
    nothing to read (FileNotFoundError, IsADirectoryError): a missing optional file is no refusal.
    Read it with a bound (`read_inside`, `read_up_to`)."""
    shown = os.fspath(path) if shown is None else shown
    where = Path(os.path.realpath(folder))
    given = Path(folder, os.path.expanduser(os.fspath(path)))
    fences = [Path(os.path.realpath(p)) for p in refuse]
    _check_read(Path(os.path.realpath(given)), where, fences, shown)  # before the open: never touch a device
    fd = os.open(given, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        opened = f"/proc/self/fd/{fd}"
        if os.path.exists(opened):  # where the kernel says the descriptor points (a link swapped meanwhile)
            _check_read(Path(os.readlink(opened)), where, fences, shown)
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", shown)
        if not stat.S_ISREG(mode):
            raise Refused(f"not read: {shown} is not a regular file (a FIFO, a device or a socket)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_named(path: str | os.PathLike, limit: int) -> bytes:
    """A file the user named on the command line (a prompt file, a tasks file, a run's settings):
    wherever its links lead, but never a FIFO (the open would wait), a device or a kernel file,
    and at most `limit` bytes (Refused over it, saying so)."""
    real = Path(os.path.realpath(path))
    data = read_inside(real.parent, real.name, limit + 1, shown=os.fspath(path))
    if len(data) > limit:
        raise Refused(f"not read: {os.fspath(path)} is larger than {limit:,} bytes")
    return data


def read_setting(path: str | os.PathLike, *, own: bool = False) -> bytes:
    """A settings file bantam reads (.bantam.cfg, model.cfg, .mcp.json, the user's config, the
    daemon's config.json), through `open_inside`: inside its own folder, or, for the user's `own`
    files, wherever a link leads (a config kept in a dotfiles repository), but never a FIFO, a
    device or a kernel file; at most CONFIG_LIMIT bytes (a larger one is refused, not cut: a cut
    one would be misread)."""
    real = Path(os.path.realpath(path)) if own else Path(path)
    data = read_inside(real.parent, real.name, CONFIG_LIMIT + 1, shown=os.fspath(path))
    if len(data) > CONFIG_LIMIT:
        raise Refused(f"not read: {os.fspath(path)} is larger than {CONFIG_LIMIT >> 20} MB; a settings file never is")
    return data


def _check_read(real: Path, folder: Path, refuse: list[Path], shown: str) -> None:
    for tree in SYSTEM_TREES:
        if _under(real, tree):
            raise Refused(f"not read: {shown} leads into {tree} ({real}), the kernel's files, not a project's")
    for own in guarded_dirs():
        if _under(real, own) and not _under(folder, own):
            raise Refused(f"not read: {shown} leads into {own}, bantam's own files (keys and settings)")
    for secret in refuse:
        if _under(real, secret):
            raise Refused(f"not read: {shown} leads to {secret}, which holds keys")
    if not _under(real, folder):
        raise Refused(f"not read: {shown} leads outside {folder} (to {real}); a link out of its folder is not followed")


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


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
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        named(e, path)
        raise


@dataclass(frozen=True)
class Boundary:
    """Where a file change the model asks for may land. Every such change (write_file, edit_file,
    the daemon's WRITE_FILE and EDIT_FILE, a controlled run's write, `bantam mcp`) is made by
    `write`, which walks from the root one component at a time on directory descriptors opened
    without following links, and writes inside the last one. The object checked is the object
    written: a link or rename between a check and the write cannot lead out of the roots.

    roots      the folders the path must lie under (resolved); () allows nothing
    protected  names no component below the root may have, at any depth (.git, .bantam.cfg, ...)
    guarded    folders never written inside, wherever they lie (bantam's own state and config)
    granted    roots that lie inside a guarded folder and are written all the same: the session's
               /tmp, which bantam keeps in its own folder for the model's commands and files
    resolve    True: the path's links are resolved once, then the result is walked (a link from one
               place in the roots to another works; one that appears later is refused). False: the
               path as written, and any link in it is refused.
    where      the roots in words, for the model
    The default is the user's full rights (sandbox=off): anywhere, links resolved once.
    """
    roots: tuple[Path, ...] = (Path("/"),)
    protected: frozenset[str] = frozenset()
    guarded: tuple[Path, ...] = ()
    resolve: bool = True
    where: str = ""
    granted: tuple[Path, ...] = ()

    def locate(self, path: str | os.PathLike) -> tuple[Path, tuple[str, ...]]:
        """(root, the components below it) that a write of `path` walks; Refused saying why not."""
        given = os.path.expanduser(os.fspath(path))
        full = Path(os.path.realpath(given) if self.resolve else os.path.abspath(given))
        inside = [root for root in self.roots if root == full or root in full.parents]
        if not inside:
            where = self.where or ", ".join(map(str, self.roots)) or "none"
            raise Refused(f"{path} is outside the writable roots ({where})")
        root = max(inside, key=lambda r: len(r.parts))  # nested roots: the closest one
        parts = full.parts[len(root.parts):]
        for name in parts:
            if name in self.protected:
                raise Refused(f"{path} is protected: {name} stays read-only, at any depth")
        for guarded in self.guarded:
            if (guarded == full or guarded in full.parents) and root not in self.granted:
                raise Refused(f"{path} is protected: {guarded} (bantam's own files) stays read-only")
        if not parts:
            raise ToolError(f"{path} is a directory")
        return root, parts

    def target(self, path: str | os.PathLike) -> Path:
        """The file a write of `path` would replace, checked as `write` checks it, for a write that
        someone else makes (an editor, through ACP): Refused for a path outside the roots, a
        protected name, or a link on the way; ToolError for a folder."""
        root, parts = self.locate(path)
        current = root
        for name in parts:
            current = current / name
            if current.is_symlink():
                raise Refused(f"{path}: {name} is a symbolic link; file writes do not follow links "
                              "here: write the link's target by its own path")
        if current.is_dir():
            raise ToolError(f"{path} is a directory")
        return current

    def write(self, path: str | os.PathLike, change: Change, mode: int | None = None) -> bytes:
        """Replace the file at `path` atomically by `change` (bytes, or a function of the old bytes)
        and return what was written. Missing folders are made once the new content is known (a
        refused change leaves nothing behind). `mode` defaults to the old file's, or the umask's."""
        root, parts = self.locate(path)
        fd = os.open(root, _DIR_FLAGS)
        try:
            for name in parts[:-1]:
                try:
                    below = _open_dir(fd, name, path)
                except FileNotFoundError:
                    if callable(change):
                        change = change(None)  # no folder, so no file: a bad splice fails before mkdir
                    try:
                        os.mkdir(name, dir_fd=fd)
                    except FileExistsError:
                        pass  # made meanwhile: opened below like any other, without following a link
                    below = _open_dir(fd, name, path)
                os.close(fd)
                fd = below
            return _replace_in(fd, parts[-1], change, mode, path)
        finally:
            os.close(fd)


ANYWHERE = Boundary()  # the user's full rights (sandbox=off, or bantam's own writes)


def _open_dir(fd: int, name: str, shown: str | os.PathLike) -> int:
    """The folder `name` inside `fd`, never through a link."""
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(fd, name):
            raise Refused(f"{shown}: {name} is a symbolic link (or became one); file writes do not "
                          "follow links here: write the link's target by its own path") from None
        raise


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _replace_in(fd: int, name: str, change: Change, mode: int | None, shown: str | os.PathLike) -> bytes:
    """Write `name` in the folder `fd`: a new temp file there, fsync, chmod, rename over the name."""
    try:
        st: os.stat_result | None = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise Refused(f"{shown} is a symbolic link (or became one); file writes do not follow links "
                      "here: write the link's target by its own path")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory")
    if callable(change):
        change = change(_read_in(fd, name, shown) if st is not None else None)
    if mode is None and st is not None:
        mode = st.st_mode & 0o7777
    while True:  # a new file gets 0o666 less the umask from the kernel (no racy os.umask read)
        tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                          0o666 if mode is None else 0o600, dir_fd=fd)
            break
        except FileExistsError:
            continue
    try:
        try:
            write_all(out, change)
            os.fsync(out)
            if mode is not None:
                os.fchmod(out, mode)
        finally:
            os.close(out)
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        raise
    return change


def _read_in(fd: int, name: str, shown: str | os.PathLike) -> bytes:
    """The old content for a splice or edit: opened without following a link, and only a regular
    file (O_NONBLOCK: a FIFO swapped in does not hang the open)."""
    try:
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused(f"{shown} is a symbolic link (or became one); file writes do not follow "
                          "links here") from None
        raise
    with os.fdopen(handle, "rb") as f:
        st = os.fstat(handle)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{shown} is not a regular file")
        if st.st_size > EDIT_LIMIT:
            raise ToolError(f"{shown} is too large to change in place ({st.st_size >> 20} MB; the limit is "
                            f"{EDIT_LIMIT >> 20} MB): use a shell command, or write the whole file")
        return read_up_to(f, EDIT_LIMIT)


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
    return _home(os.environ.get("BANTAM_HOME"), os.environ.get("HOME"))


@lru_cache(maxsize=16)
def _home(bantam_home: str | None, home: str | None) -> Path:
    # by the variables' values, so a changed HOME is seen at once; cached, because a batch task
    # asks about a dozen times and each Path.home() / ".bantam" parsed its path again
    return Path(bantam_home or Path.home() / ".bantam")


def append(path: str | os.PathLike, data: bytes, *, sync: bool = True, lock: bool = False,
           mode: int = 0o600) -> tuple[int, int]:
    """Append `data` with one O_APPEND write (concurrent appenders never interleave within it),
    under flock when `lock`, and fsynced when `sync`: the one append of every log bantam keeps.
    Returns the file's (inode, size) right after the write."""
    # never through a link: a log the model can reach (the daemon's LIFE.md) replaced by a link
    # to ~/.bashrc or config.json must not send bantam's own writes there
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        write_all(fd, data)
        if sync:
            os.fsync(fd)
        st = os.fstat(fd)
        return st.st_ino, st.st_size
    except OSError as e:
        named(e, path)
        raise
    finally:
        os.close(fd)


def named(error: BaseException, path: str | os.PathLike) -> None:
    """Make an OSError that names no file name `path`: a failed write or fsync says only "No
    space left on device", and whoever reports it must be able to say where."""
    if isinstance(error, OSError) and error.filename is None:
        error.filename = os.fspath(path)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a regular file takes it in one write; the loop is for signals and huge lines
        view = view[os.write(fd, view):]


def read_up_to(f: BinaryIO, n: int) -> bytes:
    """What `f.read(n)` returns (at most `n` bytes, fewer at the end), without taking `n` bytes
    of memory first: a buffered read(n) allocates all of `n` up front, so a bound of 1 GiB made
    every read of a small log map and unmap 1 GiB, and unmapping stalls every thread of the
    process (a batch's 256 sessions). A regular file is read at its current size in one go (a
    short read is its end); one that grew meanwhile, or a pipe, in chunks to the end or `n`."""
    try:
        st = os.fstat(f.fileno())
        regular, size = stat.S_ISREG(st.st_mode), st.st_size
    except (OSError, ValueError, AttributeError):  # no file descriptor: read in chunks
        regular, size = False, 0
    parts, left, chunk = [], n, (size + 1 if regular else 1 << 16)
    while left > 0:
        want = min(left, chunk)
        data = f.read(want)
        if not data:
            break
        parts.append(data)
        left -= len(data)
        if regular and len(data) < want:
            break
        chunk = 1 << 20
    return b"".join(parts)


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
            with open(self.path, "rb", buffering=0) as f:  # unbuffered: no isatty probe, no seek
                data = read_up_to(f, self.limit + 1)  # bounded, even when the file grows meanwhile
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

    def replaced(self, records: list[dict], count: int | None = None) -> bool:
        """True when `records` (its first `count`) is not the file's records plus new ones (a
        compaction, a /clear)."""
        count = len(records) if count is None else count
        return bool(self.saved) and (count < self.saved or records[self.saved - 1] is not self.last)

    def sync(self, records: list[dict]) -> None:
        """Write `records` as they are when called: what is appended to the list meanwhile is
        left for the next sync."""
        count = len(records)
        replaced = self.replaced(records, count)
        if not replaced and count == self.saved:
            return
        if replaced or (self.owned and self._stamp_now() != self.stamp):
            atomic_write(self.path, b"".join(_line(r) for r in records[:count]), mode=0o600)
            self.stamp = self._stamp_now()
        else:
            private_dir(self.path.parent)
            data = b"".join(_line(r) for r in records[self.saved:count])
            inode, size = append(self.path, data)
            expected = (self.stamp[1] if self.stamp else 0) + len(data)
            self.stamp = (inode, size if size == expected else -1)  # -1: someone else appended too
        self.saved, self.last = count, records[count - 1] if count else None

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
