"""MCP prompts as slash commands: `/server:prompt ARGS`, as Claude Code offers them.

The rest of the line fills the prompt's arguments: `name=value` words by name, the other words
in the order the server declares them (quotes group words; the last argument takes what is left
over, so `/srv:review fix the login bug` needs no quotes). What the server answers becomes
messages of the conversation: consecutive ones of one role joined, the last one (the user's)
sent as the turn. /help lists the prompts of the servers running by then.
"""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from ..errors import ToolError
from . import launch
from .servers import ServerSpec

if TYPE_CHECKING:
    from ..tools import ToolContext


def commands(servers: dict[str, ServerSpec]) -> list[tuple[str, str]]:
    """(how it is typed, what it does) for each prompt of these servers that run now."""
    rows = []
    for key, spec in servers.items():
        running = launch.running(key, spec)
        for prompt in running.prompts if running is not None else ():
            rows.append((usage(spec.name, prompt), prompt.description or prompt.title or "an MCP prompt"))
    return rows


def usage(server: str, prompt: Any) -> str:
    words = [a.name.upper() if a.required else f"[{a.name.upper()}]" for a in prompt.arguments or ()]
    return " ".join([f"/{server}:{prompt.name}", *words])


def expand(servers: dict[str, ServerSpec], command: str, line: str, ctx: ToolContext) -> list[dict[str, str]]:
    """`/server:prompt` with `line` as its arguments: the prompt's messages, in the chat format.
    ToolError: no such server or prompt, arguments missing, or the server failed."""
    server, _, name = command.removeprefix("/").partition(":")
    found = [(key, spec) for key, spec in servers.items() if spec.name == server]
    if not found:
        raise ToolError(f"unknown command {command}: no MCP server {server!r} is running here; /help lists the commands")
    key, spec = found[-1]  # a session's own server (an editor's) over the user's of the same name
    timeout = spec.timeout or ctx.cfg.shell_timeout

    async def listed(client: Any) -> list[Any]:
        from .hub import pages
        return await pages(lambda cursor: client.list_prompts(cursor=cursor), "prompts")
    prompts = {p.name: p for p in launch.request(key, spec, lambda c: c.request(listed, timeout), ctx.cancel)}
    if name not in prompts:
        raise ToolError(f"MCP server {server} has no prompt {name!r} (it has: {', '.join(prompts) or 'none'})")
    args = arguments(prompts[name], line, usage(server, prompts[name]))
    result = launch.request(key, spec, lambda c: c.request(lambda client: client.get_prompt(name, args), timeout),
                            ctx.cancel)
    from .results import block_text, for_the_chat
    messages: list[dict[str, str]] = []
    for message in result.messages:
        text = for_the_chat(block_text(message.content, ctx, command))
        if messages and messages[-1]["role"] == message.role:
            messages[-1]["content"] += "\n\n" + text
        else:
            messages.append({"role": message.role, "content": text})
    return messages


def arguments(prompt: Any, line: str, shown: str) -> dict[str, str]:
    """The prompt's arguments from the rest of the command line (see the module's docstring)."""
    declared = [a.name for a in prompt.arguments or ()]
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise ToolError(f"{shown}: {e}") from None
    given: dict[str, str] = {}
    loose = []
    for word in words:
        name, equals, value = word.partition("=")
        if equals and name in declared:
            given[name] = value
        else:
            loose.append(word)
    free = [n for n in declared if n not in given]
    if loose and not free:
        raise ToolError(f"usage: {shown} (it takes no more arguments)")
    if len(loose) > len(free):  # the last free argument takes the rest of the line
        loose[len(free) - 1:] = [" ".join(loose[len(free) - 1:])]
    given.update(zip(free, loose, strict=False))  # fewer words than arguments: the rest unset
    missing = [a.name for a in prompt.arguments or () if a.required and a.name not in given]
    if missing:
        raise ToolError(f"usage: {shown} (missing: {', '.join(missing)})")
    return given
