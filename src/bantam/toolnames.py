"""The names of bantam's tools, as data: which tools exist and where each one is defined.

It sits at the bottom of the layers (docs/architecture.md) so that the configuration can check
`tools=` against it without importing the tools; `tools/__init__.py` imports each module named
here only when that tool is enabled.
"""
from __future__ import annotations

# name -> "module:Class"; imported only when the tool is enabled
REGISTRY = {
    "shell_exec": "bantam.tools.shell:ShellExec",
    "write_file": "bantam.tools.files:WriteFile",
    "read_file": "bantam.tools.files:ReadFile",
    "edit_file": "bantam.tools.files:EditFile",
    "list_files": "bantam.tools.files:ListFiles",
    "run_subagent": "bantam.tools.subagent:RunSubagent",
    "spawn_agent": "bantam.tools.spawn:SpawnAgent",
    "read_image": "bantam.tools.media:ReadImage",
    "read_pdf": "bantam.tools.media:ReadPdf",
}
DELEGATING = {"run_subagent", "spawn_agent"}  # children never get these
ALIASES = {"run_shell": "shell_exec"}  # another name models call the shell by
MCP_SEPARATOR = "__"  # an MCP server's tool is named SERVER__TOOL (mcp/tools.py)


def canonical_tool(name: str) -> str:
    """A tool's one name: the one table above serves a model's tool call and `tools=` alike."""
    return ALIASES.get(name, name)
