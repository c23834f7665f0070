"""Slash commands in the editor: the terminal's command table (conversation.COMMANDS: how each is
typed and what it does), offered through `available_commands_update` for those an editor
session runs, each run here by name.

The terminal's own handlers (conversation.Conversation.cmd_*) are methods of the terminal's
conversation, which owns its session, its autosave and a line reader to ask questions on; an
editor session has none of these, so it keeps its own handlers, one per name, for the same
commands. Not offered: the controlled runs' (/run, /fix, /pause, /resume, /status, /files: a
run works in the background of a terminal), saving and loading (/save, /load, /continue: the
editor's session list does that), /cfg and /endpoint (they write configuration files), /quit.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import compact, transcripts, undo
from ..errors import ProviderError
from ..events import quiet
from ..undo.restore import shown
from .rpc import INTERNAL_ERROR, RpcError

if TYPE_CHECKING:
    from .conversation import EditorSession

# The editor's hint and description where they differ from the terminal's: --force for the
# take-backs (nobody is asked here), and /sandbox only shows (the mode picker changes it).
HINTS = {"undo": "[N] [--force]: --force overwrites files you changed since",
         "rewind": "[N] [--force]: --force overwrites files you changed since",
         "redo": "[N] [--force]: --force overwrites files you changed since the undo", "sandbox": ""}
WHAT = {"rewind": "take back the file changes of the last N turns and the conversation before them",
        "help": "the commands bantam runs here",
        "sandbox": "the boundary around the model's commands, and when you are asked (the mode changes it)"}


def offer(chat: "EditorSession") -> None:
    """Tell the editor the commands this session offers when they changed: the terminal's it runs
    (offered), then `/server:prompt` for each prompt of its running MCP servers (the user's and
    the editor's), which come as the servers start, so this is asked again after every turn."""
    from ..mcp import servers_here
    from ..mcp.prompts import commands as prompt_rows
    found = offered()
    servers = {**servers_here(chat.cfg.mcp, chat.folder), **chat.servers()}
    for usage, what in prompt_rows(servers):
        name, _, hint = usage.removeprefix("/").partition(" ")
        found.append({"name": name, "description": what, **({"input": {"hint": hint}} if hint else {})})
    if found != chat.commands_offered:
        chat.commands_offered = found
        chat.update({"sessionUpdate": "available_commands_update", "availableCommands": found})


def offered() -> list[dict]:
    """The terminal's commands that run here, as the editor lists them (name, what, hint)."""
    from ..conversation import COMMANDS
    found: dict[str, dict] = {}
    for usage, what in COMMANDS:
        name, _, hint = usage.removeprefix("/").partition(" ")
        name = name.rstrip(",")
        if name in HANDLERS and name not in found:
            entry: dict = {"name": name, "description": WHAT.get(name, what)}
            hint = HINTS.get(name, hint)
            if hint:
                entry["input"] = {"hint": hint}
            found[name] = entry
    return list(found.values())


def run(chat: EditorSession, line: str) -> bool:
    """Run `line` when it is one of the offered commands; False when it is not (the model gets it)."""
    name, _, arg = line.strip().partition(" ")
    handler = HANDLERS.get(name.removeprefix("/")) if name.startswith("/") else None
    if handler is None:
        return False
    handler(chat, arg.strip())
    chat.save()
    return True


def clear(chat: EditorSession, arg: str) -> None:
    chat.messages[:] = chat.session.messages()
    chat.say("conversation cleared")


def compact_now(chat: EditorSession, arg: str) -> None:
    if len(chat.messages) <= 2:
        return chat.say("nothing to compact yet")
    before = len(chat.messages)
    assert chat.session.provider is not None
    try:
        compact.compact(chat.session.provider, chat.messages, chat.cfg.retry_delays,
                        quiet(chat.on_event), str(chat.folder))
    except ProviderError as e:
        raise RpcError(INTERNAL_ERROR, str(e)) from None
    chat.say(f"compacted {before} messages into {len(chat.messages)}")
    return None


def model(chat: EditorSession, arg: str) -> None:
    if arg:
        chat.set_model(arg)
        chat.show_options()
    chat.say(f"model: {chat.cfg.model}")


def models(chat: EditorSession, arg: str) -> None:
    assert chat.session.provider is not None
    chat.show("\n".join(f"{'*' if name == chat.cfg.model else ' '} {name}"
                        for name in chat.session.provider.list_models()))


def take_back(chat: EditorSession, arg: str, rewind: bool, redo: bool = False) -> None:
    """/undo [N] [--force], /rewind [N] [--force], /redo [N] [--force]: the editor shows the files
    as they change; a file changed by hand since the turn (for /redo: since the undo) is
    overwritten only with --force (nobody is asked)."""
    words = arg.split()
    force = "--force" in words
    count = [w for w in words if w != "--force"]
    if len(count) > 1 or (count and not (count[0].isdigit() and int(count[0]) > 0)):
        return chat.say(f"usage: /{'redo' if redo else 'rewind' if rewind else 'undo'} [N] [--force]")
    try:
        make = undo.plan_redo if redo else undo.plan
        p = make(undo.session_key(chat.id), int(count[0]) if count else 1)
        chat.say("\n".join(p.lines()))
        left = undo.apply(p, force=force)
    except undo.UndoError as e:
        return chat.say(str(e))
    for path in [] if force else p.conflicts:
        chat.say(f"kept your changes: {shown(path)} (changed since the turn; --force overwrites it)")
    for path in left:
        chat.say(f"not restored: {path}")
    if rewind:
        del chat.messages[1 + p.cut:]
    chat.say("redone" if redo else "undone" + (" and the conversation taken back before that turn" if rewind else ""))
    return None


def sandbox(chat: EditorSession, arg: str) -> None:
    chat.say(f"{chat.session.sandbox().describe()}; approval={chat.cfg.approval} (mode: {chat.mode})")


def mcp(chat: EditorSession, arg: str) -> None:
    if arg == "trust":
        return trust(chat, "")
    from ..mcpserve.cli import mcp_command
    chat.show(mcp_command(arg, chat.cfg, chat.session.toolbox))
    return None


def trust(chat: EditorSession, arg: str) -> None:
    """Trust the project's files as they are now; the session is built again under them."""
    from ..commands import trust_project
    chat.show(trust_project(chat.folder))
    chat.configure()
    sandbox(chat, "")


def listing(chat: EditorSession, arg: str) -> None:
    rows = transcripts.listing()
    chat.show("\n".join(f"{'*' if s.id == chat.id else ' '} {s.id}  "
                        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(s.updated))}  "
                        f"{s.problem or f'{s.count} msgs  {s.summary}'}" for s in rows) or transcripts.NO_SESSIONS)


def help_(chat: EditorSession, arg: str) -> None:
    chat.show("\n".join(f"/{c['name']}  {c['description']}" for c in offered()))


HANDLERS: dict[str, Callable[[EditorSession, str], None]] = {
    "list": listing, "compact": compact_now, "model": model, "models": models, "sandbox": sandbox,
    "mcp": mcp, "trust": trust, "clear": clear, "help": help_,
    "undo": lambda chat, arg: take_back(chat, arg, rewind=False),
    "rewind": lambda chat, arg: take_back(chat, arg, rewind=True),
    "redo": lambda chat, arg: take_back(chat, arg, rewind=False, redo=True),
}
