"""`bantam daemon [DIR ...]`: persistent agents whose bus is the file system.

    bantam daemon                    # ./agent, created from templates on first start
    bantam daemon agent subconscious # each directory in its own process, restarted if it dies

One agent directory, one process, one loop that wakes whenever DIR/messages.jsonl changes; chat
(Telegram), triggers, mail and background work all arrive as lines in that file. See
docs/daemon.md. The modules:

    runner.py     prepare (create, validate, lock) and serve one directory
    supervisor.py several directories, one child process each
    service.py    --install-service: a systemd user unit
    agent.py      the wake loop on bantam's loop.run; channel out
    bus.py        messages.jsonl: locked appends, journaled rewrites, healing
    settings.py   config.json      layout.py  the directory, templates, LIFE.md, the lock
    triggers.py   the schedule      mail.py    mail_inbox/      telegram.py  the chat
    tools.py      the tools         bg.py      bg_run           stash.py     blobs, clipping, stashes
    prompt.py     the system prompt web.py     SEARCH, WEB_FETCH watch.py    inotify
    boundary.py   the daemon's own files (read-only to the model); the sandbox of BASH and cmd triggers
This module stays cheap to import: everything else is imported when the command runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["main"]


def parser() -> "argparse.ArgumentParser":
    import argparse

    from ..options import Parser, common_options
    p = Parser(
        prog="bantam daemon", description="Run persistent agents, one per directory "
        "(default: ./agent). Each directory is created from templates on first start.")
    p.add_argument("dirs", nargs="*", metavar="DIR", help="agent directories")
    p.add_argument("--install-service", action="store_true",
                   help="write a systemd user unit that runs these directories, and say how to start it")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # started by the supervisor
    return common_options(p)


def main(argv: list[str]) -> int:
    from pathlib import Path

    from ..options import flags
    args = parser().parse_args(argv)
    cli = flags(args)
    dirs = [Path(d) for d in args.dirs] or [Path("agent")]
    if args.install_service:
        from .service import install
        return install(dirs, options(args))
    if len(dirs) == 1:
        from .runner import run_one
        return run_one(dirs[0], cli, child=args.child)
    from .supervisor import supervise
    return supervise(dirs, cli, options(args))


def options(args: "argparse.Namespace") -> list[str]:
    """The command line's options again, for the child processes."""
    out = [f"--{name}={value}" for name in ("model", "endpoint", "provider")
           if (value := getattr(args, name)) is not None]
    return out + (["--yolo"] if args.yolo else []) + [f"--set={item}" for item in args.set]
