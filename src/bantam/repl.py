"""The interactive terminal: a line editor and printed output around a Conversation.

What is said and done (the conversation, slash commands, controlled runs, autosave) is
conversation.py's, shared with the browser view; here are only the terminal's own parts: the
line reader, the trust question at start, Ctrl+C and Ctrl+D.
"""
from __future__ import annotations

import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import IO

from . import session, slash, transcripts
from .commands import ask_trust
from .config import Config
from .conversation import Conversation
from .errors import ConfigError
from .lineeditor import Reader, make_reader, on_terminal, typing_ahead
from .providers import ModelFacts
from .render import Renderer, make_renderer
from .sanitize import visible_lines


class Repl:
    def __init__(self, flags: dict[str, str], read: Reader | None = None,
                 out: IO[str] = sys.stdout, err: IO[str] = sys.stderr, folder: Path | None = None,
                 session_id: str | None = None):
        self.read = read or make_reader()
        # plain input() (TERM=dumb) needs the cooked mode, echo and all, for its own questions
        self.waiting = typing_ahead if read is None and on_terminal() else nullcontext
        self.out, self.err = out, err
        where = session.absolute_folder(folder or Path.cwd())  # default: where the user started bantam
        self.chat = Conversation(flags, where, ask=lambda q, _choices: self.read(q), show=self.print,
                                 renderer=self.renderer, session_id=session_id)

    def renderer(self, cfg: Config, window: ModelFacts) -> Renderer:
        return make_renderer(cfg, False, self.out, self.err, window)

    @property
    def run_active(self) -> threading.Event:
        """Set while a controlled run works in the background."""
        return self.chat.run_active

    def run(self, resume: bool = False) -> int:
        """Talk until /quit or Ctrl+D; `resume` (`bantam -c`): continue the saved conversation first."""
        chat = self.chat
        chat.greet(offer_continue=not resume)
        if resume:
            chat.load(chat.autosave.id)
        if ask_trust(self.read, chat.folder):  # a project's files would change the boundary: ask first
            slash.trusted(chat)
        while True:
            try:
                line = self.read("> ")
            except KeyboardInterrupt:
                if chat.run_active.is_set():  # Ctrl+C while a run works: the same as /pause
                    slash.pause(chat, "")
                continue
            except EOFError:
                break
            if not line.strip():
                continue
            with self.waiting():  # what is typed while it works waits for the next prompt, Enter included
                if not chat.handle(line.strip() if line.startswith(("/", "!")) else line):
                    break
        chat.end_run()
        chat.save_auto()
        return 0

    def print(self, text: str) -> None:
        """What the conversation shows (/cfg, /mcp, /undo's plan, a `!command`'s output, ...) holds
        a project's values, file names and output: every character that is not printable is
        shown as its escape (sanitize.visible_lines), so nothing in it drives the terminal."""
        self.out.write(visible_lines(text) + "\n")
        self.out.flush()


def run_repl(flags: dict[str, str], resume: bool = False) -> int:
    """The terminal; `resume` (`bantam -c`): this folder's latest session, the project's or an editor's."""
    session_id = transcripts.continued(Path.cwd()) if resume else None
    if session_id and not transcripts.exists(session_id):  # as `bantam -c -p` says it
        raise ConfigError(transcripts.CONTINUE_NONE)
    return Repl(flags, session_id=session_id).run(resume)
