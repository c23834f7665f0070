"""The agent directory: where each file is, first-start creation from templates, opt/ add-ons,
the process lock, and LIFE.md (the append-only event log whose tail rides with every request)."""
from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..config import ALIASES
from ..errors import ConfigError, Refused
from ..fsutil import atomic_write, open_inside, read_setting, read_up_to
from . import templates
from ..envpolicy import redact
from .bus import locked_append

SUBCONSCIOUS = "subconscious"   # a directory of this name is a reviewer: no heartbeat, no chat
BUILTIN_OPT = Path(__file__).resolve().parent / "opt"
DIRS = ("memory", "triggers", "trigger-queue", "mail_inbox", "mail_inbox/processed", "inbound",
        "bg", "tools", "providers", "blobs")
LIFE_LINE_MAX = 600             # characters of one LIFE.md entry
PRIMARY_MIN_LINES = 10          # primary.json fires once more lines than this are new


@dataclass(frozen=True)
class AgentDir:
    root: Path  # absolute; its parent is the agent's home and its process's working directory

    @property
    def home(self) -> Path:
        return self.root.parent

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def is_subconscious(self) -> bool:
        return self.root.name == SUBCONSCIOUS

    def __truediv__(self, part: str) -> Path:
        return self.root / part

    def rel(self, path: Path | None = None) -> str:
        """A path as the agent writes it: relative to its home."""
        return os.path.relpath(path or self.root, self.home)

    def subconscious(self) -> Path | None:
        sibling = self.home / SUBCONSCIOUS
        return sibling if not self.is_subconscious and sibling.is_dir() else None


def create(agent: AgentDir, primary: str = "agent") -> list[str]:
    """Make whatever is missing, from templates; returns what was created (nothing, usually)."""
    made = []
    if not agent.root.is_dir():
        agent.root.mkdir(parents=True, mode=0o700)
        made.append(agent.rel())
    for d in DIRS:
        (agent / d).mkdir(mode=0o700, exist_ok=True)
    fill = {"dir": agent.rel(), "primary": primary, "min_lines": PRIMARY_MIN_LINES}
    soul = templates.SUBCONSCIOUS_SOUL if agent.is_subconscious else templates.SOUL
    files = {"SOUL.md": soul.format(**fill), "MEMORY.md": templates.MEMORY.format(**fill),
             "LIFE.md": "", "messages.jsonl": ""}
    for name, text in files.items():
        if not (agent / name).exists():
            atomic_write(agent / name, text.encode("utf-8"), mode=0o600)
            made.append(name)
    if not (agent / "config.json").exists():
        atomic_write(agent / "config.json", _json(_new_config(agent, primary)), mode=0o600)
        made.append("config.json")
    if agent.is_subconscious and "SOUL.md" in made:  # a new subconscious: its pre-seeded triggers
        made += _seed_triggers(agent, fill)
    return made


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def _new_config(agent: AgentDir, primary: str) -> dict[str, Any]:
    if not agent.is_subconscious:
        return {"opt": []}  # the model and endpoint come from the user's configuration, as in every mode
    # the sibling needs its own provider settings; start from the primary's
    config: dict[str, Any] = {}
    try:
        source = json.loads(read_setting(agent.home / primary / "config.json"))
        keep = ("api_key", "model", "endpoint", "provider", "temperature", "reasoning_effort",
                "context_window", "request", "retry_delays", "timeout")
        config = {k: v for k, v in source.items() if ALIASES.get(k, k) in keep} if isinstance(source, dict) else {}
    except (OSError, ValueError, Refused):
        pass
    return {**config, "primary_dir": primary, "opt": ["tools/nudge", "tools/stash_messages"]}


def _seed_triggers(agent: AgentDir, fill: dict[str, Any]) -> list[str]:
    made = []
    for name, spec in (("primary", templates.PRIMARY_TRIGGER), ("selfwipe", templates.SELFWIPE_TRIGGER)):
        if (agent / "triggers" / f"{name}.json").exists():
            continue
        filled = {k: v.format(**fill) if isinstance(v, str) else v for k, v in spec.items()}
        atomic_write(agent / "triggers" / f"{name}.json", _json(filled), mode=0o600)
        made.append(f"triggers/{name}.json")
    return made


def install_opt(agent: AgentDir, entries: tuple[str, ...], where: str) -> list[str]:
    """Copy opt/<entry>.py to <agent>/<entry>.py unless the agent has it already: from then on
    the agent owns its copy. The home's own opt/ wins over bantam's built-in one."""
    copied = []
    for entry in entries:
        target = agent / f"{entry}.py"
        if target.exists():
            continue
        source = find_opt(agent, entry)
        if source is None:
            raise ConfigError(f"{where}: opt: no {entry}.py in {agent.home / 'opt'} or bantam's "
                              f"built-in opt/ (available: {', '.join(available_opt())})")
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(source, target)
        copied.append(entry)
    return copied


