"""The workspace as the results panel sees it: a file list, a viewer, change polling, confinement.

Every path the page sends is relative to the workspace root. `FileView.open` is the only way in:
it refuses absolute paths, `..`, hidden names (`.bantam.cfg`, `.git`) and anything a symlink
leads out of the root, and it checks the opened file descriptor again, so a path swapped for a
symlink between the check and the open is refused too.
"""
from __future__ import annotations

import mimetypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from ..config import CONFIG_FILES
from ..envpolicy import redact
from ..errors import Refused
from ..fsutil import confine, open_confined, read_up_to
from ..runs.chat import RUNS_DIR

MAX_FILES = 2000              # entries listed; a huge tree is cut, not walked forever
MAX_TEXT = 512 * 1024         # bytes of a text file highlighted in the viewer
MAX_RAW = 64 * 1024 * 1024    # bytes served to the sandboxed frame or an <img>
POLL_SECONDS = 0.5            # how often the workspace is scanned for changes
SKIP_DIRS = {"node_modules", "__pycache__", "venv", "site-packages"}  # and every hidden folder
IMAGE_TYPES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg", ".bmp", ".ico", ".avif"}
HTML_TYPES = {".html", ".htm", ".xhtml"}
RUN_MARKS = ("goal.md", "workspace")  # what every controlled run's directory holds (runs/store.py)


@dataclass(frozen=True)
class Entry:
    path: str      # relative, with forward slashes
    size: int
    mtime: float
    version: str   # changes whenever the file does: the page reloads on a new one
    run: str = ""  # part of a controlled run's record (its state, logs, artifacts): that run's folder

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "mtime": self.mtime, "version": self.version, "run": self.run}


