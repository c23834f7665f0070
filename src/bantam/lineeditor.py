"""Reading the user's prompt: prompt_toolkit on a terminal, plain input() anywhere else.

Enter submits, Ctrl+J inserts a newline, Up/Down walk the history in ~/.bantam_history, Emacs
keys edit (Ctrl+A/E/B/F/W/K/U, Ctrl+Left/Right, Home/End). Ctrl+C raises KeyboardInterrupt (the
caller clears the line), Ctrl+D on an empty line raises EOFError. Where the history file cannot be
written (no HOME, a read-only one: containers, CI) the terminal works without it and says so once.
Between prompts (a request runs) `typing_ahead` keeps what is typed for the next prompt, Enter included.
"""
from __future__ import annotations

import os
import sys
import termios
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO

Reader = Callable[[str], str]


def history_path() -> Path:
    return Path.home() / ".bantam_history"


def on_terminal() -> bool:
    """Whether prompts are read with the line editor (else with plain input())."""
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def make_reader(err: TextIO = sys.stderr) -> Reader:
    return terminal_reader(history_path(), err) if on_terminal() else plain_reader(err)


def plain_reader(err: TextIO = sys.stderr) -> Reader:
    """input() with its prompt on stderr, not stdout: stdout carries only answers, so `bantam >
    out.txt` collects them while the `> ` and the questions stay on the terminal."""
    def read(message: str) -> str:
        err.write(message)
        err.flush()
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.removesuffix("\n")
    return read


def writable_history(history: Path) -> str:
    """Why the history file cannot be kept ("" when it can): it is created (0600) and opened for
    appending now, as prompt_toolkit will after every prompt."""
    try:
        with open(os.open(history, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab"):
            return ""
    except OSError as e:
        return e.strerror or str(e)


def terminal_reader(history: Path, err: TextIO = sys.stderr) -> Reader:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, History, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.key_binding.bindings.named_commands import get_by_name

    keys = KeyBindings()

    @keys.add("c-j")
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    keys.add("c-left")(get_by_name("backward-word"))
    keys.add("c-right")(get_by_name("forward-word"))

    problem = writable_history(history)
    kept: History = InMemoryHistory() if problem else FileHistory(str(history))
    if problem:  # the prompt works all the same; only Up/Down across runs is lost
        err.write(f"bantam: no prompt history this time: {history}: {problem}\n")
    session: PromptSession[str] = PromptSession(history=kept, key_bindings=keys,
                            multiline=False, prompt_continuation=lambda width, line, wrap: ". ".rjust(width))
    return lambda message: session.prompt(message)


@contextmanager
def typing_ahead(stream: TextIO | None = None) -> Iterator[None]:
    """While a request runs and no prompt reads the terminal: keys typed meanwhile wait for the next
    prompt as they were typed. The terminal's own (cooked) mode would echo them over the status line
    and turn Enter (CR) into a line feed, which the prompt takes as Ctrl+J, a new line, so the
    typed-ahead prompt was never sent. Signals stay on: Ctrl+C still interrupts the request. The mode
    is set and restored with TCSANOW, which keeps the typed keys (TCSAFLUSH would drop them)."""
    stream = stream or sys.stdin
    try:
        fd = stream.fileno()
        before = termios.tcgetattr(fd) if os.isatty(fd) else None
    except (OSError, ValueError, termios.error):
        before = None
    if before is None:  # not a terminal (a pipe, a test's StringIO): nothing to keep apart
        yield
        return
    waiting = [*before[:6], list(before[6])]
    waiting[0] &= ~termios.ICRNL                    # Enter stays CR, which the prompt reads as Enter
    waiting[3] &= ~(termios.ECHO | termios.ICANON)  # not echoed; whole keys, not edited lines
    waiting[6][termios.VMIN], waiting[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, waiting)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, before)
