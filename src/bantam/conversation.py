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

import functools
import os
import threading
import time
from pathlib import Path
from typing import Callable

from . import __version__, compact, config, session, transcripts, undo
from .approval import YES_NO, Approvals, Read, boundary_words, remembered, terminal_ask
from .commands import trust_project
from .errors import BantamError, ConfigError, LimitReached, ProviderError, ToolError
from .events import Done, Error, Event, Notice, Usage, quiet
from .envpolicy import user_env
from .mcpserve.cli import mcp_command
from .providers import ModelFacts, context_window_later
from .render import Renderer
from .sanitize import terminal_safe
from .tools.shell import run_shell
from .undo.restore import shown

COMPACT_AT = 0.6  # offer compaction when the context is this full
# The slash commands: /help prints this table, and `bantam acp` offers an editor the ones it runs
# (acp/commands.py). Each row: how it is typed, what it does.
COMMANDS: list[tuple[str, str]] = [
    ("/save [name]", "save the conversation (default name: this project's session) with a summary"),
    ("/continue, /cont", "load this project's session"),
    ("/list", "saved sessions, newest first (* marks this project's)"),
    ("/load <id>", "load a session by id or unique prefix"),
    ("/compact", "summarise the conversation and continue from the summary"),
    ("/cfg <key> [value]", "show or set a configuration key (written to .bantam.cfg); /cfg lists them all"),
    ("/cfg --global <key> <value>", "set it in ~/.config/bantam/config, for every project"),
    ("/model [name]", "show or set the model"),
    ("/endpoint [url]", "show or set the API endpoint"),
    ("/models", "the endpoint's models, the current one marked with *"),
    ("/cost", "what this session has cost, when the model list gives prices (OpenRouter)"),
    ("/sandbox [off|workspace|read-only] [network on|off] [approval never|on-request|always] [forget]",
     "the boundary around the model's commands, and when you are asked; with words, change them for this "
     "session (nothing is written); forget: drop your \"always\" answers"),
    ("!<command>", "run a shell command; its output is not added to the conversation"),
    ("/run GOAL", "start a controlled run in ./runs/ (options: --workspace DIR --config FILE --scripted FILE)"),
    ("/fix ERROR", "a correction run on the last run's goal and workspace"),
    ("/pause", "pause the working run at its next step (so does Ctrl+C); /resume continues"),
    ("/resume [--retry-blocked]", "continue the last run"),
    ("/status", "the last run's progress, budgets and completion state"),
    ("/files", "the files in the last run's workspace"),
    ("/mcp [trust]", "MCP servers, their state and tools; trust: the same as /trust"),
    ("/server:prompt [ARGS]", "an MCP server's prompt, sent as your message (/help lists those of running servers)"),
    ("@server:uri", "in a message: an MCP server's resource, read and attached to it"),
    ("/trust", "trust this project's files as they are now (.bantam.cfg, .mcp.json, tools folder)"),
    ("/undo [N]", "take back the file changes of the last N turns (default 1), shell commands' included"),
    ("/rewind [N]", "the same, and the conversation goes back to before those turns"),
    ("/redo [N]", "reapply the file changes the last /undo or /rewind took back, if none changed since"),
    ("/clear", "start a new conversation"),
    ("/help", "this list"),
    ("/quit", "exit (so does Ctrl+D on an empty line)"),
]
HELP = "\n".join(f"{usage:<20}{what}" if len(usage) <= 18 else f"{usage}  {what}" for usage, what in COMMANDS) \
    + "\nEnter sends, Ctrl+J starts a new line, Ctrl+C clears the line or stops a running turn."

# What may be typed while a controlled run works in the background; anything else waits for it.
WHILE_A_RUN_WORKS = ("/pause", "/status", "/files", "/help", "/quit")
ALIASES = {"/cont": "continue"}

MakeRenderer = Callable[[config.Config, ModelFacts], Renderer]