class FileView:
    def __init__(self, root: str | os.PathLike, secrets: tuple[str, ...] = ()):
        self.root = Path(root).resolve()
        self.secrets = tuple(s for s in secrets if s and len(s) >= 4)  # blanked in the text viewer

    # --- confinement --------------------------------------------------------------------------

    def check(self, rel: str) -> Path:
        """The real path of `rel` inside the workspace, or Refused."""
        if not rel or "\x00" in rel:
            raise Refused("no such file", 404)
        parts = PurePosixPath(rel).parts
        if rel.startswith(("/", "\\")) or any(p.startswith(".") or "\\" in p for p in parts):
            raise Refused(f"{rel}: outside the workspace, or hidden", 403)
        path = confine(self.root, rel)
        if any(p.startswith(".") for p in path.relative_to(self.root).parts):  # `g` -> .git
            raise Refused(f"{rel}: leads to a hidden file", 403)
        if not path.is_file():
            raise Refused(f"{rel}: no such file", 404)
        return path

    def read(self, rel: str, limit: int) -> tuple[bytes, os.stat_result]:
        """Up to `limit` bytes of the file, opened without following a last-moment symlink."""
        self.check(rel)
        with os.fdopen(open_confined(self.root, rel), "rb") as f:
            return read_up_to(f, limit + 1), os.fstat(f.fileno())

    # --- what the page shows ------------------------------------------------------------------

    def listing(self) -> list[Entry]:
        """Every visible file, sorted by path; hidden names and bulky tool folders are skipped."""
        found: list[Entry] = []
        self._walk(self.root, "", found)
        return sorted(found, key=lambda e: e.path)

    def _walk(self, folder: Path, prefix: str, found: list[Entry], run: str = "") -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda d: d.name)
        except OSError:
            return
        for d in entries:
            if len(found) >= MAX_FILES or d.name.startswith("."):
                continue
            rel = prefix + d.name
            try:
                if d.is_dir(follow_symlinks=False):  # a symlinked folder could loop or lead out
                    if d.name not in SKIP_DIRS:
                        self._walk(Path(d.path), rel + "/", found, record_of(rel, Path(d.path), run))
                elif d.is_file() and Path(os.path.realpath(d.path)).is_relative_to(self.root):
                    st = d.stat()
                    found.append(Entry(rel, st.st_size, st.st_mtime, f"{st.st_mtime_ns:x}-{st.st_size:x}", run))
            except OSError:  # deleted while we looked
                continue

    def view(self, rel: str) -> dict:
        """What the viewer needs: the kind of file and, for text, highlighted HTML."""
        data, st = self.read(rel, MAX_TEXT)
        suffix = PurePosixPath(rel).suffix.lower()
        info = {"path": rel, "size": st.st_size, "version": f"{st.st_mtime_ns:x}-{st.st_size:x}",
                "raw": self.servable(rel)}
        if suffix in IMAGE_TYPES:
            return {**info, "kind": "image"}
        if b"\x00" in data[:8192]:
            return {**info, "kind": "binary"}
        text = self.blank(data[:MAX_TEXT].decode("utf-8", "replace"))
        clipped = len(data) > MAX_TEXT
        return {**info, "kind": "html" if suffix in HTML_TYPES else "text",
                "html": highlight(rel, text), "clipped": clipped}

    def blank(self, text: str) -> str:
        """Text for the page without a secret: an api_key in model.cfg is still nobody's business,
        nor is the web password or any other secret bantam knows."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return redact(text)

    def servable(self, rel: str) -> bool:
        """Whether the raw route may hand the file to the sandboxed frame: never a config file,
        by its name or by what it resolves to (`cfg.txt` -> model.cfg)."""
        real = Path(os.path.realpath(self.root / rel)) if rel and "\x00" not in rel else Path(rel)
        return PurePosixPath(rel).name not in CONFIG_FILES and real.name not in CONFIG_FILES

    def raw(self, rel: str) -> tuple[bytes, str]:
        """The bytes and content type for the sandboxed frame or an <img>."""
        if not self.servable(rel):
            raise Refused(f"{rel}: configuration files are not served to the viewer", 403)
        data, _ = self.read(rel, MAX_RAW)
        if len(data) > MAX_RAW:
            raise Refused(f"{rel}: larger than {MAX_RAW} bytes", 403)
        kind = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "application/json"):
            kind += "; charset=utf-8"
        return data, kind


def record_of(rel: str, folder: Path, run: str) -> str:
    """The run whose record the folder `rel` is part of, given `run`, its parent's: a run's
    directory (`runs/<id>`) starts one; its workspace, where the run's own work is, ends it."""
    if run:
        return "" if rel == f"{run}/workspace" else run
    parent = PurePosixPath(rel).parent.name
    return rel if parent == RUNS_DIR and all(os.path.exists(folder / mark) for mark in RUN_MARKS) else ""


def highlight(name: str, text: str) -> str:
    """Server-side syntax highlighting (pygments comes with rich); plain escaped text if unknown."""
    from pygments import highlight as render
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import TextLexer, guess_lexer_for_filename
    from pygments.util import ClassNotFound
    try:
        lexer = guess_lexer_for_filename(name, text[:4096])
    except ClassNotFound:
        lexer = TextLexer()
    # inline styles: the page needs no stylesheet of pygments' own; the output is escaped text
    return render(text, lexer, HtmlFormatter(noclasses=True, style="friendly", nobackground=True))


class Watcher:
    """Polls the workspace and calls `changed(entries)` whenever a file appears, changes or goes.

    Polling (not inotify) keeps it simple and portable; a scan of a few thousand files every half
    second costs a few milliseconds, and it only runs while a page is connected.
    """

    def __init__(self, workspace: FileView, changed: Callable[[list[Entry]], None],
                 wanted: Callable[[], bool], interval: float = POLL_SECONDS):
        self.workspace, self.changed, self.wanted = workspace, changed, wanted
        self.interval = interval
        self.stopped = threading.Event()
        self.last: list[Entry] | None = None
        self.thread = threading.Thread(target=self._run, name="bantam-web-watch", daemon=True)

    def start(self) -> "Watcher":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            if not self.wanted():
                self.last = None  # the next page to connect asks for the list itself
                continue
            entries = self.workspace.listing()
            if entries != self.last:  # also right after a page connects: it may have missed one
                self.changed(entries)
            self.last = entries
