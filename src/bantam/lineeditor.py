"""Reading the user's prompt: prompt_toolkit on a terminal, plain input() anywhere else.

Enter submits, Ctrl+J inserts a newline, Up/Down walk the history in ~/.bantam_history, Emacs
keys edit (Ctrl+A/E/B/F/W/K/U, Ctrl+Left/Right, Home/End). Ctrl+C raises KeyboardInterrupt (the
caller clears the line), Ctrl+D on an empty line raises EOFError.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

Reader = Callable[[str], str]


def history_path() -> Path:
    return Path.home() / ".bantam_history"


def make_reader() -> Reader:
    if sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM") != "dumb":
        return terminal_reader(history_path())
    return input


def terminal_reader(history: Path) -> Reader:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.key_binding.bindings.named_commands import get_by_name

    keys = KeyBindings()

    @keys.add("c-j")
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    keys.add("c-left")(get_by_name("backward-word"))
    keys.add("c-right")(get_by_name("forward-word"))

    if not history.exists():
        history.touch(mode=0o600)
    session: PromptSession[str] = PromptSession(history=FileHistory(str(history)), key_bindings=keys,
                            multiline=False, prompt_continuation=lambda width, line, wrap: ". ".rjust(width))
    return lambda message: session.prompt(message)
