"""Project trust: the files a project supplies may shape bantam's boundary only once the user has
trusted them, as they are now.

A cloned repository is not the user: its `.bantam.cfg` or `model.cfg` could switch the sandbox
off, its `.mcp.json` could start programs, the tools folder its config names could hold scripts,
its `system.txt` could replace the system prompt.
So, as VS Code's Workspace Trust and Codex's `projects.<path>.trust_level` do, trust is kept per
project folder, and, as Claude Code's `.mcp.json` approval does, pinned to content: the store
holds the sha256 of each of the folder's files as the user trusted it; an edit, or a new file,
is untrusted again until `bantam trust` (or the terminal's one question) trusts it.

    ~/.bantam/trust.json   {"projects": {FOLDER: {FILE NAME or "tools:PATH": sha256}}}

Until then a project file cannot loosen the boundary (config.BOUNDARY_KEYS: the keys are
ignored, with one line naming file:line) nor receive the user's key (config.withheld_key), and
its `.mcp.json` servers do not start, its `system.txt` is not the system prompt. Everything
else in it (model, temperature, an endpoint without the user's key) applies: a project may choose
its model, not its rights.
This module knows files and digests only; config and MCP ask it.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from .errors import ConfigError
from .fsutil import atomic_write, bantam_home, private_dir, read_up_to

PROJECT_FILES = (".bantam.cfg", "model.cfg", ".mcp.json", "system.txt")  # what a project supplies, by name
TOOLS = "tools:"           # a record's key for a tools folder: "tools:/abs/path"
TREE_FILES = 1000          # a tools folder's digest reads at most this many files ...
TREE_BYTES = 64 << 20      # ... and this many bytes; past that it cannot be trusted (say so)
STORE_BYTES = 4 << 20      # the store is read with a cap like every other file bantam reads
LEGACY = "mcp-trust.json"  # bantam 0.2's store, {path of .mcp.json: sha256}: read, then folded in


def store_path() -> Path:
    return bantam_home() / "trust.json"


def folder_of(directory: str | os.PathLike) -> str:
    """The key a folder is trusted under: its real, absolute path."""
    return os.path.realpath(directory)


def digest(path: Path) -> str | None:
    """sha256 of a file's bytes; None when it does not exist (or is not a regular file: a FIFO
    is not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        h = hashlib.sha256()
        try:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        except OSError as e:
            raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
        return h.hexdigest()


def tree_digest(folder: Path) -> str | None:
    """One sha256 over a folder's file names, modes and contents; None when it is not a folder.
    A link is pinned by what it leads to (a file's content, a folder's place in the tree), since
    that is what runs when the model runs it. A link that leads outside the folder cannot be
    pinned (what it leads to may change while the folder does not), so such a folder cannot be
    trusted: a ConfigError, as is a folder larger than TREE_FILES files or TREE_BYTES bytes."""
    if not folder.is_dir():
        return None
    root = Path(os.path.realpath(folder))
    h, files, size = hashlib.sha256(), 0, 0
    for base, dirs, names in os.walk(root):
        dirs.sort()
        links_to_dirs = [name for name in dirs if Path(base, name).is_symlink()]  # not walked
        for name in sorted(names + links_to_dirs):
            path = Path(base, name)
            mode = path.lstat().st_mode
            what = _pinned_link(path, root, folder) if stat.S_ISLNK(mode) else path
            files += 1
            size += what.stat().st_size if what.is_file() else 0
            if files > TREE_FILES or size > TREE_BYTES:
                raise ConfigError(f"{folder}: too large to trust (more than {TREE_FILES} files or "
                                  f"{TREE_BYTES >> 20} MB)")
            h.update(f"{path.relative_to(root)}\0{mode:o}\0".encode())
            if stat.S_ISLNK(mode):  # "->" and the target's place: never the digest of a plain file
                h.update(f"-> {what.relative_to(root)}\0".encode())
            h.update((digest(what) or "").encode() + b"\n")
    return h.hexdigest()


