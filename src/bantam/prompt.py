"""The system prompt: the built-in one (or `$AGENT_DIR/system.md`), the skills in
`$AGENT_DIR/skills/*.md` in name order, the project's AGENTS.md, and the extra-tools line."""
from __future__ import annotations

import os
from pathlib import Path

from .config import Config
from .fsutil import bantam_home
from .sandbox import Sandbox

AGENTS_FILE = "AGENTS.md"
AGENTS_LIMIT = 32_000  # characters of AGENTS.md included; a larger file is clipped

SYSTEM_PROMPT = """\
You are Bantam, a small and capable AI agent working in the user's project directory through tools.
{tools}
Work step by step: inspect before you change, check your work by running it, and stop when the task
is done. Answer plainly and briefly. Respect the instructions in AGENTS.md in the project, when there
is one: they come from the people who own it."""
# what the built-in prompt says of a tool, when it is offered
TOOL_LINES = {
    "shell_exec": "- shell_exec runs a shell command (bash, stdin closed) and returns its merged output and "
                  "exit code.\n  Use it to look around, read files, run programs and tests.",
    "write_file": "- write_file writes a whole file, or splices bytes into one at a byte offset.",
}
SUB_AGENT_LINE = ("- A sub-agent tool, when present (a sub-agent has none), hands a self-contained task to a "
                  "child agent\n  with a fresh context.")
SUB_AGENT_TOOLS = ("spawn_agent", "run_subagent")


def builtin_prompt(tools: tuple[str, ...]) -> str:
    """The built-in prompt, describing only the tools that are offered."""
    lines = [TOOL_LINES[name] for name in TOOL_LINES if name in tools]
    if any(name in tools for name in SUB_AGENT_TOOLS):
        lines.append(SUB_AGENT_LINE)
    return SYSTEM_PROMPT.format(tools="\n".join(lines) or "- (no tools: answer from what you know)")


def agent_dir() -> Path:
    """`$AGENT_DIR` (seed 004), else `~/.bantam/agent`."""
    return Path(os.environ.get("AGENT_DIR") or bantam_home() / "agent")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def agents_md(directory: str | os.PathLike = ".") -> str:
    """The project's AGENTS.md (clipped), or "" when there is none."""
    return _read(Path(directory, AGENTS_FILE))[:AGENTS_LIMIT]


def system_prompt(cfg: Config, directory: str | os.PathLike = ".", can_ask: bool = False) -> str:
    """The prompt for a conversation; `can_ask`: a person is there to approve (the terminal, the
    browser), so the tools offer a way to ask and the prompt may describe it."""
    home = agent_dir()
    parts = [_read(home / "system.md") or builtin_prompt(cfg.tools)]
    skills = home / "skills"
    for path in sorted(skills.glob("*.md")) if skills.is_dir() else []:
        text = _read(path)
        if text:
            parts.append(f"Skill {path.stem}:\n{text}")
    rules = agents_md(directory)
    if rules:
        parts.append(f"Contents of {AGENTS_FILE}:\n{rules}")
    boundary = Sandbox.for_config(cfg, directory).for_prompt(cfg.approval, can_ask)
    if boundary:
        parts.append(boundary)
    tools_dir = cfg.bantam_tools_dir
    if tools_dir:
        parts.append(f"Extra shell tools can be found at {tools_dir}")
    return "\n\n".join(parts)
