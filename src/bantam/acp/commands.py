"""Slash commands in the editor: those of slash.py's table an editor session runs (slash.EDITOR),
offered through `available_commands_update` with the prompts of the session's MCP servers, and
run by the same functions as in the terminal. Not offered: the controlled runs' (/run, /fix,
/pause, /resume, /status, /files: a run works in the background of a terminal), saving and
loading (/save, /load, /continue: the editor's session list does that), /cfg (it writes
configuration files), /cost and /quit.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import slash
from ..errors import BantamError

if TYPE_CHECKING:
    from .conversation import EditorSession


def offer(chat: "EditorSession") -> None:
    """Tell the editor the commands this session offers when they changed: slash.EDITOR's, then
    `/server:prompt` for each prompt of its running MCP servers (the user's and the editor's),
    which come as the servers start, so this is asked again after every turn."""
    from ..mcp.prompts import commands as prompt_rows
    found = offered()
    for usage, what in prompt_rows(chat.mcp_servers()):
        name, _, hint = usage.removeprefix("/").partition(" ")
        found.append({"name": name, "description": what, **({"input": {"hint": hint}} if hint else {})})
    if found != chat.commands_offered:
        chat.commands_offered = found
        chat.update({"sessionUpdate": "available_commands_update", "availableCommands": found})


def offered() -> list[dict]:
    """slash.EDITOR's commands as the editor lists them (name, what, the input's hint)."""
    return [{"name": c.name, "description": c.what, **({"input": {"hint": c.hint}} if c.hint else {})}
            for c in slash.EDITOR if c.run is not None]


def run(chat: EditorSession, line: str) -> bool:
    """Run `line` when it is one of the offered commands; False when it is not (the model gets it)."""
    name, _, arg = line.strip().partition(" ")
    if not name.startswith("/"):
        return False
    try:
        if not slash.run(chat, name, arg):
            return False
    except KeyboardInterrupt:  # cancelled (a /compact's request)
        chat.say("interrupted")
    except BantamError as e:  # a failed /compact, a bad /sandbox word: said, the session goes on
        chat.say(str(e))
    chat.save()
    return True
