"""The run's tools, confined to one workspace directory.

    read_file  {"path": P}        a regular file's text; clipped output is not a full read
    list_files {"path": D}        the files under D, with sizes
    write_file {"path": P}        only paths in [tools] write_paths; content comes from the model
                                  when the step is due (a fence, or JSON), written atomically
    shell      {"command": NAME}  a named command from [tools.commands]: a fixed argument array,
                                  no shell, in the workspace, stdin closed, output capped, timeout,
                                  whole process group killed, no credentials in its environment

This is not an OS sandbox: a check command runs generated code with the user's rights.
Each tool re-checks its path even after the gates did: a tool must be safe on its own.
A tool returns the core tool layer's `Outcome`; `as_core_tools` puts them in a core Toolbox.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Protocol

from ..clip import clip_middle
from ..errors import Refused as Refused  # re-exported: the tools raise it
from ..errors import ToolError
from ..fsutil import atomic_write, confine, open_confined
from ..sandbox import Sandbox
from ..sanitize import sanitize
from ..envpolicy import redact, tool_env
from ..tools import Outcome, ToolContext
from ..tools.shell import run_process

LIST_LIMIT = 500  # files listed by one list_files call


class WorkspaceTool(Protocol):
    """A run tool: confined to the workspace, described for a prompt rather than a schema."""

    @property
    def name(self) -> str: ...
    @property
    def summary(self) -> str: ...                     # one line for the prompt
    @property
    def arguments(self) -> Mapping[str, type]: ...    # the allowed argument names and their types
    @property
    def required(self) -> tuple[str, ...]: ...
    @property
    def mutates(self) -> bool: ...                    # an interrupted call blocks the run (never rerun blindly)

    def run(self, args: dict[str, Any], ws: "Workspace") -> Outcome: ...


@dataclass
class Workspace:
    root: Path
    write_paths: tuple[str, ...] = ()
    commands: dict[str, list[str]] = field(default_factory=dict)
    timeout: float = 20.0
    output_limit: int = 8192
    sandbox: Sandbox = field(default_factory=Sandbox)  # around the check commands (the model wrote their code)

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

    def files_hash(self, paths: tuple[str, ...] | list[str]) -> str:
        """One hash of the current contents of `paths` (missing files count as missing)."""
        digest = hashlib.sha256()
        for rel in sorted(paths):
            target = self.root / rel
            data = target.read_bytes() if target.is_file() and not target.is_symlink() else b"\0missing"
            digest.update(f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode())
        return digest.hexdigest()[:16]


def clip(data: bytes, limit: int) -> tuple[str, bool]:
    """Head and tail of `data` within `limit` bytes, as sanitised text; True when something was cut.
    Known secrets are *** before the cut, so none is left half-shown at a seam."""
    text, clipped = clip_middle(redact(data.decode("utf-8", "replace")).encode("utf-8"), limit)
    return sanitize(text), clipped


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RunReadFile:
    name, mutates = "read_file", False
    summary = 'read_file {"path": FILE}: the text of FILE'
    arguments, required = {"path": str}, ("path",)

    def run(self, args: dict[str, Any], ws: Workspace) -> Outcome:
        ws.regular_file(args["path"])
        with os.fdopen(open_confined(ws.root.resolve(), args["path"]), "rb") as f:
            data = f.read()
        if b"\0" in data[:8192]:
            raise Refused(f"{args['path']}: not a text file")
        text, clipped = clip(data, ws.output_limit)
        return Outcome(text, clipped=clipped, facts={"sha256": sha256(data), "bytes": len(data),
                                                     "full_read": not clipped})


class RunListFiles:
    name, mutates = "list_files", False
    summary = 'list_files {"path": DIR}: the files under DIR ("." is the whole workspace)'
    arguments, required = {"path": str}, ()

    def run(self, args: dict[str, Any], ws: Workspace) -> Outcome:
        base = ws.locate(args.get("path", "."), existing=True)
        root = ws.root.resolve()
        if base.is_file():  # like `ls FILE`: the file itself
            return Outcome(f"{base.relative_to(root).as_posix()} ({base.stat().st_size} bytes)",
                           facts={"files": 1})
        lines = []
        for folder, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                full = Path(folder, name)
                rel = full.relative_to(root).as_posix()
                lines.append(f"{rel} -> (symlink)" if full.is_symlink() else f"{rel} ({full.stat().st_size} bytes)")
        text, clipped = clip("\n".join(lines[:LIST_LIMIT]).encode() or b"(no files)", ws.output_limit)
        return Outcome(text, clipped=clipped or len(lines) > LIST_LIMIT, facts={"files": len(lines)})


class RunWriteFile:
    name, mutates = "write_file", True
    summary = 'write_file {"path": FILE}: write FILE; you give its content when the step is due'
    arguments, required = {"path": str, "content": str}, ("path",)

    def run(self, args: dict[str, Any], ws: Workspace) -> Outcome:
        path = str(PurePosixPath(args["path"]))
        if path not in ws.write_paths:
            raise Refused(f"{path}: not in write_paths ({', '.join(ws.write_paths) or 'none'})")
        real = ws.locate(path, existing=False)
        if through_link(ws.root, path):
            raise Refused(f"{path}: is or passes through a symbolic link; writes through links are refused")
        if real.relative_to(ws.root.resolve()).as_posix() not in ws.write_paths:
            raise Refused(f"{path}: resolves to a file not in write_paths")
        if real.exists() and not real.is_file():
            raise Refused(f"{path}: exists and is not a regular file")
        data = args.get("content", "").encode("utf-8")
        real.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(real, data)
        return Outcome(f"wrote {len(data)} bytes to {path}", facts={"sha256": sha256(data), "bytes": len(data)})


def through_link(root: Path, rel: str) -> bool:
    """True when `rel`, or a folder on the way to it, is a symbolic link inside `root`."""
    current = root
    for part in PurePosixPath(rel).parts:
        current = current / part
        if current.is_symlink():
            return True
    return False


class RunShell:
    name, mutates = "shell", True
    summary = 'shell {"command": NAME}: run the named check command NAME'
    arguments, required = {"command": str}, ("command",)

    def run(self, args: dict[str, Any], ws: Workspace) -> Outcome:
        argv = ws.commands.get(args["command"])
        if argv is None:
            raise Refused(f"{args['command']!r} is not a named command "
                          f"(named: {', '.join(ws.commands) or 'none'})")
        output, code = run_argv(argv, ws.root, ws.timeout, ws.sandbox)
        text, clipped = clip(output, ws.output_limit)
        return Outcome(text, code != 0, clipped=clipped, exit_code=code, facts={"report": test_report(output)})


def clean_env() -> dict[str, str]:
    """Every model-started command's environment (bantam.envpolicy), and no stray .pyc files."""
    return {**tool_env(), "PYTHONDONTWRITEBYTECODE": "1"}