def _pinned_link(path: Path, root: Path, folder: Path) -> Path:
    """Where the link at `path` leads, every link on the way resolved; a ConfigError when that
    is outside the folder (`root` is the folder's real path)."""
    target = Path(os.path.realpath(path))
    if target != root and root not in target.parents:
        raise ConfigError(f"{folder}: cannot be trusted: {path.relative_to(root)} is a link to {target}, "
                          "outside the folder, which can change while the folder does not; copy it "
                          "into the folder instead")
    return target


def _read_store() -> dict[str, dict[str, str]]:
    projects: dict[str, dict[str, str]] = {}
    legacy = _read_json(bantam_home() / LEGACY)
    for path, sha in legacy.items():  # 0.2 trusted .mcp.json files by path
        if isinstance(path, str) and isinstance(sha, str):
            projects.setdefault(os.path.dirname(path), {})[os.path.basename(path)] = sha
    stored = _read_json(store_path()).get("projects", {})
    for folder, files in stored.items() if isinstance(stored, dict) else ():
        if isinstance(files, dict):
            projects[folder] = {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}
    return projects


def _read_json(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            data = json.loads(read_up_to(f, STORE_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}  # a damaged store trusts nothing: the user is asked again
    return data if isinstance(data, dict) else {}


def _write_store(projects: dict[str, dict[str, str]]) -> None:
    private_dir(bantam_home())
    atomic_write(store_path(), json.dumps({"projects": projects}, indent=1, sort_keys=True).encode(), 0o600)
    try:
        os.unlink(bantam_home() / LEGACY)  # folded into trust.json
    except FileNotFoundError:
        pass


def is_trusted(path: str | os.PathLike) -> bool:
    """True when the project file at `path` is trusted as it is now."""
    path = Path(path)
    record = _read_store().get(folder_of(path.parent), {})
    now = digest(path)
    return now is not None and record.get(path.name) == now


def tools_trusted(directory: str | os.PathLike, tools_dir: str | os.PathLike) -> bool:
    """True when the tools folder a project's file names was trusted with this content."""
    folder = Path(directory, tools_dir).expanduser()
    record = _read_store().get(folder_of(directory), {})
    try:
        now = tree_digest(folder)
    except ConfigError:  # grown too large, or a link out of it added since: not what was trusted
        return False
    return now is not None and record.get(TOOLS + os.path.realpath(folder)) == now


def present(directory: str | os.PathLike, tools_dir: str = "") -> dict[str, str]:
    """The project's files in `directory` as they are now: {record key: sha256}."""
    found = {name: sha for name in PROJECT_FILES if (sha := digest(Path(directory, name)))}
    if tools_dir and (sha := tree_digest(Path(directory, tools_dir).expanduser())):
        found[TOOLS + os.path.realpath(Path(directory, tools_dir).expanduser())] = sha
    return found


def trust(directory: str | os.PathLike, tools_dir: str = "") -> dict[str, str]:
    """Trust the project's files in `directory` as they are now (replacing what was trusted
    there before); returns what was recorded. A tools folder that is not there is refused, and
    nothing is recorded: the project file naming it would stay untrusted at every run anyway."""
    folder = Path(directory, tools_dir).expanduser()
    if tools_dir and not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(f"nothing trusted: bantam_tools_dir={tools_dir} names {os.path.abspath(folder)}, which {what} "
                          f"(create it, or remove bantam_tools_dir from the project's file)")
    files = present(directory, tools_dir)
    if not files:
        raise ConfigError(f"nothing to trust in {folder_of(directory)}: no {', '.join(PROJECT_FILES)} there")
    projects = _read_store()
    projects[folder_of(directory)] = files
    _write_store(projects)
    return files


def revoke(directory: str | os.PathLike) -> bool:
    projects = _read_store()
    gone = projects.pop(folder_of(directory), None) is not None
    if gone:
        _write_store(projects)
    return gone


def trusted_projects() -> dict[str, dict[str, str]]:
    """Every trusted folder and its pinned files."""
    return _read_store()


def changed(folder: str, files: dict[str, str]) -> list[str]:
    """The pinned files of `folder` whose content is no longer what was trusted."""
    out = []
    for key, sha in files.items():
        try:
            now = tree_digest(Path(key[len(TOOLS):])) if key.startswith(TOOLS) else digest(Path(folder, key))
        except ConfigError:
            now = None
        if now != sha:
            out.append(key)
    return out
