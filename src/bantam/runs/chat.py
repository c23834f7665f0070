"""Controlled runs from the interactive terminal: /run, /fix, /pause, /resume, /status, /files.

Each function drives a run to its end and takes the `pause` event the front end sets to pause
it at its next safe point (runs/loop.py): the terminal runs it in a background thread and sets
the event on /pause or Ctrl+C; the page sets it on Stop. /resume continues a paused run.

Each takes the chat session's folder, a value: runs live in `<folder>/runs/` (where `bantam run`
in that folder puts them), and /run's --workspace, --config and --scripted are read from the
folder. "The last run" is the one this session started or resumed, else the newest there.
"""
from __future__ import annotations

import argparse
import shlex
import threading
from typing import NoReturn
from pathlib import Path

from ..errors import ConfigError
from ..events import OnEvent

RUNS_DIR = "runs"  # under the session's folder
Outcome = tuple["Path | None", str, str]  # the run's directory, its final answer, its outcome line
PAUSING = "pausing the run at its next safe point (the step in progress finishes first); /resume continues it"
NOT_RUNNING = "no run is working now: /run GOAL starts one, /resume continues the last one"
RUN_BUSY = ("a run is working: /pause pauses it at its next step (so does Ctrl+C); "
            "/status and /files show where it stands")
USAGE = ("usage: /run GOAL [--workspace DIR] [--config FILE] [--require-read FILE] [--scripted FILE] "
         "[--output FILE] [--goal-file FILE] [--prompt-artifact FILE] (as `bantam run` takes them, before "
         "or after the goal; quote a goal that holds --)")


def start(flags: dict[str, str], folder: Path, line: str, on_event: OnEvent,
          pause: threading.Event | None = None) -> Outcome:
    """`/run GOAL`, with `bantam run`'s options before or after the goal's words."""
    from . import runtime
    if not line.strip():
        raise ConfigError(USAGE)
    options, goal = _options(line, folder)
    return _outcome(folder, lambda: runtime.start(flags, goal, options, on_event, pause))


def fix(flags: dict[str, str], folder: Path, last: Path | None, error: str, on_event: OnEvent,
        pause: threading.Event | None = None) -> Outcome:
    """A correction run: the last run's goal and the error, its workspace, its configuration."""
    from . import runtime
    if not error.strip():
        raise ConfigError("usage: /fix ERROR (what is still wrong with the last run's result)")
    store, state = _last(folder, last)
    goal = (f"{state.goal.strip()}\n\nA previous run ({state.id}) worked on this goal. What is still "
            f"wrong, to fix now:\n{error.strip()}")
    options = runtime.Options(workspace=str(store.workspace), require_read=list(state.require_read),
                              runs_dir=RUNS_DIR, saved_config=state.config, folder=folder)
    return _outcome(folder, lambda: runtime.start(flags, goal, options, on_event, pause))


def resume(flags: dict[str, str], folder: Path, last: Path | None, arg: str, on_event: OnEvent,
           pause: threading.Event | None = None) -> Outcome:
    """`/resume [--retry-blocked]` on the last run."""
    from . import runtime
    store, _ = _last(folder, last)
    options = runtime.Options(runs_dir=RUNS_DIR, retry_blocked="--retry-blocked" in arg.split(), folder=folder)
    return _outcome(folder, lambda: runtime.resume(flags, str(store.path), options, on_event, pause))


def status(folder: Path, last: Path | None) -> str:
    from .status import text
    store, state = _last(folder, last, check_goal=False)
    return text(store, state)


def files(folder: Path, last: Path | None) -> str:
    store, _ = _last(folder, last, check_goal=False)
    root = store.workspace
    found = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    lines = [f"{p.relative_to(root).as_posix()}  ({p.stat().st_size} bytes)" for p in found]
    return f"{root}:\n" + ("\n".join(lines) if lines else "(no files)")


def _options(line: str, folder: Path):
    """The options and the goal of a /run line, read by `bantam run`'s own table
    (cli.new_run_options) in any order: `/run read a --workspace ws`. A line with no word starting
    with -- is the goal as typed, apostrophes and all."""
    from . import runtime
    from .cli import goal_of, new_run_options, run_options
    if not any(word.startswith("--") for word in line.split()):
        return runtime.Options(runs_dir=RUNS_DIR, folder=folder), line.strip()
    parser = new_run_options(_LineParser(prog="/run", add_help=False))
    parser.add_argument("goal", nargs="*")
    try:
        args = parser.parse_intermixed_args(shlex.split(line))
    except ValueError as e:  # (shlex: an unclosed quote)
        raise ConfigError(f"/run: {e}") from None
    goal = goal_of(" ".join(args.goal) or None, args.goal_file and str(folder / args.goal_file))
    return run_options(args, RUNS_DIR, folder), goal


class _LineParser(argparse.ArgumentParser):
    """A parser for a line typed in the chat: a mistake is one line for the person, never a usage
    text on the process's stderr and an exit."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"/run: {message} ({USAGE})")


def _last(folder: Path, last: Path | None, check_goal: bool = True):
    """The last run and its state; `check_goal` False only to show it (store.load)."""
    from .store import RunDir
    path = last or newest(folder)
    if path is None:
        raise ConfigError("no run yet: /run GOAL starts one")
    store = RunDir(path)
    return store, store.load(check_goal)


def newest(folder: Path) -> Path | None:
    """The most recently created run in `folder`'s runs (goal.md is written once, when the run is created)."""
    where = folder / RUNS_DIR
    runs = [p.parent for p in where.glob("*/goal.md")] if where.is_dir() else []
    return max(runs, key=lambda run: (run / "goal.md").stat().st_mtime_ns, default=None)


def _outcome(folder: Path, work) -> Outcome:
    """(the run's directory, its final answer, its outcome line). Ctrl+C pauses the run."""
    from .status import outcome_line
    try:
        store, state = work()
    except KeyboardInterrupt:
        return newest(folder), "", "run paused: /resume continues it"
    return store.path, state.final if state.status == "completed" else "", outcome_line(store, state)
