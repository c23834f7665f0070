"""The entry point of the `bantam` command (and of `python -m bantam`).

`bantam --version` is answered here, before anything else is imported: it is the start-up that
shells, scripts and installers run most, and it should cost little more than starting Python.
Every other command line goes to commandline.py (argparse, the subcommand table, the front ends).
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run `bantam ARGV...` (default: the process's arguments); return the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:  # with anything else beside it, argparse decides what it means
        from . import __version__
        print(f"bantam {__version__}")
        return 0
    from .commandline import run
    return run(argv)
