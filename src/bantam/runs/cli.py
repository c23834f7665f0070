"""`bantam run`, `bantam status`, `bantam resume`: parse the arguments and hand off to runtime.py.

    bantam run GOAL [--config FILE] [--workspace DIR] [--require-read FILE]... [--scripted FILE]
                    [--runs-dir DIR] [--goal-file FILE] [--json]
    bantam status RUN [--json] [--runs-dir DIR]
    bantam resume RUN [--config FILE] [--retry-blocked] [--scripted FILE] [--runs-dir DIR] [--json]

Exit codes: 0 completed, 1 blocked or failed (a budget, a gate, the model), 2 bad usage or
configuration, 130 interrupted (the run is paused and resumable). The final answer goes to stdout;
progress, gates and the outcome line go to stderr. With --json stdout carries the loop's events as
JSON Lines (tool calls and results included), ending with `done` when the run completed.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from ..options import Parser, common_options, flags
from ..errors import ConfigError, Refused
from ..fsutil import CONFIG_LIMIT, read_named
from ..events import Done, Error, Notice, OnEvent

if TYPE_CHECKING:
    from pathlib import Path

    from .runtime import Options


def run_main(argv: list[str]) -> int:
    p = Parser(prog="bantam run", description="Start a controlled run: the model "
                                "proposes, the runtime's gates decide.")
    p.add_argument("goal", nargs="?", help="what the run must achieve")
    new_run_options(p)
    _shared(p)
    args = p.parse_args(argv)
    goal = goal_of(args.goal, args.goal_file)
    from . import runtime
    options = run_options(args, args.runs_dir)
    render = renderer(args)
    store, state = runtime.start(flags(args), goal, options, render)
    if args.output and state.status == "completed":
        render(Notice(message=f"output: {(store.workspace / state.config.tools.write_paths[0]).resolve()}"))
    return report(store, state, render, args.json)


def resume_main(argv: list[str]) -> int:
    p = Parser(prog="bantam resume", description="Continue a controlled run.")
    p.add_argument("run", help="a run id (under --runs-dir) or a run directory")
    p.add_argument("--config", metavar="FILE", help="new [limits], [runtime] or [model] (logged)")
    p.add_argument("--retry-blocked", action="store_true",
                   help="continue a blocked or failed run; run an interrupted write or command again")
    _scripted(p)
    _shared(p)
    args = p.parse_args(argv)
    from . import runtime
    options = runtime.Options(args.config, None, [], args.scripted, args.runs_dir, args.retry_blocked)
    render = renderer(args)
    store, state = runtime.resume(flags(args), args.run, options, render)
    return report(store, state, render, args.json)


def status_main(argv: list[str]) -> int:
    p = Parser(prog="bantam status", description="Show a controlled run's state.")
    p.add_argument("run", help="a run id (under --runs-dir) or a run directory")
    p.add_argument("--json", action="store_true", help="the status as one JSON object")
    p.add_argument("--runs-dir", default="runs", metavar="DIR", help="where runs live (default: ./runs)")
    args = p.parse_args(argv)
    from pathlib import Path

    from .status import summary, text
    from .store import RunDir
    store = RunDir.find(args.run, Path(args.runs_dir))
    state = store.load(check_goal=False)  # shown even when its goal.md was edited
    print(json.dumps(summary(store, state), indent=1) if args.json else text(store, state))
    return 0


def new_run_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """What a new run takes besides its goal: `bantam run` and the chat's /run read the same
    options with this one table."""
    p.add_argument("--goal-file", metavar="FILE", help="read the goal from FILE")
    p.add_argument("--config", metavar="FILE", help="TOML: [limits] [runtime] [model] [tools]")
    p.add_argument("--workspace", metavar="DIR", help="copied into the run's workspace (default: empty)")
    p.add_argument("--require-read", metavar="FILE", action="append", default=[],
                   help="a workspace file the run must read in full before it may complete (repeatable)")
    p.add_argument("--output", metavar="FILE", help="generate FILE: read the goal, write FILE (the only "
                   "file the run may write), answer; the file's path is printed at the end")
    p.add_argument("--prompt-artifact", metavar="FILE", help="worked examples and instructions from "
                   "`bantam optimize`; copied into the run and kept frozen on resume")
    _scripted(p)
    return p


def run_options(args: argparse.Namespace, runs_dir: str, folder: "Path | None" = None) -> "Options":
    """The options new_run_options read, for runtime.start."""
    from .runtime import Options
    return Options(args.config, args.workspace, args.require_read, args.scripted, runs_dir,
                   output=args.output, prompt_artifact=args.prompt_artifact, folder=folder)


def _scripted(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scripted", metavar="FILE",
                   help="replay model answers from FILE (a JSON list of strings) instead of asking a model")


def _shared(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", default="runs", metavar="DIR", help="where runs live (default: ./runs)")
    p.add_argument("--json", action="store_true", help="JSON Lines events on stdout (tool calls and results)")
    common_options(p)


def goal_of(goal: str | None, goal_file: str | None) -> str:
    if goal_file:
        try:
            return read_named(goal_file, CONFIG_LIMIT).decode("utf-8")
        except Refused as e:
            raise ConfigError(f"--goal-file: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--goal-file: cannot read {goal_file}: {getattr(e, 'strerror', None) or e}") from None
    if goal is None:
        raise ConfigError("bantam run needs a GOAL (or --goal-file FILE)")
    return goal


def renderer(args: argparse.Namespace) -> OnEvent:
    """Progress on stderr, in the terminal's palette when stderr is a terminal; or JSON Lines.
    Either way every secret value bantam knows is shown as ***."""
    from ..render import redacting
    if args.json:
        from ..render.jsonl import JsonRenderer
        return redacting(JsonRenderer(sys.stdout, sys.stderr, lambda: 0))
    from ..config import Config
    from ..render import use_color
    from ..render.text import TextRenderer
    color = use_color(Config(color="auto"), sys.stderr)
    return redacting(TextRenderer(sys.stdout, sys.stderr, color, lambda: 0))


def report(store, state, render: OnEvent, json_lines: bool = False) -> int:
    """The final answer on stdout, the outcome on stderr; the exit code."""
    from .status import outcome_line
    if state.status == "completed":
        if json_lines:
            render(Done(text=state.final, usage=state.counters.usage()))
        else:
            print(state.final)
        render(Notice(message=outcome_line(store, state)))
        return 0
    render(Error(message=outcome_line(store, state)))
    return 1
