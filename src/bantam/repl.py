"""The interactive front end: the line editor, slash commands, sessions and compaction.

It drives the same loop, provider and tools as the one-shot mode; everything here is wiring.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable

from . import __version__, compact, config, loop, sessions
from .approval import Approvals, terminal_ask
from .errors import BantamError, ConfigError, LimitReached, ProviderError
from .events import Done, Error, Notice, Usage, quiet
from .lineeditor import Reader, make_reader
from .commands import ask_trust, trust_project
from .mcp.cli import mcp_command
from .prompt import system_prompt
from .providers import context_window_later, make_provider
from .render import make_renderer
from .sandbox import Sandbox
from .sanitize import terminal_safe
from .tools import ToolContext, make_toolbox
from .envpolicy import user_env
from .tools.shell import run_shell

COMPACT_AT = 0.6  # offer compaction when the context is this full (seed 001)
HELP = """\
/save [name]        save the conversation (default name: this project's session) with a summary
/continue, /cont    load this project's session
/list               saved sessions, newest first (* marks this project's)
/load <id>          load a session by id or unique prefix
/compact            summarise the conversation and continue from the summary
/cfg <key> [value]  show or set a configuration key (written to .bantam.cfg); /cfg lists them all
/cfg --global <key> <value>  set it in ~/.config/bantam/config, for every project
/model [name]       show or set the model
/endpoint [url]     show or set the API endpoint
/models             the endpoint's models, the current one marked with *
/cost               what this session has cost, when the model list gives prices (OpenRouter)
/sandbox            the boundary around the model's commands, and when you are asked
!<command>          run a shell command; its output is not added to the conversation
/run GOAL           start a controlled run in ./runs/ (options: --workspace DIR --config FILE --scripted FILE)
/fix ERROR          a correction run on the last run's goal and workspace
/pause              pause the working run at its next step (so does Ctrl+C); /resume continues
/resume [--retry-blocked]  continue the last run
/status             the last run's progress, budgets and completion state
/files              the files in the last run's workspace
/mcp [trust]        MCP servers, their state and tools; trust: the same as /trust
/trust              trust this project's files as they are now (.bantam.cfg, .mcp.json, tools folder)
/clear              start a new conversation
/help               this list
/quit               exit (so does Ctrl+D on an empty line)
Enter sends, Ctrl+J starts a new line, Ctrl+C clears the line or stops a running turn."""


# What may be typed while a controlled run works in the background; anything else waits for it.
WHILE_A_RUN_WORKS = ("/pause", "/status", "/files", "/help", "/quit")


class Repl:
    continue_hint = "/continue resumes it"
    shell_cancel: threading.Event | None = None  # a front end's Stop for `!command` (the web page)
    background_runs = True  # a controlled run works in a thread, so /pause can reach it

    def __init__(self, flags: dict[str, str], read: Reader | None = None,
                 out=sys.stdout, err=sys.stderr):
        self.flags = dict(flags)
        self.read = read or make_reader()
        self.out, self.err = out, err
        self.autosave = sessions.Autosave()
        self.changed = False  # only a conversation this process touched is autosaved
        self.last_run = None  # the controlled run this session started or resumed
        self.run_pause = threading.Event()   # set: the working run pauses at its next safe point
        self.run_active = threading.Event()  # set while a controlled run works
        self.run_job: threading.Thread | None = None
        self.messages: list[dict] = []
        # the person at this terminal approves; "always" answers last for the session
        self.approvals = Approvals(terminal_ask(lambda q: self.read(q), self.say))
        self.configure(config.load(self.flags))
        self.messages = [self.system()]

    def configure(self, cfg: config.Config) -> None:
        self.cfg = cfg
        self.provider = make_provider(cfg)
        self.window = context_window_later(self.provider, cfg)
        spent = getattr(getattr(self, "render", None), "session_cost", 0.0)
        self.render = make_renderer(cfg, False, self.out, self.err, self.window)
        if hasattr(self.render, "session_cost"):
            self.render.session_cost = spent  # a new model or endpoint: the session's cost goes on
        self.toolbox = make_toolbox(cfg.tools, ToolContext(cfg, self.provider, self.system()["content"], self.render,
                                                           approvals=self.approvals))
        if self.messages:
            self.messages[0] = self.system()

    def system(self) -> dict:
        return {"role": "system", "content": system_prompt(self.cfg, can_ask=self.approvals.ask is not None)}

    # --- the main loop ------------------------------------------------------------------------

    def greet(self) -> None:
        where = "this machine" if self.cfg.provider == "local" else self.cfg.endpoint
        self.say(f"bantam {__version__} · {self.provider.model} at {where} · /help for commands")
        if self.cfg.embedded:
            self.say(config.EMBEDDED_NOTICE)
        self.cmd_sandbox("")
        if sessions.exists(self.autosave.id):
            self.say("this project has a saved conversation: " + self.continue_hint)

    def run(self) -> int:
        self.greet()
        if ask_trust(self.read):  # a project's files would change the boundary: ask first
            self.trusted()
        while True:
            try:
                line = self.read("> ")
            except KeyboardInterrupt:
                if self.run_active.is_set():  # Ctrl+C while a run works: the same as /pause
                    self.cmd_pause("")
                continue
            except EOFError:
                break
            if line.strip() and not self.handle(line.strip() if line.startswith(("/", "!")) else line):
                break
        self.end_run()
        self.save_auto()
        return 0

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
        self.turn(line)
        return True

    def turn(self, prompt: str) -> None:
        self.messages.append({"role": "user", "content": prompt})
        self.changed = True
        try:
            done = loop.run(self.provider, self.messages, self.toolbox, loop.Limits.from_config(self.cfg),
                            self.render, lambda _: self.save_auto())  # appended after every step
            self.render(Done(text=done.text, usage=done.usage))
        except KeyboardInterrupt:
            self.render.reset()
            self.say("interrupted")
            return self.save_auto()
        except (ProviderError, LimitReached) as e:
            self.render(Error(message=str(e)))
            return self.save_auto()
        self.save_auto()
        self.offer_compaction(done.usage.context_tokens)

    def offer_compaction(self, tokens: int) -> None:
        window = self.window()
        if not tokens or tokens < COMPACT_AT * window:
            return
        question = (f"Context usage is at {100 * tokens / window:.1f}% ({tokens} / {window} tokens). "
                    "Compact conversation? [Y/n]: ")
        try:
            answer = self.read(question).strip().lower()
        except (KeyboardInterrupt, EOFError):
            return
        if answer in ("", "y", "yes"):
            self.cmd_compact("")

    # --- commands -----------------------------------------------------------------------------

    def command(self, name: str, arg: str) -> bool:
        if name == "/quit":
            return False
        handler: Callable[[str], None] | None = getattr(self, "cmd_" + ALIASES.get(name, name[1:]), None)
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

    def cmd_mcp(self, arg: str) -> None:
        if arg == "trust":
            return self.cmd_trust("")
        self.print(mcp_command(arg, self.cfg, self.toolbox))

    def cmd_trust(self, arg: str) -> None:
        self.print(trust_project("."))
        self.trusted()

    def trusted(self) -> None:
        """The project was just trusted: its boundary keys apply and its MCP servers start."""
        self.configure(config.load(self.flags))
        self.cmd_sandbox("")
        self.print(mcp_command("", self.cfg, self.toolbox))

    def cmd_help(self, arg: str) -> None:
        self.print(HELP)

    def cmd_cost(self, arg: str) -> None:
        spent = getattr(self.render, "session_cost", 0.0)
        priced = self.window.cost(Usage()) is not None
        self.say(f"this session: ${spent:.4f}" if priced else
                 "no prices known: the endpoint's model list gives none for this model")

    def cmd_clear(self, arg: str) -> None:
        self.messages[:] = [self.system()]
        self.changed = True
        self.save_auto()
        self.say("conversation cleared")

    def cmd_save(self, arg: str) -> None:
        name = sessions.check_id(arg) if arg else self.autosave.id
        try:
            summary = compact.ask(self.provider, self.messages, compact.SUMMARY_PROMPT,
                                  self.cfg.retry_delays, quiet(self.render))
        except ProviderError as e:
            summary = ""
            self.say(f"no summary from the model ({e}); using the first request")
        path = sessions.save(name, self.messages, summary=" ".join(summary.split())[:200],
                             model=self.cfg.model, secret=self.cfg.api_key)
        if name == self.autosave.id:
            self.autosave.adopt()
        self.say(f"saved {len(self.messages)} messages to {path}")

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
                found, messages = sessions.load(key, self.say)
        except sessions.SessionError as e:
            if key == self.autosave.id and "no session" in str(e):
                raise sessions.SessionError("no saved conversation for this project yet") from None
            raise
        if found == self.autosave.id:
            self.autosave.adopt()
        self.messages[:] = [self.system()] + [m for m in messages if m.get("role") != "system"]
        self.changed = True
        self.save_auto()
        self.say(f"loaded {found}: {len(self.messages)} messages")

    def cmd_list(self, arg: str) -> None:
        import time
        rows = sessions.listing()
        if not rows:
            self.print("no saved sessions")
        for s in rows:
            mark = "*" if s.id == self.autosave.id else " "
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated))
            what = f"unreadable: {s.problem}" if s.problem else f"{s.count:4d} msgs  {s.summary}"
            self.print(f"{mark} {s.id}  {when}  {what}")

    def cmd_compact(self, arg: str) -> None:
        before = len(self.messages)
        if before <= 2:
            return self.say("nothing to compact yet")
        compact.compact(self.provider, self.messages, self.cfg.retry_delays, quiet(self.render))
        self.changed = True
        self.save_auto()
        self.say(f"compacted {before} messages into {len(self.messages)}")

    def cmd_cfg(self, arg: str) -> None:
        user = arg.startswith("--global ")  # into ~/.config/bantam/config, for every project
        key, _, value = arg.removeprefix("--global ").strip().partition(" ")
        if not key:
            for name in config.known_keys():
                self.print(f"{name}={self.shown(name)}")
            for name, v in self.cfg.forward.items():
                self.print(f"{name}={v}")
            return
        if not value.strip():
            return self.print(f"{key}={self.shown(key)}")
        path = config.write_value(key, value.strip(), user=user)
        self.flags.pop(key, None)  # the value just set must win over a flag given at start
        self.configure(config.load(self.flags))
        self.say(f"{key}={self.shown(key)} (written to {path if user else path.name})")
        if self.cfg.warning:  # e.g. a project endpoint your environment's key is not sent to
            self.say(f"warning: {self.cfg.warning}")

    def cmd_model(self, arg: str) -> None:
        self.cmd_cfg(f"model {arg}")

    def cmd_endpoint(self, arg: str) -> None:
        self.cmd_cfg(f"endpoint {arg}")

    def cmd_sandbox(self, arg: str) -> None:
        self.say(f"{Sandbox.for_config(self.cfg).describe()}; approval={self.cfg.approval}")

    def cmd_models(self, arg: str) -> None:
        for name in self.provider.list_models():
            self.print(f"{'*' if name == self.cfg.model else ' '} {name}")

    # --- controlled runs (seed 002): in the background, /pause (or Ctrl+C) pauses one ------

    def cmd_run(self, arg: str) -> None:
        from .runs import chat
        self.controlled(lambda pause: chat.start(self.flags, arg, self.render, pause))

    def cmd_fix(self, arg: str) -> None:
        from .runs import chat
        self.controlled(lambda pause: chat.fix(self.flags, self.last_run, arg, self.render, pause))

    def cmd_resume(self, arg: str) -> None:
        from .runs import chat
        self.controlled(lambda pause: chat.resume(self.flags, self.last_run, arg, self.render, pause))

    def cmd_pause(self, arg: str) -> None:
        from .runs.chat import NOT_RUNNING, PAUSING
        if not self.run_active.is_set():
            return self.say(NOT_RUNNING)
        self.run_pause.set()
        self.say(PAUSING)

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

    def end_run(self) -> None:
        """On the way out: a working run is paused at its next step (resumable), then waited for."""
        if self.run_job is None or not self.run_job.is_alive():
            return
        self.cmd_pause("")
        self.run_job.join()

    def cmd_status(self, arg: str) -> None:
        from .runs import chat
        self.print(chat.status(self.last_run))

    def cmd_files(self, arg: str) -> None:
        from .runs import chat
        self.print(chat.files(self.last_run))

    def run_outcome(self, outcome: tuple) -> None:
        self.last_run, answer, line = outcome
        if answer:
            self.print(terminal_safe(answer))  # the model's text: no escape sequences
        self.say(line)

    def shown(self, key: str) -> str:
        if key == "api_key":
            return "***" if self.cfg.api_key else ""
        value = getattr(self.cfg, key, self.cfg.forward.get(key, ""))
        if isinstance(value, tuple):
            return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
        return "" if value is None else str(value).lower() if isinstance(value, bool) else f"{value:g}" \
            if isinstance(value, float) else str(value)

    def shell(self, command: str) -> None:
        if not command:
            return self.say("usage: !<command>")
        try:
            result = run_shell(command, self.cfg.shell_timeout, self.cfg.tool_output_limit, self.shell_cancel,
                               env=user_env())  # the user's own command: the user's environment
        except KeyboardInterrupt:
            return self.say("interrupted")
        self.print(result.output.rstrip("\n"))
        self.say(f"exit: {result.exit_code}")

    # --- output and persistence ---------------------------------------------------------------

    def save_auto(self) -> None:
        if not self.changed:
            return
        warning = self.autosave(self.messages, model=self.cfg.model, secret=self.cfg.api_key)
        if warning:
            self.render(Error(message=warning))

    def say(self, text: str) -> None:
        self.render(Notice(message=text))

    def print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


ALIASES = {"/cont": "continue"}


def run_repl(flags: dict[str, str], resume: bool = False) -> int:
    repl = Repl(flags)
    if resume:  # `bantam -c`: as /continue, before the first prompt
        repl.load(repl.autosave.id)
    return repl.run()
