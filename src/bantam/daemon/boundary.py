"""The daemon's own files, and the one boundary around everything the daemon runs for the model.

The model writes most of its agent directory (memory, SOUL.md, triggers: the subconscious nudges
through them), but not what decides what runs and with which rights: `config.json` (settings,
provider, opt add-ons, the key), `tools/` and `providers/` (Python the daemon imports into its own,
unsandboxed process at start) and the home's `opt/` (copied into a new agent's tools/). These
OWN files of every agent directory in the home (a primary and its subconscious share one home, so
each can reach the other's) are kept read-only to the model two ways:

- in the sandbox: bubblewrap binds them read-only (Sandbox.readonly) and binds each agent
  directory onto itself, because a mount point cannot be renamed: otherwise `mv agent x;
  mkdir agent` would put a directory of the model's making, tools/ and config.json included,
  where the daemon loads from at its next start;
- in the daemon's own file tools (WRITE_FILE, EDIT_FILE, STASH_MESSAGES), which refuse them by
  name and through links, whatever the sandbox mode.

Every command the daemon runs from its directory goes through `sandbox()`: BASH, and `cmd`
triggers, which the model can write and which are therefore the model's commands (tool
environment, same writable roots, same network rule). Tool and provider plugins stay Python
imported in-process (their API hands them the agent), and are therefore loaded only from the
folders above, which only the operator can write.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ToolError
from ..sandbox import Sandbox
from .layout import AgentDir, agent_dirs, secret_files

if TYPE_CHECKING:
    from .agent import Agent

OWN_NAMES = ("config.json", "tools", "providers")  # in every agent directory
HOME_OWN = ("opt",)                                 # in the agents' home


def own_files(agent: AgentDir, primary_dir: str = "") -> list[Path]:
    """What the daemon reads as its settings or runs as its code: the operator's, not the model's."""
    return [d / name for d in agent_dirs(agent, primary_dir) for name in OWN_NAMES] + \
        [agent.home / name for name in HOME_OWN]


def sandbox(agent: "Agent", box: Sandbox | None = None) -> Sandbox:
    """`box` (default: the configuration's sandbox around the agent's home) with the daemon's own
    files read-only in it and the agent directories pinned (see the module docstring). Only
    directories already inside a writable root are pinned: pinning never widens the boundary."""
    box = box if box is not None else Sandbox.for_config(agent.cfg, agent.dir.home)
    if not box.on:
        return box
    dirs = agent_dirs(agent.dir, agent.settings.primary_dir)
    pins = tuple(d for d in dirs if d not in box.roots and any(_within(d, r) for r in box.roots))
    box.roots = (*box.roots, *pins)  # after the roots they lie in: the later mount wins
    box.readonly = (*box.readonly, *own_files(agent.dir, agent.settings.primary_dir))
    box.concealed = (*box.concealed, *config_files(agent))
    return box


def config_files(agent: "Agent") -> list[Path]:
    """Every agent's config.json: it may hold the API key and the telegram token, so the model
    reads none of them (commands see an empty file; READ_FILE, and the daemon's own reads of the
    files the model writes, refuse them through fsutil.read_inside)."""
    return secret_files(agent.dir, agent.settings.primary_dir)



def refuse_own(agent: "Agent", path: Path, shown: str) -> None:
    """ToolError when `path` is, or lies in, one of the daemon's own files: by its name and by
    where its links lead (a link made with BASH must not be a way around)."""
    given = {Path(os.path.abspath(path)), Path(os.path.realpath(path))}
    for own in own_files(agent.dir, agent.settings.primary_dir):
        for protected in {Path(os.path.abspath(own)), Path(os.path.realpath(own))}:
            if any(_within(p, protected) for p in given):
                raise ToolError(f"not written: {shown} is the daemon's own {own.name} "
                                f"({agent.dir.rel(own)}), read-only to you: your operator changes it")


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
