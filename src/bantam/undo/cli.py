"""`bantam undo [N] [--thread T] [--yes|--force] [--list] [--redo]`: take back the file changes of
the last N turns (that changed files) of this folder's session, or of thread T; --redo reapplies
the N turns undone last, when no file they touch changed since the undo (--force: even so).

With nothing to undo it says so and exits 0. On a terminal it shows what it will restore and
remove and asks; with --yes, or with nobody to ask, it acts. A file changed by hand since the
turn is skipped, one line naming each, while the rest is undone (--force overwrites them too;
their content stays in the undo store; on a terminal it asks).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..errors import ConfigError
from ..options import Parser
from ..transcripts import given_id, project_id
from . import Store, apply, plan, plan_redo, redoable, session_key, thread_key, undoable
from .restore import Plan, UndoError, shown


NOTHING = {"undo": "no recorded turn changed files", "redo": "no turn was undone since the last one that changed files"}


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="bantam undo", description=__doc__.split("\n\n")[0])
    p.add_argument("count", nargs="?", type=int, default=1, metavar="N", help="how many turns (default 1)")
    p.add_argument("--thread", metavar="ID", help="a thread's turns (default: this folder's session)")
    p.add_argument("--list", action="store_true", help="the turns that can be undone, newest first")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask (files changed by hand since are skipped)")
    p.add_argument("--force", action="store_true", help="also overwrite files changed by hand since the turn")
    p.add_argument("--redo", action="store_true", help="reapply the N turns undone last (nothing changed since)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.count < 1:
        raise ConfigError("bantam undo: N must be at least 1")
    key = thread_key(given_id(args.thread, "--thread")) if args.thread else session_key(project_id(Path.cwd()))
    if args.list:
        return list_turns(key)
    word = "redo" if args.redo else "undo"
    if not (redoable if args.redo else undoable)(key, Store()):  # nothing went wrong: there is simply none
        print(f"bantam undo: nothing to {word} in {key} ({NOTHING[word]})", file=sys.stderr)
        return 0
    try:
        p = (plan_redo if args.redo else plan)(key, args.count)
    except UndoError as e:
        print(f"bantam undo: {e}", file=sys.stderr)
        return 1
    print("\n".join(p.lines()))
    force = args.force
    if p.conflicts and not force and not args.yes and asks():
        force = confirm(f"{len(p.conflicts)} file(s) changed since the {'undo' if p.redo else 'turn'}; "
                        "overwrite them too? [y/N] ")
    elif not p.conflicts and not (args.yes or force or not asks() or confirm(f"{word}? [y/N] ")):
        print("bantam undo: nothing changed", file=sys.stderr)
        return 1
    return carry_out(p, force)


def carry_out(p: Plan, force: bool) -> int:
    """Apply `p`, naming each file left as it is: changed since the turn (unless `force`), or not restorable."""
    try:
        problems = apply(p, force=force)
    except UndoError as e:
        print(f"bantam undo: {e}", file=sys.stderr)
        return 1
    for path in [] if force else p.conflicts:
        print(f"bantam undo: skipped {shown(path)}: changed since the turn (--force overwrites it)", file=sys.stderr)
    for line in problems:
        print(f"bantam undo: {line}", file=sys.stderr)
    return 1 if problems else 0


def list_turns(key: str) -> int:
    found = undoable(key, Store())
    if not found:
        print(f"nothing to undo in {key}")
        return 0
    for n, r in enumerate(found, 1):
        paths = list(r["changes"])
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.get("updated", 0)))
        more = f" (+{len(paths) - 3} more)" if len(paths) > 3 else ""
        print(f"{n:>3}  turn {r.get('turn', '?')}  {when}  {len(paths)} change(s): "
              f"{', '.join(shown(p) for p in paths[:3])}{more}  in {r.get('folder')}")
    return 0


def asks() -> bool:
    """Whether a person can be asked: a terminal on both ends."""
    return os.isatty(0) and os.isatty(2)


def confirm(question: str) -> bool:
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")
