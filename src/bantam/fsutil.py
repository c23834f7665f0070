"""The one way bantam writes files: atomically, so a crash never leaves half a file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
