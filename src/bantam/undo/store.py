"""The undo store: file contents by SHA-256, a folder's last scan, and what each turn changed.

    ~/.bantam/undo/
        objects/ab/cdef...      a file's bytes, zlib-compressed, named by the SHA-256 of the bytes
        folders/<md5>.json      a folder's last scan (the stat cache: unchanged files are not re-read)
        turns/<key>/<seq>.json  one turn: its conversation, its folder, each changed path before/after
        journal.json            an undo in progress (restore.py); the next user of the store finishes it
        lock                    flock: scans share it, an undo or a prune holds it alone

One store serves git repositories and plain folders: nothing is ever written in the user's
`.git` (no ref, no index, no object), so `git gc` cannot lose a snapshot and no line-ending
filter can alter a byte. A scan records every file, symlink and folder below the workspace with
all its permission bits, except what it cannot afford or must not own (`Rules`): `.git` itself,
files over MAX_FILE_BYTES, ignored files (`.gitignore` in a git repository; in a plain folder the
usual caches, SKIP_NAMES), sockets or devices, and files that hold secrets: bantam's protected
names at any depth (sandbox.PROTECTED_NAMES: `model.cfg` and `.bantam.cfg` may carry an api_key,
and the model cannot write them anyway), the usual secret files (SECRET_NAMES: `.env`, `.netrc`,
private keys) and any file whose bytes contain a secret bantam knows (envpolicy.known_secrets).
Those are recorded by a signature only (never their bytes, nor a hash of them), so an undo can say
that they changed and cannot be restored instead of pretending, and the store under ~/.bantam
never keeps a second copy of a key.

An entry is a list [type, mode, content, size, mtime_ns, ctime_ns, inode]: type "f" file
(content: its SHA-256), "l" symlink (its target), "d" folder, "b" a file too big to keep, "i"
ignored or not ours (content: a signature; `secret:...` for a file that holds secrets). Two
entries are the same state when their first three fields are equal; the rest is the stat cache.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import stat
import subprocess
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..envpolicy import known_secrets
from ..errors import BantamError
from ..fsutil import atomic_write, bantam_home, private_dir, write_all
from ..sandbox import PROTECTED_NAMES

MAX_FILE_BYTES = 10 << 20  # a file larger than this is not copied: its change is reported, not undone
                           # (one a turn created is removed all the same: that needs no copy)
MAX_ENTRIES = 200_000      # a folder with more entries (a home directory) is not recorded at all
RACY_NS = 2_000_000_000    # a file changed this close to a scan is hashed again (mtime granularity)
SKIP_NAMES = frozenset({"node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache",
                        ".pytest_cache", ".ruff_cache"})  # regenerable caches of a plain folder
# Files that conventionally hold credentials: their bytes never go into the store.
SECRET_NAMES = frozenset({".env", ".netrc", ".npmrc", ".pypirc", ".git-credentials", "id_rsa", "id_dsa",
                          "id_ecdsa", "id_ed25519"})
SECRET = "secret:"  # the signature of a file whose content is not kept because it holds secrets
SPECIAL = "special:"  # the signature of a socket, fifo or device
Entry = list[Any]
Manifest = dict[str, Entry]


class TooLarge(BantamError):
    """The folder holds more than MAX_ENTRIES entries: it is not recorded."""


def same(a: Entry | None, b: Entry | None) -> bool:
    """Whether two entries (None: absent) are the same state of a path."""
    return (a is None and b is None) or (a is not None and b is not None and a[:3] == b[:3])


def root() -> Path:
    return bantam_home() / "undo"


@dataclass
class Rules:
    """What a scan of `folder` leaves out: paths ignored by git (relative, folders without '/'),
    or, outside a repository, the names in SKIP_NAMES."""
    folder: Path
    ignored: frozenset[str] | None  # None: not a git repository
    own: str = ""  # bantam's own state (~/.bantam), when it lies below the folder: never recorded
    secrets: tuple[bytes, ...] = ()  # a file whose bytes contain one of these is not stored

    @classmethod
    def of(cls, folder: Path) -> "Rules":
        home = Path(os.path.abspath(bantam_home()))
        own = home.relative_to(folder).as_posix() if home.is_relative_to(folder) and home != folder else ""
        return cls(folder, git_ignored(folder), own, tuple(s.encode() for s in known_secrets()))

    def skips(self, path: str, name: str) -> bool:
        if name == ".git":
            return True
        return path in self.ignored if self.ignored is not None else name in SKIP_NAMES

    def secret(self, name: str) -> bool:
        """Whether a file of this name is kept out of the store by its name alone: bantam's
        protected files (a project config may hold an api_key) and the usual credential files."""
        return name in PROTECTED_NAMES or name in SECRET_NAMES or name.startswith(".env.") or name.endswith(".pem")

    def holds_secret(self, data: bytes) -> bool:
        return any(secret in data for secret in self.secrets)


def git_ignored(folder: Path) -> frozenset[str] | None:
    """The untracked paths git ignores below `folder` (ignored folders named once), or None when it
    is not in a git repository. `git ls-files` only reads: no index refresh, no lock, no hook."""
    out = git_read(folder, ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"])
    return None if out is None else frozenset(os.fsdecode(p).rstrip("/") for p in out.split(b"\0") if p)


def git_read(folder: Path, args: list[str], given: bytes = b"", ok: tuple[int, ...] = (0,)) -> bytes | None:
    """The output of a git command that only reads, or None when it fails (not a repository)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        r = subprocess.run(["git", "-c", "core.fsmonitor=false", *args], cwd=folder, env=env, input=given,
                           capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode in ok else None


class Store:
    """The content store and its records. Every method that writes takes the lock it needs."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or root()
        self.made: set[str] = set()  # object folders known to exist

    # --- locking ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, exclusive: bool) -> Iterator[None]:
        private_dir(self.path)
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    # --- blobs --------------------------------------------------------------------------------
    def blob_path(self, sha: str) -> Path:
        return self.path / "objects" / sha[:2] / sha[2:]

    def put(self, data: bytes) -> str:
        """Store `data` (once: a content already there costs nothing) and return its SHA-256."""
        sha = hashlib.sha256(data).hexdigest()
        folder = f"{self.path}/objects/{sha[:2]}"
        path = f"{folder}/{sha[2:]}"
        if os.path.exists(path):
            return sha
        if folder not in self.made:
            private_dir(folder)
            self.made.add(folder)
        tmp = f"{folder}/.{sha[2:10]}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:  # not fsynced: get() checks the hash, so a blob torn by a power cut is refused, not used
            write_all(fd, zlib.compress(data, 1))
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return sha

    def get(self, sha: str) -> bytes | None:
        """The stored bytes, or None when they are missing or damaged (checked against the name)."""
        try:
            data = zlib.decompress(self.blob_path(sha).read_bytes())
        except (OSError, zlib.error):
            return None
        return data if hashlib.sha256(data).hexdigest() == sha else None

    # --- JSON documents -----------------------------------------------------------------------
    def write_json(self, path: Path, doc: dict) -> None:
        private_dir(path.parent)
        atomic_write(path, json.dumps(doc, separators=(",", ":")).encode(), mode=0o600)
        sync_dir(path.parent)

    @staticmethod
    def read_json(path: Path) -> dict | None:
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def cache_path(self, folder: Path) -> Path:
        return self.path / "folders" / f"{hashlib.md5(os.fsencode(folder)).hexdigest()}.json"

    def load_cache(self, folder: Path) -> Manifest:
        doc = self.read_json(self.cache_path(folder))
        return doc.get("entries", {}) if doc and doc.get("folder") == str(folder) else {}

    # --- scanning -----------------------------------------------------------------------------
    def scan(self, folder: Path, cache: Manifest | None = None, rules: Rules | None = None) -> Manifest:
        """The state of every path below `folder`; file contents are stored as they are read. A
        file whose size, times and inode match `cache` (the last scan) is not read again."""
        with self.locked(exclusive=False):  # a prune cannot drop a blob this scan relies on
            cache = self.load_cache(folder) if cache is None else cache
            found = Scanner(self, rules or Rules.of(folder), cache).run()
            path = self.cache_path(folder)
            if found != cache or not path.exists():
                self.write_json(path, {"folder": str(folder), "entries": found})
            else:  # nothing changed: the scan on disk stands, marked as in use now (turns.collect)
                os.utime(path)
        return found

    def entry(self, folder: Path, path: str, keep: bool = False) -> Entry | None:
        """The state of one path now (None: absent), described as a scan describes it; `keep`:
        a file's content is stored too."""
        full = folder / path
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return None
        rules = Rules(folder, None, secrets=tuple(s.encode() for s in known_secrets()))
        return describe(self, str(full), st, rules, keep=keep)


def describe(store: Store, full: str, st: os.stat_result, rules: Rules, cached: Entry | None = None,
             start: int = 0, keep: bool = True) -> Entry:
    """One path's entry from its lstat. With `keep` False the content is hashed without storing."""
    mode, stamp = stat.S_IMODE(st.st_mode), [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    if stat.S_ISDIR(st.st_mode):
        return ["d", mode, "", *stamp]
    if stat.S_ISLNK(st.st_mode):
        return ["l", 0, os.readlink(full), *stamp]
    if not stat.S_ISREG(st.st_mode):
        return ["i", mode, f"{SPECIAL}{st.st_mode:o}", *stamp]
    if rules.secret(os.path.basename(full)):
        return ["i", mode, f"{SECRET}{st.st_size}:{st.st_mtime_ns}", *stamp]
    if st.st_size > MAX_FILE_BYTES:
        return ["b", mode, f"{st.st_size}:{st.st_mtime_ns}", *stamp]
    if cached and cached[0] in "fi" and cached[3:] == stamp and st.st_mtime_ns < start - RACY_NS:
        return [cached[0], mode, cached[2], *stamp]  # unchanged: as it was (a secret's still unstored)
    with open(full, "rb") as f:
        data = f.read()
    if rules.holds_secret(data):
        return ["i", mode, f"{SECRET}{st.st_size}:{st.st_mtime_ns}", *stamp]
    sha = store.put(data) if keep else hashlib.sha256(data).hexdigest()
    return ["f", mode, sha, *stamp]


class Scanner:
    """One walk of a folder, without following links."""

    def __init__(self, store: Store, rules: Rules, cache: Manifest) -> None:
        self.store, self.rules, self.cache = store, rules, cache
        self.start = time.time_ns()
        self.found: Manifest = {}

    def run(self, top: str = "") -> Manifest:
        """Walk the folder, or only what lies below `top` in it."""
        todo = [top]
        while todo:
            rel = todo.pop()
            try:
                entries = self.listing(rel)
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue  # removed meanwhile, or unreadable: its entry says what it was
            for e in entries:
                path = f"{rel}/{e.name}" if rel else e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except (FileNotFoundError, PermissionError):
                    continue  # gone meanwhile or unreadable: not recorded
                if self.add(path, e.name, e.path, st):
                    todo.append(path)
            if len(self.found) > MAX_ENTRIES:
                raise TooLarge(f"{self.rules.folder} holds more than {MAX_ENTRIES} entries")
        return self.found

    def listing(self, rel: str) -> list[os.DirEntry]:
        return list(os.scandir(self.rules.folder / rel if rel else self.rules.folder))

    def add(self, path: str, name: str, full: str, st: os.stat_result) -> bool:
        """Record one entry; True when it is a folder to walk into."""
        if path == self.rules.own:
            return False
        try:
            if self.rules.skips(path, name):
                self.found[path] = ["i", stat.S_IMODE(st.st_mode), f"{st.st_size}:{st.st_mtime_ns}", 0, 0, 0, 0]
                return False
            self.found[path] = describe(self.store, full, st, self.rules, self.cache.get(path), self.start)
        except (FileNotFoundError, PermissionError):
            return False  # gone meanwhile or unreadable: not recorded
        return self.found[path][0] == "d"


def sync_dir(path: Path) -> None:
    """Make a rename or removal in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
