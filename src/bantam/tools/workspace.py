"""A workspace: the one directory a confined tool call may touch, and the policy that goes with it
(the files that may be written, the commands that may run, their time and output limits).

The core file and shell tools take one from `ToolContext.front.workspace`: paths are then relative
to its root and kept inside it by fsutil's `confine` / `open_confined` (the one confinement), writes
go only to `write_paths` and never through a link, and a command is one of `commands`, run as its
fixed argument array without a shell. Controlled runs offer the core tools this way.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from ..clip import clip_middle
from ..envpolicy import redact
from ..errors import Refused
from ..fsutil import EDIT_LIMIT, confine, read_inside
from ..sandbox import Sandbox
from ..sanitize import sanitize


@dataclass
class Workspace:
    root: Path
    write_paths: tuple[str, ...] = ()
    commands: dict[str, list[str]] = field(default_factory=dict)  # name -> fixed argv
    timeout: float = 20.0        # seconds a command may run (the run's [tools] shell_timeout)
    output_limit: int = 8192     # of one result (the run's [tools] tool_output_limit)
    sandbox: Sandbox = field(default_factory=Sandbox)  # around the commands (the model wrote their code)
    report: Callable[[str], Any] | None = None  # a command's whole output -> its test report (runs.testing)

    def command_facts(self, output: bytes) -> dict[str, Any]:
        return {"report": self.report(output.decode("utf-8", "replace")) if self.report else None}

    def locate(self, path: Any, *, existing: bool) -> Path:
        """The real path of a workspace-relative `path`; Refused when it could leave the workspace."""
        real = confine(self.root.resolve(), path)
        if existing and not real.exists():
            raise Refused(f"{path}: no such file in the workspace")
        return real

    def regular_file(self, path: Any) -> Path:
        real = self.locate(path, existing=True)
        if not real.is_file():
            raise Refused(f"{path}: not a regular file")
        return real

    def writable(self, path: str) -> Path:
        """The real path a write of `path` goes to; Refused unless it is one of write_paths, reached
        through no symbolic link, and not something other than a regular file."""
        path = str(PurePosixPath(path))
        if path not in self.write_paths:
            raise Refused(f"{path}: not in write_paths ({', '.join(self.write_paths) or 'none'})")
        real = self.locate(path, existing=False)
        if through_link(self.root, path):
            raise Refused(f"{path}: is or passes through a symbolic link; writes through links are refused")
        if real.relative_to(self.root.resolve()).as_posix() not in self.write_paths:
            raise Refused(f"{path}: resolves to a file not in write_paths")
        if real.exists() and not real.is_file():
            raise Refused(f"{path}: exists and is not a regular file")
        return real

    def relative(self, real: Path) -> str:
        return real.relative_to(self.root.resolve()).as_posix()

    def files_hash(self, paths: tuple[str, ...] | list[str]) -> str:
        """One hash of the current contents of `paths` (missing files count as missing)."""
        digest = hashlib.sha256()
        for rel in sorted(paths):
            data = self.text_of(rel)
            seen = hashlib.sha256(b"\0missing" if data is None else data).hexdigest()
            digest.update(f"{rel}\0{seen}\n".encode())
        return digest.hexdigest()[:16]

    def text_of(self, rel: str) -> bytes | None:
        """A workspace file's bytes as the model wrote them (at most EDIT_LIMIT), through the one
        read path: None when it is missing, or is not a regular file inside the workspace."""
        try:
            return read_inside(self.root, rel, EDIT_LIMIT)
        except (OSError, Refused):
            return None

    def clip(self, data: bytes) -> tuple[str, bool]:
        """Head and tail of `data` within output_limit bytes, as sanitised text; True when
        something was cut. Known secrets are *** before the cut, so none is left half-shown."""
        text, clipped = clip_middle(redact(data.decode("utf-8", "replace")).encode("utf-8"), self.output_limit)
        return sanitize(text), clipped


def through_link(root: Path, rel: str) -> bool:
    """True when `rel`, or a folder on the way to it, is a symbolic link inside `root`."""
    current = root
    for part in PurePosixPath(rel).parts:
        current = current / part
        if current.is_symlink():
            return True
    return False


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