def run_argv(argv: list[str], cwd: Path, timeout: float, sandbox: Sandbox | None = None) -> tuple[bytes, int]:
    """A fixed argument array, no shell, credentials kept out: (output, exit code). The process
    machinery (timeout, group kill, Ctrl+C) is shell_exec's; output past 4 MiB is clipped there."""
    try:
        result = run_process(argv, timeout, 4 << 20, cwd=cwd, env=clean_env(),
                             sandbox=replace(sandbox) if sandbox else None)
    except ToolError as e:  # the sandbox cannot work here: the check is not run, and says why
        return str(e).encode(), 126
    except OSError as e:
        return f"cannot start {argv[0]}: {e.strerror or e}".encode(), 127
    return result.output.encode("utf-8"), result.exit_code


def test_report(output: bytes) -> dict | None:
    """The structured report of bantam.runs.testing, when the command printed one."""
    from .testing import find_report
    return find_report(output.decode("utf-8", "replace"))


TOOLS: dict[str, WorkspaceTool] = {t.name: t for t in (RunReadFile(), RunListFiles(), RunWriteFile(), RunShell())}


def invoke(tool: WorkspaceTool, args: dict[str, Any], ws: Workspace) -> Outcome:
    """Run one tool; a refusal or an OS error is an error outcome the model reads."""
    try:
        return tool.run(args, ws)
    except Refused as e:
        return Outcome(f"refused: {e}", True, e)
    except OSError as e:
        return Outcome(f"error: {e.strerror or e}", True, e)


JSON_TYPES = {str: "string", int: "integer", bool: "boolean", list: "array", dict: "object"}


class CoreTool:
    """A run tool in the core tool layer's shape, bound to its workspace."""

    def __init__(self, tool: WorkspaceTool, ws: Workspace):
        self.tool, self.ws = tool, ws
        self.name, self.description = tool.name, tool.summary
        self.parameters = {"type": "object", "required": list(tool.required),
                           "properties": {k: {"type": JSON_TYPES[t]} for k, t in tool.arguments.items()}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Outcome:
        return invoke(self.tool, args, self.ws)


def as_core_tools(ws: Workspace) -> dict[str, CoreTool]:
    return {name: CoreTool(tool, ws) for name, tool in TOOLS.items()}
