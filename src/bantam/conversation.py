"""One chat with a person, whatever they type into: the conversation, the slash commands, `!`
commands, controlled runs and autosave. The terminal (repl.py) and the browser (web/session.py)
each own a Conversation and differ only in what they hand it:

    chat = Conversation(flags, folder, ask=read_a_line, show=print_text, renderer=make_one)
    chat.greet()
    while ...: chat.handle(line)          # False: the person asked to quit

- `ask(question, choices)`: the next answer from the person (approvals, the compaction question),
  offered `choices` (approval.Choice: a page shows them as buttons; none: any text);
  KeyboardInterrupt or EOFError when there is none;
- `show(text)`: output meant to be read as it is (a listing, a run's answer);
- `renderer(cfg, window)`: what draws the loop's events, made again when the model changes;
- `background_runs`: a controlled run works in a thread of its own (the terminal, whose reader
  must go on so /pause reaches it), or in the caller's (the page, whose input already works in a
  thread; its Stop sets `run_pause`);
- `shell_cancel`: what stops a `!command` besides SIGINT (the page's Stop).

Everything is bound to `folder` (the session's workspace, a value): two conversations with
different folders run side by side in one process.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from . import __version__, config, session, slash, transcripts, undo
from .approval import YES_NO, Approvals, Read, terminal_ask
from .errors import BantamError, LimitReached, ProviderError, ToolError
from .events import Done, Error, Event, Notice
from .envpolicy import user_env
from .providers import ModelFacts, context_window_later
from .render import Renderer
from .sanitize import terminal_safe
from .tools.shell import run_shell

COMPACT_AT = 0.6  # offer compaction when the context is this full
KEYS = "Enter sends, Ctrl+J starts a new line, Ctrl+C clears the line or stops a running turn."

# What may be typed while a controlled run works in the background; anything else waits for it.
WHILE_A_RUN_WORKS = ("/pause", "/status", "/files", "/help", "/quit")

MakeRenderer = Callable[[config.Config, ModelFacts], Renderer]


class Conversation:
    commands = slash.TERMINAL  # its slash commands (slash.py: the table every front end runs)
    keys = KEYS

    def __init__(self, flags: dict[str, str], folder: Path, *, ask: Read,
                 show: Callable[[str], None], renderer: MakeRenderer, background_runs: bool = True,
                 shell_cancel: threading.Event | None = None, continue_hint: str = "/continue resumes it",
                 session_id: str | None = None):
        self.flags = dict(flags)
        self.folder = session.absolute_folder(folder)
        self.ask, self.show, self.make_renderer = ask, show, renderer
        self.background_runs, self.shell_cancel, self.continue_hint = background_runs, shell_cancel, continue_hint
        self.autosave = transcripts.Autosave(self.folder, session_id)  # default: the project's session
        self.changed = False  # only a conversation this process touched is autosaved
        self.last_run: Path | None = None  # the controlled run this conversation started or resumed
        self.run_pause = threading.Event()   # set: the working run pauses at its next safe point
        self.run_active = threading.Event()  # set while a controlled run works
        self.run_job: threading.Thread | None = None
        self.messages: list[dict] = []
        self.unshown: list[Event] = []  # events from before the first renderer (rendered)
        # the person approves through the same channel they answer on; "always" lasts the conversation
        self.approvals = Approvals(terminal_ask(lambda q, offered: self.ask(q, offered), self.say))
        self.configure(session.load_config(self.flags, self.folder))
        self.messages = [self.system()]

    def configure(self, cfg: config.Config) -> None:
        """A new configuration (at start, /cfg, /trust): a new session (Session.with_config: the
        same folder, approvals and /tmp, a provider for the new settings) and a renderer for its
        model; the conversation's cost goes on."""
        before: session.Session | None = getattr(self, "session", None)
        self.session = before.with_config(cfg, undo=self.undo_key()) if before is not None else \
            session.build(cfg, self.folder, session.FrontEnd(on_event=self.rendered, approvals=self.approvals,
                                                             undo=self.undo_key()))
        assert self.session.provider is not None  # built with a model
        self.cfg, self.provider, self.toolbox = cfg, self.session.provider, self.session.toolbox
        self.window = context_window_later(self.provider, cfg)
        spent = getattr(getattr(self, "render", None), "session_cost", 0.0)
        self.render: Renderer = self.make_renderer(cfg, self.window)
        if hasattr(self.render, "session_cost"):
            self.render.session_cost = spent  # a new model or endpoint: the session's cost goes on
        for event in self.unshown:  # said while the first session was built, before any renderer
            self.render(event)
        self.unshown.clear()
        if self.messages:
            self.messages[0] = self.system()

    def rendered(self, event: Event) -> None:
        """The session's events go to the renderer of the current configuration (kept until the
        first one exists: building the first session may already have something to say)."""
        render = getattr(self, "render", None)
        if render is None:
            self.unshown.append(event)
        else:
            render(event)

    def system(self) -> dict:
        return {"role": "system", "content": self.session.system}

    def undo_key(self) -> str:
        """Where this conversation's turns are recorded for /undo (the project's session)."""
        return undo.session_key(self.autosave.id)

    def greet(self, offer_continue: bool = True) -> None:
        """The first lines; `offer_continue` False when the saved conversation is being resumed anyway."""
        where = "this machine" if self.cfg.provider == "local" else self.cfg.endpoint
        self.say(f"bantam {__version__} · {self.provider.model} at {where} · /help for commands")
        if self.cfg.embedded:
            self.say(config.embedded_notice(self.cfg))
        slash.sandbox(self, "")
        if offer_continue and transcripts.exists(self.autosave.id):
            self.say("this project has a saved conversation: " + self.continue_hint)

    # --- one input -------------------------------------------------------------------------

    def handle(self, line: str) -> bool:
        """Act on one input; False to quit."""
        if line.startswith("!"):
            self.shell(line[1:].strip())
            return True
        name, _, arg = line.partition(" ")
        if self.run_active.is_set() and name not in WHILE_A_RUN_WORKS:
            from .runs.chat import RUN_BUSY
            self.say(RUN_BUSY)
            return True
        if line.startswith("/") and "/" not in name[1:]:
            return self.command(name, arg.strip())
        self.said(line)
        return True

    def said(self, line: str) -> None:
        """A message the person typed: its `@server:uri` resources attached, then sent."""
        if "@" in line:
            from .mcp.resources import with_resources
            try:
                line = with_resources(line, self.mcp_servers(), self.toolbox.ctx)
            except KeyboardInterrupt:
                return self.say("interrupted")
            except BantamError as e:  # nothing was sent: the person can fix the mention
                return self.render(Error(message=str(e)))
        self.turn(line)

    def turn(self, prompt: str) -> None:
        self.messages.append({"role": "user", "content": prompt})
        self.changed = True
        try:
            done = self.session.run(self.messages, lambda _: self.save_auto())  # appended after every step
            self.render(Done(text=done.text, usage=done.usage))
        except KeyboardInterrupt:
            self.render.reset()
            self.say("interrupted")
            return self.end_turn(transcripts.INTERRUPTED)
        except (ProviderError, LimitReached) as e:
            self.render(Error(message=str(e)))
            return self.end_turn(f"[no answer: {' '.join(str(e).split())[:300]}]")
        self.end_turn("[no answer: the model returned an empty answer]")
        self.offer_compaction(done.usage.context_tokens)

    def end_turn(self, unanswered: str) -> None:
        """Save the turn, closed with `unanswered` if it has no answer (transcripts.close_turn)."""
        transcripts.close_turn(self.messages, unanswered)
        self.save_auto()

    def offer_compaction(self, tokens: int) -> None:
        window = self.window()
        if not tokens or tokens < COMPACT_AT * window:
            return
        question = (f"Context usage is at {100 * tokens / window:.1f}% ({tokens} / {window} tokens). "
                    "Compact conversation? [Y/n]: ")
        try:
            answer = self.ask(question, YES_NO).strip().lower()
        except (KeyboardInterrupt, EOFError):
            return
        if answer in ("", "y", "yes"):  # as /compact: Ctrl+C or a failed request leaves the conversation be
            self.command("/compact", "")

    def shell(self, command: str) -> None:
        if not command:
            return self.say("usage: !<command>")
        try:
            result = run_shell(command, self.cfg.shell_timeout, self.cfg.tool_output_limit, self.shell_cancel,
                               env=user_env(), cwd=self.folder)  # the user's own command: the user's environment
        except KeyboardInterrupt:
            return self.say("interrupted")
        self.show(result.output.rstrip("\n"))
        self.say(f"exit: {result.exit_code}")

    # --- commands --------------------------------------------------------------------------

    def command(self, name: str, arg: str) -> bool:
        """Run the slash command `name` (slash.py's table); False to quit."""
        if name == "/quit":
            return False
        try:
            if ":" in name:  # /server:prompt
                self.mcp_prompt(name, arg)
            elif not slash.run(self, name, arg):
                self.say(f"unknown command {name}; /help lists the commands")
        except KeyboardInterrupt:
            self.render.reset()
            self.say("interrupted")
        except BantamError as e:
            self.render(Error(message=str(e)))
        return True

    # --- what the slash commands ask of a chat (slash.Chat) ---------------------------------

    @property
    def session_id(self) -> str:
        return self.autosave.id

    def confirm(self, question: str, default: bool) -> bool:
        answer = self.ask(question, YES_NO).strip().lower()
        return default if not answer else answer in ("y", "yes")

    def keep(self) -> None:
        self.changed = True
        self.save_auto()

    def choose(self, keys: dict[str, str]) -> None:
        """A new session with `keys` as the person's own choice for this session (the flags'
        layer, above every file: a later /cfg or /trust rebuilds with them still)."""
        self.flags.update(keys)
        self.configure(session.load_config(self.flags, self.folder))

    def mcp_servers(self) -> dict:
        from .mcp import servers_here
        return servers_here(self.cfg.mcp, self.folder)

    def mcp_prompt(self, name: str, arg: str) -> None:
        """`/server:prompt ARGS`: the server's messages join the conversation, the last one sent."""
        from .mcp.prompts import expand
        messages = expand(self.mcp_servers(), name, arg, self.toolbox.ctx)
        if not messages or messages[-1]["role"] != "user":
            raise ToolError(f"{name}: the server's prompt does not end with a message of yours to send")
        self.messages += messages[:-1]
        self.turn(messages[-1]["content"])

    # --- the conversation on disk ----------------------------------------------------------

    def load(self, key: str) -> None:
        try:
            if key == self.autosave.id:  # read by autosave itself, so that its next save appends
                found, messages = key, self.autosave.resume(self.say)
            else:
                found, messages = transcripts.load(key, self.say)
        except transcripts.SessionError:
            if key == self.autosave.id and not transcripts.exists(key):
                raise transcripts.SessionError(transcripts.NO_PROJECT_SESSION) from None
            raise
        if found == self.autosave.id:
            self.autosave.adopt()
        self.messages[:] = [self.system()] + [m for m in messages if m.get("role") != "system"]
        self.changed = True
        self.save_auto()
        self.say(f"loaded {found}: {transcripts.count(self.messages)} messages")

    def save_auto(self) -> None:
        if not self.changed:
            return
        warning = self.autosave(self.messages, model=self.cfg.model, secret=self.cfg.api_key)
        if warning:
            self.render(Error(message=warning))

    # --- controlled runs: /pause (Ctrl+C, the page's Stop) pauses one -----------

    def controlled(self, work: Callable[[threading.Event], tuple]) -> None:
        """Drive a run: in a background thread (the terminal reads on, so /pause reaches it), or
        here (the page, whose input already works in a thread; its Stop sets the same event)."""
        self.run_pause.clear()
        self.run_active.set()
        if not self.background_runs:
            return self.drive_run(work)
        self.run_job = threading.Thread(target=self.drive_run, args=(work,), name="bantam-run", daemon=True)
        self.run_job.start()

    def drive_run(self, work: Callable[[threading.Event], tuple]) -> None:
        try:
            try:
                outcome = work(self.run_pause)
                self.last_run = outcome[0]
            finally:
                self.run_active.clear()  # before the outcome shows: whoever reads it may /resume at once
        except BantamError as e:
            if not self.background_runs:
                raise
            return self.render(Error(message=str(e)))
        self.run_outcome(outcome)

    def run_outcome(self, outcome: tuple) -> None:
        self.last_run, answer, line = outcome
        if answer:
            self.show(terminal_safe(answer))  # the model's text: no escape sequences
        self.say(line)

    def end_run(self) -> None:
        """On the way out: a working run is paused at its next step (resumable), then waited for."""
        if self.run_job is None or not self.run_job.is_alive():
            return
        slash.pause(self, "")
        self.run_job.join()

    # --- output ----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.render(Notice(message=text))
