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
not an OS sandbox: a check command runs generated code with the user's rights. `as_core_tools`
hands the allowed tools to the loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..config import Config
from ..errors import Refused as Refused  # re-exported: the tools raise it
from ..tools import Outcome, Tool, ToolContext, ToolFront, core_tool
from ..tools.shell import clean_env as clean_env, run_argv as run_argv  # re-exported for the run's callers
from ..tools.workspace import Workspace as Workspace

_SETTINGS = Config()  # a workspace call uses none of it: the workspace carries the run's limits


@dataclass(frozen=True)
class RunTool:
    """A core tool as a controlled run offers it: its line in the prompt, the arguments a run may
    pass (the gates check them), and whether a call changes files (an interrupted one blocks the
    run rather than being run again blindly)."""
    name: str                         # the run's name for it
    core: str                         # the core tool it is (bantam.tools.REGISTRY)
    summary: str
    arguments: Mapping[str, type]
    required: tuple[str, ...]
    mutates: bool

    def run(self, args: dict[str, Any], ws: Workspace) -> Outcome:
        result = core_tool(self.core).run(args, ToolContext(_SETTINGS, front=ToolFront(workspace=ws)))
        return result if isinstance(result, Outcome) else Outcome(result)


TOOLS: dict[str, RunTool] = {t.name: t for t in (
    RunTool("read_file", "read_file", 'read_file {"path": FILE}: the text of FILE', {"path": str}, ("path",), False),
    RunTool("list_files", "list_files", 'list_files {"path": DIR}: the files under DIR ("." is the whole '
            'workspace)', {"path": str}, (), False),
    RunTool("write_file", "write_file", 'write_file {"path": FILE}: write FILE; you give its content when the '
            'step is due', {"path": str, "content": str}, ("path",), True),
    RunTool("shell", "shell_exec", 'shell {"command": NAME}: run the named check command NAME', {"command": str},
            ("command",), True),
)}


def invoke(tool: RunTool, args: dict[str, Any], ws: Workspace) -> Outcome:
    """Run one tool; a refusal or an OS error is an error outcome the model reads."""
    try:
        return tool.run(args, ws)
    except Refused as e:
        return Outcome(f"refused: {e}", True, e)
    except OSError as e:
        return Outcome(f"error: {e.strerror or e}", True, e)


JSON_TYPES = {str: "string", int: "integer", bool: "boolean", list: "array", dict: "object"}


class CoreTool(Tool):
    """A run tool in the loop's shape, bound to its workspace."""

    def __init__(self, tool: RunTool, ws: Workspace):
        self.tool, self.ws = tool, ws
        self.name, self.description = tool.name, tool.summary
        self.parameters = {"type": "object", "required": list(tool.required),
                           "properties": {k: {"type": JSON_TYPES[t]} for k, t in tool.arguments.items()}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Outcome:
        return invoke(self.tool, args, self.ws)


def as_core_tools(ws: Workspace) -> dict[str, CoreTool]:
    return {name: CoreTool(tool, ws) for name, tool in TOOLS.items()}