class Conversation:
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
        self.cmd_sandbox("")
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
        if name == "/quit":
            return False
        handler: Callable[[str], None] | None = getattr(self, "cmd_" + ALIASES.get(name, name[1:]), None)
        if ":" in name:  # /server:prompt
            handler = functools.partial(self.mcp_prompt, name)
        if handler is None:
            self.say(f"unknown command {name}; /help lists the commands")
            return True
        try:
            handler(arg)
        except KeyboardInterrupt:
            self.render.reset()
            self.say("interrupted")
        except BantamError as e:
            self.render(Error(message=str(e)))
        return True

    def cmd_help(self, arg: str) -> None:
        from .mcp.prompts import commands
        prompts = commands(self.mcp_servers())
        self.show("\n".join([HELP, *(f"{usage}  {what}" for usage, what in prompts)]))

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

    def cmd_mcp(self, arg: str) -> None:
        if arg == "trust":
            return self.cmd_trust("")
        self.show(mcp_command(arg, self.cfg, self.toolbox))

    def cmd_trust(self, arg: str) -> None:
        self.show(trust_project(self.folder))
        self.trusted()

    def trusted(self) -> None:
        """The project was just trusted: its boundary keys apply and its MCP servers start."""
        self.configure(session.load_config(self.flags, self.folder))
        self.cmd_sandbox("")
        self.show(mcp_command("", self.cfg, self.toolbox))

    def cmd_undo(self, arg: str) -> None:
        self.take_back(arg, rewind=False)

    def cmd_rewind(self, arg: str) -> None:
        self.take_back(arg, rewind=True)

    def take_back(self, arg: str, rewind: bool) -> None:
        """/undo N and /rewind N: show what will be restored and removed, ask, then do it. A file
        changed by hand since the turn is overwritten only when the person says so."""
        word = "rewind" if rewind else "undo"
        p = self.shown_plan(word, arg, undo.plan)
        if p is None:
            return None
        question = ("overwrite your own changes to the files above too? (no: keep them, undo the rest) [y/N] "
                    if p.conflicts else f"{word} this? [Y/n] ")
        try:
            answer = self.ask(question, YES_NO).strip().lower()
        except (KeyboardInterrupt, EOFError):
            return self.say("nothing was changed")
        if not p.conflicts and answer not in ("", "y", "yes"):
            return self.say("nothing was changed")
        force = answer in ("y", "yes")
        try:
            left = undo.apply(p, force=force)
        except undo.UndoError as e:
            return self.say(f"nothing was changed: {e}")
        for path in [] if force else p.conflicts:
            self.say(f"kept your changes: {shown(path)}")
        for path in left:
            self.say(f"not restored: {path}")
        if rewind:
            del self.messages[1 + p.cut:]  # the system prompt stays; the model forgets those turns
            self.changed = True
            self.save_auto()
            self.say(f"undone; the conversation is back before that turn ({transcripts.count(self.messages)} messages)")
        else:
            self.say("undone (the conversation still remembers those turns; /rewind forgets them too)")

    def cmd_redo(self, arg: str) -> None:
        """/redo N: the file changes the last /undo or /rewind took back, reapplied when none of
        those files changed since. Only files: the conversation stays as it is."""
        p = self.shown_plan("redo", arg, undo.plan_redo)
        if p is None:
            return None
        try:
            if self.ask("redo this? [Y/n] ", YES_NO).strip().lower() not in ("", "y", "yes"):
                return self.say("nothing was changed")
            left = undo.apply(p)
        except (KeyboardInterrupt, EOFError):
            return self.say("nothing was changed")
        except undo.UndoError as e:
            return self.say(f"nothing was changed: {e}")
        for path in left:
            self.say(f"not restored: {path}")
        return self.say("redone (the files only; the conversation stays as it is)")

    def shown_plan(self, word: str, arg: str, make: Callable[[str, int], undo.Plan]) -> undo.Plan | None:
        """/undo, /rewind and /redo's plan for N turns (`arg`), shown; None when there is none."""
        if arg.strip() and not (arg.strip().isdigit() and int(arg) > 0):
            self.say(f"usage: /{word} [N]  (N turns, default 1)")
            return None
        try:
            p = make(self.undo_key(), int(arg or 1))
        except undo.UndoError as e:
            self.say(str(e))
            return None
        self.show("\n".join(p.lines()))
        return p

    def cmd_cost(self, arg: str) -> None:
        spent = getattr(self.render, "session_cost", 0.0)
        priced = self.window.cost(Usage()) is not None
        self.say(f"this session: ${spent:.4f}" if priced else
                 "no prices known: the endpoint's model list gives none for this model")

    def cmd_sandbox(self, arg: str) -> None:
        """/sandbox: the boundary in force; with words, the person's own change for this session
        (the flags' layer, above every file, so no project file's trust is in question), said back
        as it took effect. Nothing is written: /cfg writes a key to a file."""
        keys, forget = boundary_words(arg)
        if forget:
            self.approvals.allowed.clear()
        if keys:
            self.flags.update(keys)  # a /model or /trust later rebuilds with them still
            self.configure(session.load_config(self.flags, self.folder))
        scope = "for this session (nothing written): " if keys else ""
        self.say(f"{scope}{self.session.sandbox().describe()}; approval={self.cfg.approval}")
        if arg.strip() or self.approvals.allowed:
            self.say(f"your \"always\" answers this session: {remembered(self.approvals) or 'none'}")

    def cmd_models(self, arg: str) -> None:
        for name in self.provider.list_models():
            self.show(f"{'*' if name == self.cfg.model else ' '} {name}")

    def cmd_model(self, arg: str) -> None:
        self.cmd_cfg(f"model {arg}")

    def cmd_endpoint(self, arg: str) -> None:
        self.cmd_cfg(f"endpoint {arg}")

    def cmd_cfg(self, arg: str) -> None:
        user = arg.startswith("--global ")  # into ~/.config/bantam/config, for every project
        key, _, value = arg.removeprefix("--global ").strip().partition(" ")
        if not key:
            aliases = [f"{config.ALIAS}{name}" for name in self.cfg.aliases]
            sent = [n if n in config.REQUEST_FIELDS else f"{config.REQUEST}{n}" for n in self.cfg.forward]
            for name in [*config.known_keys(), *aliases, *sent]:
                self.show(f"{name}={self.shown(name)}")
            return
        if not value.strip():
            if not config.is_key(key):
                return self.say(config.unknown_key(key, outcome="not set"))  # with the nearest key
            return self.show(f"{key}={self.shown(key)}")
        path = config.write_value(key, value.strip(), self.folder, user=user)
        self.flags.pop(key, None)  # the value just set must win over a flag given at start
        boundary = config.ALIASES.get(key, key) in config.BOUNDARY_KEYS
        if boundary:  # the person's own value holds in this session, whatever the file's trust
            self.flags[key] = value.strip()
        self.configure(session.load_config(self.flags, self.folder))
        later = self.later(key, path) if boundary and not user else ""
        self.say(f"{key}={self.shown(key)} (written to {path if user else path.name}{later})")
        if self.cfg.warning:  # e.g. a project endpoint your environment's key is not sent to
            self.say(f"warning: {self.cfg.warning}")

    def later(self, key: str, path: Path) -> str:
        """What boundary key `key`, just written to the project's file, does at the next start
        when that is nothing: a file not trusted as it is now (an edit, this one too, asks again)
        may narrow the boundary, never widen it."""
        ignored: list[str] = []
        config.layers({}, self.folder, os.environ, ignored)  # each entry: "FILE:LINE KEY=VALUE"
        if not any(f" {key}=" in entry for entry in ignored):
            return ""
        return f"; in force for this session; {path.name} is not trusted as it is now, so a later start ignores it until /trust"

    def shown(self, key: str) -> str:
        """`key`'s value as /cfg shows it: any name /cfg accepts (alias.NAME too), secrets as ***."""
        value = config.value_of(self.cfg, key)
        if config.secret(config.ALIASES.get(key, key), value):
            return "***" if value else ""
        if isinstance(value, tuple):
            return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
        return "" if value is None else str(value).lower() if isinstance(value, bool) else f"{value:g}" \
            if isinstance(value, float) else str(value)

    # --- the conversation on disk ----------------------------------------------------------

    def cmd_clear(self, arg: str) -> None:
        self.messages[:] = [self.system()]
        self.changed = True
        self.save_auto()
        self.say("conversation cleared")

    def cmd_save(self, arg: str) -> None:
        if not arg and self.autosave.claim():  # this process cannot save the project's session at all
            return self.say(self.autosave.other)
        name = transcripts.check_id(arg) if arg else self.autosave.name  # its own when another bantam holds it
        try:
            summary = compact.ask(self.provider, self.messages, compact.SUMMARY_PROMPT,
                                  self.cfg.retry_delays, quiet(self.render))
        except ProviderError as e:
            summary = ""
            self.say(f"no summary from the model ({e}); using the first request")
        path = transcripts.save(name, self.messages, summary=" ".join(summary.split())[:200],
                             model=self.cfg.model, secret=self.cfg.api_key, project=self.folder)
        if name == self.autosave.name:
            self.autosave.adopt()
        self.say(f"saved {transcripts.count(self.messages)} messages to {path}")

    def cmd_continue(self, arg: str) -> None:
        self.load(self.autosave.id)

    def cmd_load(self, arg: str) -> None:
        if not arg:
            raise ConfigError("usage: /load <id or unique prefix>; /list shows the ids")
        self.load(arg)

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

    def cmd_list(self, arg: str) -> None:
        rows = transcripts.listing()
        if not rows:
            self.show(transcripts.NO_SESSIONS)
        for s in rows:
            mark = "*" if s.id == self.autosave.id else " "
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated))
            what = f"unreadable: {s.problem}" if s.problem else f"{s.count:4d} msgs  {s.summary}"
            self.show(f"{mark} {s.id}  {when}  {what}")

    def cmd_compact(self, arg: str) -> None:
        before = transcripts.count(self.messages)
        if before <= 1:
            return self.say("nothing to compact yet")
        self.say("compacting the conversation: the model is asked for a summary (Ctrl+C stops it)")
        compact.compact(self.provider, self.messages, self.cfg.retry_delays, quiet(self.render),
                        str(self.folder))
        self.changed = True
        self.save_auto()
        self.say(f"compacted {before} messages into {transcripts.count(self.messages)}")

    def save_auto(self) -> None:
        if not self.changed:
            return
        warning = self.autosave(self.messages, model=self.cfg.model, secret=self.cfg.api_key)
        if warning:
            self.render(Error(message=warning))

    # --- controlled runs: /pause (Ctrl+C, the page's Stop) pauses one -----------

    def cmd_run(self, arg: str) -> None:
        from .runs import chat
        self.controlled(lambda pause: chat.start(self.flags, self.folder, arg, self.render, pause))

    def cmd_fix(self, arg: str) -> None:
        from .runs import chat
        self.controlled(lambda pause: chat.fix(self.flags, self.folder, self.last_run, arg, self.render, pause))

    def cmd_resume(self, arg: str) -> None:
        from .runs import chat
        self.controlled(lambda pause: chat.resume(self.flags, self.folder, self.last_run, arg, self.render, pause))

    def cmd_pause(self, arg: str) -> None:
        from .runs.chat import NOT_RUNNING, PAUSING
        if not self.run_active.is_set():
            return self.say(NOT_RUNNING)
        self.run_pause.set()
        self.say(PAUSING)

    def cmd_status(self, arg: str) -> None:
        from .runs import chat
        self.show(chat.status(self.folder, self.last_run))

    def cmd_files(self, arg: str) -> None:
        from .runs import chat
        self.show(chat.files(self.folder, self.last_run))

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
        self.cmd_pause("")
        self.run_job.join()

    # --- output ----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.render(Notice(message=text))
