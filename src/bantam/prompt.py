"""The system prompt: the project's `system.txt` once the user trusts it (else `$AGENT_DIR/system.md`,
else the built-in one), the skills in `$AGENT_DIR/skills/*.md` in name order, the project's
AGENTS.md, and the extra-tools line. The project is the session's folder, always passed in: never
the process's folder."""
from __future__ import annotations

import os
from pathlib import Path

from .config import Config
from .errors import Refused
from .fsutil import bantam_home, read_inside
from .sandbox import Sandbox, warn_once

AGENTS_FILE = "AGENTS.md"
PROJECT_PROMPT = "system.txt"  # the project's own system prompt (a trusted project's only)
AGENTS_LIMIT = 32_000  # characters of AGENTS.md included; a larger file is clipped

# Sent with every request: what the tool schemas already say (write_file, the sub-agent tools) is
# not repeated here, and the AGENTS.md sentence comes only with an AGENTS.md (bench/bench_tokens.py).
SYSTEM_PROMPT = """\
You are Bantam, an AI agent working in the user's project folder through tools.
{tools}Inspect before you change, check your work by running it, and stop when the task is done. Do what
is asked with your tools (write the files it names); never claim a change you did not make. Answer briefly."""
# what the built-in prompt says of a tool, when it is offered (its schema says the rest)
TOOL_LINES = {"shell_exec": "Use shell_exec to look around, read files, run programs and tests.\n"}


def builtin_prompt(tools: tuple[str, ...]) -> str:
    """The built-in prompt, describing only the tools that are offered."""
    lines = [TOOL_LINES[name] for name in TOOL_LINES if name in tools]
    return SYSTEM_PROMPT.format(tools="".join(lines) or "You have no tools: answer from what you know.\n")


def agent_dir() -> Path:
    """`$AGENT_DIR`, else `~/.bantam/agent`."""
    return Path(os.environ.get("AGENT_DIR") or bantam_home() / "agent")


PROMPT_FILE_LIMIT = 1 << 20  # bytes read of system.md or a skill (a larger one is cut there)


def _read(folder: Path, name: str, limit: int = PROMPT_FILE_LIMIT) -> str:
    """The text of `folder/name` for the prompt, through the one read path (a link out of the
    folder, a FIFO, a device or the kernel's files are refused: the prompt goes to the model and
    the provider). "" when there is none; a refusal is said once on stderr and to the model."""
    try:
        data = read_inside(folder, name, limit)
    except Refused as e:
        warn_once(str(e))
        return f"({e})"
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace").strip()


def agents_md(directory: str | os.PathLike) -> str:
    """The AGENTS.md of the project in `directory` (clipped), or "" when there is none."""
    return _read(Path(directory), AGENTS_FILE, AGENTS_LIMIT * 4)[:AGENTS_LIMIT]


def project_prompt(directory: str | os.PathLike) -> str:
    """The project's `system.txt`, which replaces the base prompt (what follows it, the project's
    rules and bantam's boundary, stays). A cloned repository's file must not silently redefine
    the agent, so it counts only while the user trusts it as it is now (`bantam trust`); until
    then it is ignored, with one warning."""
    from . import trust
    path = Path(directory, PROJECT_PROMPT)
    if not path.is_file():
        return ""
    if not trust.is_trusted(path):
        warn_once(f"{PROJECT_PROMPT} is not trusted, so it does not replace the system prompt "
                  f"(read it, then `bantam trust` applies it)")
        return ""
    return _read(Path(directory), PROJECT_PROMPT)


def system_prompt(cfg: Config, directory: str | os.PathLike, can_ask: bool = False, tmp: Path | None = None) -> str:
    """The prompt for a conversation in the project at `directory`; `can_ask`: a person is there to
    approve (the terminal, the browser), so the tools offer a way to ask and the prompt may describe it."""
    home = agent_dir()
    parts = [project_prompt(directory) or _read(home, "system.md") or builtin_prompt(cfg.tools)]
    skills = home / "skills"
    for path in sorted(skills.glob("*.md")) if skills.is_dir() else []:
        text = _read(skills, path.name)
        if text:
            parts.append(f"Skill {path.stem}:\n{text}")
    rules = agents_md(directory)
    if rules:
        parts.append(f"Contents of {AGENTS_FILE}, instructions from the people who own the project; "
                     f"respect them:\n{rules}")
    boundary = Sandbox.for_config(cfg, directory, tmp).for_prompt(cfg.approval, can_ask)
    if boundary:
        parts.append(boundary)
    tools_dir = cfg.bantam_tools_dir
    if tools_dir:
        parts.append(f"Extra shell tools can be found at {tools_dir}")
    return "\n\n".join(parts)
