"""The slash commands: one table, run by every front end a person types into (the terminal and
the browser through conversation.Conversation, an editor through acp.conversation.EditorSession).

    /help lists a chat's commands; an editor is offered its own (`editor`) in its command menu.

A command is a function of the chat it was typed in and the rest of the line. What it needs of a
chat is the Chat protocol: the session and its conversation, bantam's words (`say`) and a
listing (`show`), the person's yes or no (`confirm`; an editor has nobody to ask, and takes the
question's default: --force says yes to overwriting), keeping a changed conversation (`keep`),
and a new session with keys chosen for this session alone (`choose`: /model, /endpoint, /sandbox
words, and after /trust). The terminal's own commands (saving and loading, /cfg, /cost and the
controlled runs) need its conversation's saving and run-driving: they take a TerminalChat.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from . import compact, config, transcripts, undo
from .approval import boundary_words, remembered
from .errors import ConfigError, ProviderError
from .events import Usage, quiet
from .undo.restore import shown

if TYPE_CHECKING:
    from .approval import Approvals
    from .render import Renderer
    from .session import Session
    from .transcripts import Autosave


class Chat(Protocol):
    """What a slash command needs of the chat it was typed in."""
    folder: Path
    messages: list[dict]
    session: Session
    approvals: Approvals
    commands: list[Command]          # what this chat runs and /help lists (TERMINAL, EDITOR)
    keys: str                        # what /help says of typing (the keys), or ""

    @property
    def cfg(self) -> config.Config: ...

    @property
    def session_id(self) -> str: ...  # the saved conversation's id

    def say(self, text: str) -> None: ...

    def show(self, text: str) -> None: ...

    def confirm(self, question: str, default: bool) -> bool:
        """The person's yes or no; KeyboardInterrupt or EOFError when they gave none."""
        ...

    def keep(self) -> None: ...  # the conversation changed: save it

    def undo_key(self) -> str: ...

    def choose(self, keys: dict[str, str]) -> None:
        """A new session, with `keys` set for this session (above every file); {}: the files again."""
        ...

    def mcp_servers(self) -> dict: ...


class TerminalChat(Chat, Protocol):
    """A chat that saves its conversation as the project's session and drives controlled runs."""
    flags: dict[str, str]
    autosave: Autosave
    render: Renderer
    window: Any
    last_run: Path | None
    run_active: Any
    run_pause: Any

    def load(self, key: str) -> None: ...

    def configure(self, cfg: config.Config) -> None: ...

    def controlled(self, work: Callable[[Any], tuple]) -> None: ...


Handler = Callable[[Any, str], None]


@dataclass(frozen=True)
class Command:
    usage: str                  # how it is typed, as /help shows it
    what: str                   # what it does
    run: Handler | None = None  # None: a line of /help only (typed otherwise: !, @, /server:prompt)
    editor: bool = False        # an editor session runs it too
    aliases: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.usage.removeprefix("/").split()[0].rstrip(",")

    @property
    def hint(self) -> str:
        """What follows the name, as an editor shows it in its input."""
        return self.usage.partition(" ")[2]


def find(commands: list[Command], name: str) -> Command | None:
    """The command `/name` (or an alias of it) among `commands`, if it is one to run."""
    name = name.removeprefix("/")
    return next((c for c in commands if c.run is not None and name in (c.name, *c.aliases)), None)


def run(chat: Chat, name: str, arg: str) -> bool:
    """Run `/name arg` in `chat`; False when it is none of the chat's commands."""
    command = find(chat.commands, name)
    if command is None or command.run is None:
        return False
    command.run(chat, arg.strip())
    return True


# --- every chat's ------------------------------------------------------------------------------

def help_(chat: Chat, arg: str) -> None:
    from .mcp.prompts import commands as prompts
    rows = [(c.usage, c.what) for c in chat.commands] + prompts(chat.mcp_servers())
    lines = [f"{usage:<20}{what}" if len(usage) <= 18 else f"{usage}  {what}" for usage, what in rows]
    chat.show("\n".join(lines + ([chat.keys] if chat.keys else [])))


def listing(chat: Chat, arg: str) -> None:
    rows = transcripts.listing()
    lines = []
    for s in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated))
        what = f"unreadable: {s.problem}" if s.problem else f"{s.count:4d} msgs  {s.summary}"
        lines.append(f"{'*' if s.id == chat.session_id else ' '} {s.id}  {when}  {what}")
    chat.show("\n".join(lines) or transcripts.NO_SESSIONS)


