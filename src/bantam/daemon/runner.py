"""Start one agent directory in this process: create what is missing, validate, lock, serve."""
from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ..config import PROVIDERS, Config
from ..errors import ConfigError
from . import layout, settings as settings_mod
from .layout import AgentDir
from .settings import Settings

if TYPE_CHECKING:
    from .agent import Agent


@dataclass
class Prepared:
    agent: AgentDir
    settings: Settings
    cfg: Config
    notes: list[str]   # what first start created or copied, for LIFE.md


def prepare(path: Path, cli: Mapping[str, str], primary: str = "agent", quiet: bool = False) -> Prepared:
    """Everything that can be wrong is found here, before any thread starts. `quiet`: a child of
    the supervisor, which has already said what there is to say about the directory."""
    agent = AgentDir(path.resolve())
    if agent.root.exists() and not agent.root.is_dir():
        raise ConfigError(f"{path} is not a directory")
    made = layout.create(agent, primary)
    if "config.json" in made and not quiet:
        print(f"bantam: new agent in {path}: make it yours by editing {path}/SOUL.md and "
              f"{path}/config.json", file=sys.stderr)
    where = str(agent / "config.json")
    settings, cfg = settings_mod.load(agent / "config.json", cli)
    copied = layout.install_opt(agent, (*settings.opt, *auto_opt(agent, settings)), where)
    if settings.provider and settings.provider not in PROVIDERS and \
            not (agent / "providers" / f"{settings.provider}.py").is_file():
        raise ConfigError(f"{where}: provider: {settings.provider!r} is neither built in "
                          f"({', '.join(PROVIDERS)}) nor a providers/{settings.provider}.py")
    if not quiet:
        _warn_if_readable(agent, settings)
    notes = [f"created {', '.join(made)} from templates"] if made else []
    notes += [f"installed opt/{entry}.py" for entry in copied]
    return Prepared(agent, settings, cfg, notes)


def _warn_if_readable(agent: AgentDir, s: Settings) -> None:
    """Configurations holding credentials are kept private (mode 600): warn when this one is not."""
    path = agent / "config.json"
    if (s.api_key or s.telegram_token) and path.stat().st_mode & 0o077:
        print(f"bantam: warning: {path} holds credentials and others can read it "
              f"(chmod 600 {path})", file=sys.stderr)


def auto_opt(agent: AgentDir, s: Settings) -> tuple[str, ...]:
    """The automatic add-ons: a provider file for a named provider, OCR for text-only models."""
    entries = []
    if s.provider and s.provider not in ("openai", "local"):
        if s.provider == "anthropic" or layout.find_opt(agent, f"providers/{s.provider}"):
            entries.append(f"providers/{s.provider}")
    if not s.multimodal_support:
        entries.append("tools/ocr_image")
    return tuple(entries)


def run_one(path: Path, cli: Mapping[str, str], primary: str = "agent", child: bool = False) -> int:
    ready = prepare(path, cli, primary, quiet=child)
    lock = layout.ProcessLock(ready.agent)
    lock.acquire()
    try:
        for note in ready.notes:
            layout.life(ready.agent, "setup", note)
        beat = layout.ensure_heartbeat(ready.agent, ready.settings.heartbeat_s)
        if beat:
            layout.life(ready.agent, "setup", beat)
        from .agent import Agent
        agent = Agent(ready.agent, ready.settings, ready.cfg)
        signal.signal(signal.SIGTERM, lambda signum, frame: _interrupt(agent))
        agent.serve()
    finally:
        lock.release()
    return 0


def _interrupt(agent: "Agent") -> None:
    """SIGTERM stops the daemon as Ctrl+C does: the turn in flight is abandoned (its inbound
    message stays unanswered in messages.jsonl and is answered after the next start). The agent
    is told to stop first: Python drops an exception raised where it cannot propagate (a signal
    landing in an import lock's callback), and then the loop still ends at once instead of the
    daemon waiting to be killed. Once stopping, further SIGTERMs must not cut shutdown short."""
    if agent.stop.is_set():
        return
    agent.stop.set()
    agent.wake.set()
    raise KeyboardInterrupt
