"""The run's tools: an allow-list over the core tools (bantam.tools), confined to one workspace.

    read_file  {"path": P}        core read_file: a regular file's text; clipped is not a full read
    list_files {"path": D}        core list_files: the files under D, with sizes
    write_file {"path": P}        core write_file: only paths in [tools] write_paths; the content
                                  comes from the model when the step is due (a fence, or JSON)
    shell      {"command": NAME}  core shell_exec: a named command from [tools.commands], a fixed
                                  argument array, no shell, in the workspace, stdin closed, output
                                  capped, timeout, process group killed, no credentials

Each runs in a ToolContext whose front end's part holds the run's workspace (`ToolFront.workspace`,
bantam.tools.workspace): the core tool confines its paths with fsutil's one confinement and applies
the workspace's policy itself, even after the gates did: a tool must be safe on its own. This is
not an OS sandbox: a check command runs generated code with the user's rights. `in_workspace` is
the one place they run: the loop's calls and a read repeated on resume alike.
"""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..errors import Refused as Refused  # re-exported: the tools raise it
from ..tools import Offered, ToolContext, Toolbox, ToolFront
from ..tools.shell import clean_env as clean_env, run_argv as run_argv  # re-exported for the run's callers
from ..tools.workspace import Workspace as Workspace


def _schema(required: tuple[str, ...], *names: str) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": {n: {"type": "string"} for n in names}}


# Each tool's description is its line in the run's prompt; `mutates`: an interrupted call blocks
# the run rather than being run again blindly.
TOOLS: dict[str, Offered] = {t.name: t for t in (
    Offered("read_file", "read_file", 'read_file {"path": FILE}: the text of FILE', _schema(("path",), "path")),
    Offered("list_files", "list_files", 'list_files {"path": DIR}: the files under DIR ("." is the whole '
            'workspace)', _schema((), "path")),
    Offered("write_file", "write_file", 'write_file {"path": FILE}: write FILE; you give its content when the '
            'step is due', _schema(("path",), "path", "content"), mutates=True),
    Offered("shell", "shell_exec", 'shell {"command": NAME}: run the named check command NAME',
            _schema(("command",), "command"), mutates=True),
)}


def in_workspace(ws: Workspace, **more: Any) -> Toolbox:
    """The run's tools (and `more`), confined to its workspace: the context's front end part holds
    it, and the workspace carries the run's limits, so the core settings are the defaults."""
    return Toolbox({**TOOLS, **more}, ToolContext(Config(), front=ToolFront(workspace=ws)))