def clear(chat: Chat, arg: str) -> None:
    chat.messages[:] = chat.session.messages()
    chat.keep()
    chat.say("conversation cleared")


def compact_now(chat: Chat, arg: str) -> None:
    before = transcripts.count(chat.messages)
    if before <= 1:
        return chat.say("nothing to compact yet")
    chat.say("compacting the conversation: the model is asked for a summary (stopping a turn stops it)")
    assert chat.session.provider is not None  # a chat's session is built with a model
    compact.compact(chat.session.provider, chat.messages, chat.cfg.retry_delays,
                    quiet(chat.session.front.on_event), str(chat.folder))
    chat.keep()
    return chat.say(f"compacted {before} messages into {transcripts.count(chat.messages)}")


def choose_or_show(chat: Chat, arg: str, key: str) -> None:
    """/model and /endpoint: with a value, chosen for this session (nothing written); said back."""
    if arg:
        chat.choose({key: arg})
    chat.say(f"{key}: {getattr(chat.cfg, key)}" + (" (for this session)" if arg else ""))


def models(chat: Chat, arg: str) -> None:
    assert chat.session.provider is not None
    chat.show("\n".join(f"{'*' if name == chat.cfg.model else ' '} {name}"
                        for name in chat.session.provider.list_models()))


def sandbox(chat: Chat, arg: str) -> None:
    """/sandbox: the boundary in force; with words, the person's own change for this session
    (the flags' layer, above every file, so no project file's trust is in question), said back
    as it took effect. Nothing is written: /cfg writes a key to a file."""
    keys, forget = boundary_words(arg)
    if forget:
        chat.approvals.allowed.clear()
    if keys:
        chat.choose(keys)
    scope = "for this session (nothing written): " if keys else ""
    chat.say(f"{scope}{chat.session.sandbox().describe()}; approval={chat.cfg.approval}")
    if arg.strip() or chat.approvals.allowed:
        chat.say(f"your \"always\" answers this session: {remembered(chat.approvals) or 'none'}")


def mcp(chat: Chat, arg: str) -> None:
    if arg == "trust":
        return trust(chat, "")
    from .mcpserve.cli import mcp_command
    return chat.show(mcp_command(arg, chat.cfg, chat.session.toolbox))


def trust(chat: Chat, arg: str) -> None:
    """Trust the project's files as they are now: its boundary keys apply and its MCP servers start."""
    from .commands import trust_project
    chat.show(trust_project(chat.folder))
    trusted(chat)


def trusted(chat: Chat) -> None:
    """After the project was trusted (by /trust, or when asked at start): a session under its
    files as they are now, its boundary said, and its MCP servers listed as they start."""
    from .mcpserve.cli import mcp_command
    chat.choose({})
    sandbox(chat, "")
    chat.show(mcp_command("", chat.cfg, chat.session.toolbox))


def take_back(chat: Chat, arg: str, word: str) -> None:
    """/undo, /rewind and /redo [N] [--force]: show what will be restored (and for /rewind, which
    turns the conversation forgets), ask, then do it. A file changed by hand since the turn (for
    /redo: since the undo) is overwritten only when the person says so, or with --force."""
    words = arg.split()
    force = "--force" in words
    count = [w for w in words if w != "--force"]
    if len(count) > 1 or (count and not (count[0].isdigit() and int(count[0]) > 0)):
        return chat.say(f"usage: /{word} [N] [--force]  (N turns, default 1)")
    try:
        p = (undo.plan_redo if word == "redo" else undo.plan)(chat.undo_key(), int(count[0]) if count else 1)
    except undo.UndoError as e:
        return chat.say(str(e))
    chat.show("\n".join(p.lines()))
    try:
        if p.conflicts and not force:
            force = chat.confirm("overwrite your own changes to the files above too? "
                                 f"(no: keep them, {word} the rest) [y/N] ", False)
        elif not force and not chat.confirm(f"{word} this? [Y/n] ", True):
            return chat.say("nothing was changed")
        left = undo.apply(p, force=force)
    except (KeyboardInterrupt, EOFError):
        return chat.say("nothing was changed")
    except undo.UndoError as e:
        return chat.say(f"nothing was changed: {e}")
    for path in [] if force else p.conflicts:
        chat.say(f"kept your changes: {shown(path)} (changed since; --force overwrites it)")
    for path in left:
        chat.say(f"not restored: {path}")
    if word == "rewind":
        del chat.messages[1 + p.cut:]  # the system prompt stays; the model forgets those turns
        chat.keep()
        return chat.say(f"undone; the conversation is back before that turn ({transcripts.count(chat.messages)} messages)")
    return chat.say("redone (the files only; the conversation stays as it is)" if word == "redo" else
                    "undone (the conversation still remembers those turns; /rewind forgets them too)")