def find_opt(agent: AgentDir, entry: str) -> Path | None:
    if ".." in Path(entry).parts or entry.startswith("/"):
        return None
    for root in (agent.home / "opt", BUILTIN_OPT):
        if (root / f"{entry}.py").is_file():
            return root / f"{entry}.py"
    return None


def available_opt() -> list[str]:
    return sorted(str(p.relative_to(BUILTIN_OPT).with_suffix("")) for p in BUILTIN_OPT.glob("*/*.py")
                  if p.name != "__init__.py")


def load_module(path: Path, package: str) -> ModuleType:
    """The one loader of the agent's Python files (tools/*.py, providers/*.py): imported into the
    daemon's own process, so only from folders the model cannot write (boundary.py)."""
    spec = importlib.util.spec_from_file_location(f"{package}.{path.stem}", path)
    assert spec is not None and spec.loader is not None  # a .py file always has both
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_heartbeat(agent: AgentDir, every: float) -> str:
    """triggers/heartbeat.json as config.json says at boot, for a primary (not for
    subconscious dirs): created when missing, removed when `heartbeat_s` is 0 (a heartbeat made
    by an earlier start would otherwise go on beating). Returns what was done, or ""."""
    path = agent / "triggers" / "heartbeat.json"
    if agent.is_subconscious:
        return ""
    if every <= 0:
        if not path.exists():
            return ""
        path.unlink()
        return "removed triggers/heartbeat.json (heartbeat_s is 0)"
    if path.exists():
        return ""
    spec = {"next": time.time() + every, "repeat_s": every,
            "message": "heartbeat: anything to do? If not, reply with one word."}
    atomic_write(path, _json(spec), mode=0o600)
    return "created triggers/heartbeat.json"


class ProcessLock:
    """One daemon per agent directory: flock on <dir>/.lock, held for the process's life."""

    def __init__(self, agent: AgentDir):
        self.path = agent / ".lock"
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"{self.path.parent} is in use by another bantam daemon "
                              f"(pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def stamp(fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    """The local time now. Explicitly from time.time(): a bare strftime reads C's time(), the
    kernel's coarse clock, which for a few milliseconds after each second still shows the one
    before, so a trigger firing on the second was logged a second early."""
    return time.strftime(fmt, time.localtime(time.time()))


def agent_dirs(agent: AgentDir, primary_dir: str = "") -> list[Path]:
    """This agent directory, its subconscious or primary, and every other agent directory beside
    it: the model can reach all of them. Any folder there with a config.json counts, since that is
    the one mark the model cannot remove once protected (a .lock or triggers/ it could delete
    first); a project folder's config.json mistaken for one only narrows what the model may write."""
    found = {agent.root}
    sibling = agent.subconscious()
    if sibling is not None:
        found.add(sibling)
    if agent.is_subconscious and primary_dir:
        found.add(Path(os.path.realpath(agent.home / primary_dir)))
    try:
        children = list(agent.home.iterdir())
    except OSError:
        children = []
    for child in children:
        if child.is_dir() and not child.is_symlink() and (child / "config.json").is_file():
            found.add(child)
    return sorted(d for d in found if d.is_dir())  # (a primary not made yet has nothing to keep)


def secret_files(agent: AgentDir, primary_dir: str = "") -> list[Path]:
    """Every agent directory's config.json (see agent_dirs): it may hold the API key and the
    telegram token, so nothing the daemon reads for the model may lead to it."""
    return [d / "config.json" for d in agent_dirs(agent, primary_dir)]


def life(agent: AgentDir, kind: str, text: str) -> None:
    """One line in LIFE.md: `2026-01-31 12:00:00 kind: text`."""
    flat = redact(" ".join(str(text).split()))
    if len(flat) > LIFE_LINE_MAX:
        flat = flat[:LIFE_LINE_MAX] + " [...]"
    line = f"{stamp()} {kind}: {flat}\n"
    locked_append(agent / "LIFE.md", line.encode("utf-8"))


def life_tail(agent: AgentDir, lines: int, primary_dir: str = "") -> str:
    """The last `lines` lines of LIFE.md, after "[N bytes earlier]" when there is more."""
    try:  # the model can replace LIFE.md: read through the one read path, from the end, bounded
        with os.fdopen(open_inside(agent.root, "LIFE.md", shown=agent.rel(agent / "LIFE.md"),
                                   refuse=secret_files(agent, primary_dir)), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - lines * (LIFE_LINE_MAX + 40)))
            data = read_up_to(f, lines * (LIFE_LINE_MAX + 40))
    except Refused as e:
        return f"({e})"
    except OSError:
        return ""
    kept = data.splitlines()[-lines:]
    earlier = size - sum(len(k) + 1 for k in kept)
    text = "\n".join(k.decode("utf-8", "replace") for k in kept)
    return f"[{earlier} bytes earlier]\n{text}" if earlier > 0 else text
