"""The interactive terminal: a line editor and printed output around a Conversation.

What is said and done (the conversation, slash commands, controlled runs, autosave) is
conversation.py's, shared with the browser view; here are only the terminal's own parts: the
line reader, the trust question at start, Ctrl+C and Ctrl+D.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import IO

from . import session
from .commands import ask_trust
from .config import Config
from .conversation import Conversation
from .lineeditor import Reader, make_reader
from .providers import ModelFacts
from .render import Renderer, make_renderer


class Repl:
    def __init__(self, flags: dict[str, str], read: Reader | None = None,
                 out: IO[str] = sys.stdout, err: IO[str] = sys.stderr, folder: Path | None = None):
        self.read = read or make_reader()
        self.out, self.err = out, err
        where = session.workspace(folder or Path.cwd())  # default: where the user started bantam
        self.chat = Conversation(flags, where, ask=lambda q: self.read(q), show=self.print, renderer=self.renderer)

    def renderer(self, cfg: Config, window: ModelFacts) -> Renderer:
        return make_renderer(cfg, False, self.out, self.err, window)

    @property
    def run_active(self) -> threading.Event:
        """Set while a controlled run works in the background."""
        return self.chat.run_active

    def run(self) -> int:
        chat = self.chat
        chat.greet()
        if ask_trust(self.read, chat.folder):  # a project's files would change the boundary: ask first
            chat.trusted()
        while True:
            try:
                line = self.read("> ")
            except KeyboardInterrupt:
                if chat.run_active.is_set():  # Ctrl+C while a run works: the same as /pause
                    chat.cmd_pause("")
                continue
            except EOFError:
                break
            if line.strip() and not chat.handle(line.strip() if line.startswith(("/", "!")) else line):
                break
        chat.end_run()
        chat.save_auto()
        return 0

    def print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


def run_repl(flags: dict[str, str], resume: bool = False) -> int:
    repl = Repl(flags)
    if resume:  # `bantam -c`: as /continue, before the first prompt
        repl.chat.load(repl.chat.autosave.id)
    return repl.run()