# --- the terminal's (and the browser's) --------------------------------------------------------

def save(chat: TerminalChat, arg: str) -> None:
    if not arg and chat.autosave.claim():  # this process cannot save the project's session at all
        return chat.say(chat.autosave.other)
    name = transcripts.check_id(arg) if arg else chat.autosave.name  # its own when another bantam holds it
    assert chat.session.provider is not None  # a chat's session is built with a model
    try:
        summary = compact.ask(chat.session.provider, chat.messages, compact.SUMMARY_PROMPT,
                              chat.cfg.retry_delays, quiet(chat.render))
    except ProviderError as e:
        summary = ""
        chat.say(f"no summary from the model ({e}); using the first request")
    path = transcripts.save(name, chat.messages, summary=" ".join(summary.split())[:200],
                            model=chat.cfg.model, secret=chat.cfg.api_key, project=chat.folder)
    if name == chat.autosave.name:
        chat.autosave.adopt()
    return chat.say(f"saved {transcripts.count(chat.messages)} messages to {path}")


def load(chat: TerminalChat, arg: str) -> None:
    if not arg:
        raise ConfigError("usage: /load <id or unique prefix>; /list shows the ids")
    chat.load(arg)


def cfg(chat: TerminalChat, arg: str) -> None:
    """/cfg KEY VALUE writes the key to the project's .bantam.cfg (--global: the user's file); a
    boundary key holds in this session whatever the file's trust."""
    user = arg.startswith("--global ")  # into ~/.config/bantam/config, for every project
    key, _, value = arg.removeprefix("--global ").strip().partition(" ")
    if not key:
        aliases = [f"{config.ALIAS}{name}" for name in chat.cfg.aliases]
        sent = [n if n in config.REQUEST_FIELDS else f"{config.REQUEST}{n}" for n in chat.cfg.forward]
        return chat.show("\n".join(f"{name}={value_shown(chat, name)}"
                                   for name in [*config.known_keys(), *aliases, *sent]))
    if not value.strip():
        if not config.is_key(key):
            return chat.say(config.unknown_key(key, outcome="not set"))  # with the nearest key
        return chat.show(f"{key}={value_shown(chat, key)}")
    path = config.write_value(key, value.strip(), chat.folder, user=user)
    chat.flags.pop(key, None)  # the value just set must win over a flag given at start
    boundary = config.ALIASES.get(key, key) in config.BOUNDARY_KEYS
    if boundary:  # the person's own value holds in this session, whatever the file's trust
        chat.flags[key] = value.strip()
    chat.choose({})
    later = _later(chat, key, path) if boundary and not user else ""
    chat.say(f"{key}={value_shown(chat, key)} (written to {path if user else path.name}{later})")
    if chat.cfg.warning:  # e.g. a project endpoint your environment's key is not sent to
        chat.say(f"warning: {chat.cfg.warning}")
    return None


def _later(chat: Chat, key: str, path: Path) -> str:
    """What boundary key `key`, just written to the project's file, does at the next start
    when that is nothing: a file not trusted as it is now (an edit, this one too, asks again)
    may narrow the boundary, never widen it."""
    import os
    ignored: list[str] = []
    config.layers({}, chat.folder, os.environ, ignored)  # each entry: "FILE:LINE KEY=VALUE"
    if not any(f" {key}=" in entry for entry in ignored):
        return ""
    return f"; in force for this session; {path.name} is not trusted as it is now, so a later start ignores it until /trust"


def value_shown(chat: Chat, key: str) -> str:
    return config.shown(key, config.value_of(chat.cfg, key))


def cost(chat: TerminalChat, arg: str) -> None:
    spent = getattr(chat.render, "session_cost", 0.0)
    priced = chat.window.cost(Usage()) is not None
    chat.say(f"this session: ${spent:.4f}" if priced else
             "no prices known: the endpoint's model list gives none for this model")


