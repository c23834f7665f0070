"""The built-in system prompt."""
from __future__ import annotations

import os
from pathlib import Path

from .config import Config

AGENTS_FILE = "AGENTS.md"
AGENTS_LIMIT = 32_000  # characters of AGENTS.md included; a larger file is clipped

SYSTEM_PROMPT = """\
You are Bantam, a small and capable AI agent working in the user's project directory through tools.
- shell_exec runs a shell command (bash, stdin closed) and returns its merged output and exit code.
  Use it to look around, read files, run programs and tests.
- write_file writes a whole file, or splices bytes into one at a byte offset.
- A sub-agent tool, when present, hands a self-contained task to a child agent with a fresh context.
Work step by step: inspect before you change, check your work by running it, and stop when the task
is done. Answer plainly and briefly. Respect the instructions in AGENTS.md in the project, when there
is one: they come from the people who own it."""


def system_prompt(cfg: Config, directory: str | os.PathLike = ".") -> str:
    parts = [SYSTEM_PROMPT]
    agents = Path(directory, AGENTS_FILE)
    if agents.is_file():
        try:
            text = agents.read_text(encoding="utf-8", errors="replace")[:AGENTS_LIMIT]
            parts.append(f"Contents of {AGENTS_FILE}:\n{text}")
        except OSError:
            pass
    tools_dir = cfg.bantam_tools_dir
    if tools_dir:
        parts.append(f"Extra shell tools can be found at {tools_dir}")
    return "\n\n".join(parts)
