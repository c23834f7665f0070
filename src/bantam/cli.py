"""The entry point of the `bantam` command (and of `python -m bantam`).

`bantam --version` is answered here, before anything else is imported: it is the start-up that
shells, scripts and installers run most, and it should cost little more than starting Python.
Every other command line goes to commandline.py (argparse, the subcommand table, the front ends).
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False  # as typing's (type checkers take it as true), without importing typing
if TYPE_CHECKING:  # nothing but sys is imported for `bantam --version`
    from collections.abc import Mapping
    from typing import IO


def main(argv: list[str] | None = None, *, stdin: IO[str] | None = None, stdout: IO[str] | None = None,
         stderr: IO[str] | None = None, environ: Mapping[str, str] | None = None, cwd: str | None = None) -> int:
    """Run `bantam ARGV...` (default: the process's arguments); return the exit code.

    The standard streams, the environment and the working directory are the process's own unless
    given: then they stand in for those for the length of the call, and the process's are put
    back after it (so a test drives the command line in its own process, as click's CliRunner
    does; one such call at a time). A stream that is to be read as a pipe or a file, or written
    past its end, needs a real file behind it (fileno), as bantam checks what its input is."""
    argv = sys.argv[1:] if argv is None else argv
    if stdin is None and stdout is None and stderr is None and environ is None and cwd is None:
        return _run(argv)
    with _standing_in(stdin, stdout, stderr, environ, cwd):
        try:
            return _run(argv)
        except SystemExit as e:  # argparse's --help and usage errors end the process; not here
            return e.code if isinstance(e.code, int) else 0 if e.code is None else 1


def _run(argv: list[str]) -> int:
    if argv == ["--version"]:  # with anything else beside it, argparse decides what it means
        from . import __version__
        print(f"bantam {__version__}")
        return 0
    from .commandline import run
    return run(argv)


class _standing_in:
    """The given streams, environment and folder in place of the process's, restored after (the
    signal handlers bantam sets for SIGTERM and SIGHUP too)."""

    def __init__(self, stdin: IO[str] | None, stdout: IO[str] | None, stderr: IO[str] | None,
                 environ: Mapping[str, str] | None, cwd: str | None):
        self.given = (stdin, stdout, stderr)
        self.environ, self.cwd = environ, cwd

    def __enter__(self) -> None:
        import os
        import signal
        self.streams = (sys.stdin, sys.stdout, sys.stderr)
        self.env, self.folder = dict(os.environ), os.getcwd()
        self.handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
        sys.stdin, sys.stdout, sys.stderr = (given or own for given, own in zip(self.given, self.streams, strict=True))
        if self.environ is not None:
            os.environ.clear()
            os.environ.update(self.environ)
        if self.cwd is not None:
            os.chdir(self.cwd)

    def __exit__(self, *exc: object) -> None:
        import os
        import signal
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdin, sys.stdout, sys.stderr = self.streams
        os.chdir(self.folder)
        os.environ.clear()
        os.environ.update(self.env)
        for sig, handler in self.handlers.items():
            if handler is not None and signal.getsignal(sig) != handler:
                signal.signal(sig, handler)