def start_run(chat: TerminalChat, arg: str, how: str) -> None:
    """/run, /fix and /resume: a controlled run, driven by the chat (in its background, or here)."""
    from .runs import chat as runs
    if how == "run":
        chat.controlled(lambda pause: runs.start(chat.flags, chat.folder, arg, chat.render, pause))
    else:
        act = runs.fix if how == "fix" else runs.resume
        chat.controlled(lambda pause: act(chat.flags, chat.folder, chat.last_run, arg, chat.render, pause))


def pause(chat: TerminalChat, arg: str) -> None:
    from .runs.chat import NOT_RUNNING, PAUSING
    if not chat.run_active.is_set():
        return chat.say(NOT_RUNNING)
    chat.run_pause.set()
    return chat.say(PAUSING)


def run_status(chat: TerminalChat, arg: str) -> None:
    from .runs import chat as runs
    chat.show(runs.status(chat.folder, chat.last_run))


def run_files(chat: TerminalChat, arg: str) -> None:
    from .runs import chat as runs
    chat.show(runs.files(chat.folder, chat.last_run))


TABLE: list[Command] = [
    Command("/save [name]", "save the conversation (default name: this project's session) with a summary", save),
    Command("/continue, /cont", "load this project's session", lambda chat, arg: chat.load(chat.autosave.id),
            aliases=("cont",)),
    Command("/list", "saved sessions, newest first (* marks this one)", listing, editor=True),
    Command("/load <id>", "load a session by id or unique prefix", load),
    Command("/compact", "summarise the conversation and continue from the summary", compact_now, editor=True),
    Command("/cfg <key> [value]", "show or set a configuration key (written to .bantam.cfg); /cfg lists them all", cfg),
    Command("/cfg --global <key> <value>", "set it in ~/.config/bantam/config, for every project"),
    Command("/model [name]", "show the model, or choose one for this session",
            functools.partial(choose_or_show, key="model"), editor=True),
    Command("/endpoint [url]", "show the API endpoint, or choose one for this session",
            functools.partial(choose_or_show, key="endpoint"), editor=True),
    Command("/models", "the endpoint's models, the current one marked with *", models, editor=True),
    Command("/cost", "what this session has cost, when the model list gives prices (OpenRouter)", cost),
    Command("/sandbox [off|workspace|read-only] [network on|off] [approval never|on-request|always] [forget]",
            "the boundary around the model's commands, and when you are asked; with words, change them for this "
            "session (nothing is written); forget: drop your \"always\" answers", sandbox, editor=True),
    Command("!<command>", "run a shell command; its output is not added to the conversation"),
    Command("/run GOAL", "start a controlled run in ./runs/ (options: --workspace DIR --config FILE --scripted FILE)",
            functools.partial(start_run, how="run")),
    Command("/fix ERROR", "a correction run on the last run's goal and workspace", functools.partial(start_run, how="fix")),
    Command("/pause", "pause the working run at its next step (so does Ctrl+C); /resume continues", pause),
    Command("/resume [--retry-blocked]", "continue the last run", functools.partial(start_run, how="resume")),
    Command("/status", "the last run's progress, budgets and completion state", run_status),
    Command("/files", "the files in the last run's workspace", run_files),
    Command("/mcp [trust]", "MCP servers, their state and tools; trust: the same as /trust", mcp, editor=True),
    Command("/server:prompt [ARGS]", "an MCP server's prompt, sent as your message (/help lists those of running servers)",
            editor=True),
    Command("@server:uri", "in a message: an MCP server's resource, read and attached to it"),
    Command("/trust", "trust this project's files as they are now (.bantam.cfg, .mcp.json, tools folder)", trust,
            editor=True),
    Command("/undo [N] [--force]", "take back the file changes of the last N turns (default 1), shell commands' "
            "included; --force overwrites files you changed since", functools.partial(take_back, word="undo"),
            editor=True),
    Command("/rewind [N] [--force]", "take back the file changes of the last N turns and the conversation since",
            functools.partial(take_back, word="rewind"), editor=True),
    Command("/redo [N] [--force]", "reapply the file changes the last /undo or /rewind took back",
            functools.partial(take_back, word="redo"), editor=True),
    Command("/clear", "start a new conversation", clear, editor=True),
    Command("/help", "the commands and what they do", help_, editor=True),
    Command("/quit", "exit (so does Ctrl+D on an empty line)"),
]


# What each front end runs and lists, in the table's order.
TERMINAL: list[Command] = TABLE
EDITOR: list[Command] = [c for c in TABLE if c.editor]
