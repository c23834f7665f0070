"""Several agent directories in one command: each in its own process, kept alive.

    bantam daemon agent subconscious

Every directory is prepared (created, validated) here first, so a bad config stops the command
before anything runs. Then each gets a child `python -m bantam daemon [options] DIR`. A child
that dies is started again after RESPAWN_S seconds ($BANTAM_DAEMON_RESPAWN_S), and the death is
logged to the first directory's LIFE.md. SIGTERM or Ctrl+C stops the children, then the parent.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .. import reaper
from ..errors import ConfigError
from . import layout
from .layout import SUBCONSCIOUS, AgentDir
from .runner import prepare

RESPAWN_S = 10.0
STOP_GRACE_S = 10.0   # a child gets this long to stop before it is killed
CHECK_S = 1.0         # how often the parent looks at its children


@dataclass
class Child:
    path: Path
    proc: subprocess.Popen | None = None
    due: float = 0.0   # when to (re)start it


def primary_of(dirs: list[Path]) -> str:
    """Which directory a new subconscious reviews: the first one that is not itself one."""
    first = next((d for d in dirs if d.resolve().name != SUBCONSCIOUS), None)
    if first is None:
        return "agent"
    sub = next((d for d in dirs if d.resolve().name == SUBCONSCIOUS), first)
    return os.path.relpath(first.resolve(), sub.resolve().parent)


def supervise(dirs: list[Path], cli: Mapping[str, str], options: list[str]) -> int:
    resolved = [d.resolve() for d in dirs]
    if len(set(resolved)) < len(resolved):
        raise ConfigError("the same agent directory is named twice: "
                          f"{', '.join(str(d) for d in dirs)}")
    primary = primary_of(dirs)
    for path in dirs:
        ready = prepare(path, cli, primary)
        lock = layout.ProcessLock(ready.agent)
        lock.acquire()  # in use elsewhere: say so now, not through a child that keeps dying
        lock.release()
        for note in ready.notes:  # what was created here; the child finds it all in place
            layout.life(ready.agent, "setup", note)
    first = AgentDir(dirs[0].resolve())
    children = [Child(path.resolve()) for path in dirs]
    signal.signal(signal.SIGTERM, _stop)
    try:
        while True:
            now = time.monotonic()
            for child in children:
                _tend(child, now, first, options)
            time.sleep(CHECK_S)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop_all(children)
    return 0


def _tend(child: Child, now: float, first: AgentDir, options: list[str]) -> None:
    if child.proc is not None:
        code = child.proc.poll()
        if code is None:
            return
        reaper.release(child.proc.pid)
        delay = float(os.environ.get("BANTAM_DAEMON_RESPAWN_S") or RESPAWN_S)
        layout.life(first, "supervisor", f"{child.path.name} (pid {child.proc.pid}) died with exit "
                                         f"status {code}; restarting it in {delay:g} s")
        child.proc, child.due = None, now + delay
    if now >= child.due:
        # Its own session, watched by bantam.reaper: a SIGKILLed supervisor still stops its
        # children (SIGTERM, so each shuts down cleanly and frees its directory's lock).
        child.proc = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "--child", *options,
                                       str(child.path)], stdin=subprocess.DEVNULL, start_new_session=True)
        reaper.watch(child.proc.pid, signal.SIGTERM)


def _stop_all(children: list[Child]) -> None:
    running = [c.proc for c in children if c.proc is not None and c.proc.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reaper.release(proc.pid)  # reaped: its pid may be reused by someone else's process


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
