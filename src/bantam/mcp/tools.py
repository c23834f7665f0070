"""MCP tools as bantam tools: `server__tool`, called through the same Toolbox as shell_exec.

`add_tools(box, servers)` adds each server's tools to a Toolbox, so sanitising, the budget, the
repeat guard, approvals and events apply to them as to every other tool. Which tools, without
making the first model request wait:
- a server already running in this process: its own list;
- else what its configuration's server listed last time (cache.py), offered at once while the
  server starts in the background (launch.py); a call waits only for its own server;
- a server never seen before offers its tools once it has started: nothing waits for it, so a
  server that runs but never answers delays only its own tools (it has none until it answers).
When a started server lists other tools than were offered, this toolbox's tools are swapped, so
the next request carries the new list (the loop reads the list before each request); the model
also learns of it from a note before the next result of that server's tools, and the user from
one notice. A server that fails to start is one notice, and its tools' calls are errors naming why.
A server with resources adds the one `read_resource` tool (resources.py), kept in the same way.
No SDK import here: results.py converts a result, once a call has needed the SDK anyway.
"""
from __future__ import annotations

import concurrent.futures
import functools
import re
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import ToolError
from ..tools import Tool
from . import cache, launch, tell
from .servers import ServerSpec

if TYPE_CHECKING:
    from ..tools import Toolbox, ToolContext
    from .hub import Connection

SEPARATOR = "__"


class McpTool(Tool):
    parallel = True  # one server answers several requests at once; the SDK matches the replies

    def __init__(self, key: str, spec: ServerSpec, tool: cache.ToolInfo, note: list[str] | None = None):
        self.key, self.spec, self.remote = key, spec, tool.name  # key: the server's name in the hub
        self.note = note if note is not None else []  # shared by the server's tools: told once
        self.name = tool_name(spec.name, tool.name)
        self.description = f"[MCP server {spec.name}] {tool.description or tool.title or tool.name}"
        schema = dict(tool.input_schema)
        schema.setdefault("type", "object")
        schema.pop("$schema", None)  # some providers refuse keys they do not know
        self.parameters = schema

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        timeout = self.spec.timeout or ctx.cfg.shell_timeout
        result = launch.request(self.key, self.spec, lambda c: c.call(self.remote, args, timeout), ctx.cancel)
        from .results import clip, result_text
        text = clip(result_text(result, ctx, self.name), ctx.cfg.tool_output_limit)
        while self.note:  # pop: of parallel calls, one tells it
            text = f"{self.note.pop()}\n\n{text}"
        if result.is_error:
            raise ToolError(text)
        return text


def tool_name(server: str, tool: str) -> str:
    """`server__tool`, in the characters and length every provider accepts."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{SEPARATOR}{tool}")[:64]


def add_tools(box: Toolbox, servers: dict[str, ServerSpec]) -> None:
    """Start these servers (those not running yet) and add their tools to `box`: those known now
    at once, the others as their servers' starts end."""
    pending = launch.launch(servers)
    offered = {key: _known(key, spec) for key, spec in servers.items()}
    notes: dict[str, list[str]] = {key: [] for key in servers}  # for the model, shared by a server's tools
    for key, spec in servers.items():
        _offer(box, key, spec, offered[key] or cache.Cached("", ()), notes[key])
    pending.add_done_callback(lambda done: _watch(box, done, offered, notes))


def _known(key: str, spec: ServerSpec) -> cache.Cached | None:
    """What to offer without waiting: the running server's list, else the cached one."""
    running = launch.running(key, spec)
    return running.known() if running is not None else cache.load(spec)


def _offer(box: Toolbox, key: str, spec: ServerSpec, offers: cache.Cached, note: list[str]) -> None:
    """Put this server's tools in `box` in place of those it had (one assignment: no torn dict).
    `note`: what the model is to be told with the next result of any of them, old or new."""
    from .resources import READ_RESOURCE, reader
    kept = {n: t for n, t in box.tools.items() if getattr(t, "key", None) != key and n != READ_RESOURCE}
    tools = {t.name: t for t in (McpTool(key, spec, info, note) for info in offers.tools)}
    read = reader(box.tools.get(READ_RESOURCE), key, spec, offers.resources)
    box.tools = {**kept, **tools, **({READ_RESOURCE: read} if read is not None else {})}


def _watch(box: Toolbox, pending: concurrent.futures.Future, offered: dict[str, cache.Cached | None],
           notes: dict[str, list[str]]) -> None:
    """Once the hub holds the connections: follow each server's list, and compare what its start
    lists with what was offered (before a call that waited for that start goes on)."""
    if pending.exception() is not None:
        tell(box.ctx, "sdk", f"MCP servers were not started: the mcp package failed to import "
             f"({pending.exception()})")
        return
    ref = weakref.ref(box)
    hub = launch.current()
    for key, c in pending.result().items():
        _follow(ref, key, c, notes[key])
        hub.when_started(c, functools.partial(_reconcile, ref, key, was=offered[key], note=notes[key]))


def _reconcile(ref: weakref.ref, key: str, c: Connection, *, was: cache.Cached | None, note: list[str]) -> None:
    box = ref()
    if box is None:
        return
    if c.state.startswith("failed"):  # the cached tools stay; calling them says why they fail
        tell(box.ctx, c.spec.name, f"MCP server {c.spec.name} {c.state[8:]}")
        return
    if c.state != "ready":  # stopped before its start ended: bantam is exiting
        return
    now = c.known()
    if was is not None and now.tools != was.tools:
        change = f"MCP server {c.spec.name}'s tools changed since the last run ({_difference(was.tools, now.tools)})"
        note.append(f"[bantam: {change}; the new list is offered from the next request]")
        tell(box.ctx, f"{key} changed", f"{change}; the model is offered the new list from its next request")
    if was is None or (now.tools, now.resources) != (was.tools, was.resources):  # never seen before,
        _offer(box, key, c.spec, now, note)  # or changed: offered from the next request on


def _difference(was: tuple[cache.ToolInfo, ...], now: tuple[cache.ToolInfo, ...]) -> str:
    before, after = {t.name: t for t in was}, {t.name: t for t in now}
    parts = [f"{word}: {', '.join(names)}" for word, names in (
        ("added", sorted(after.keys() - before.keys())), ("removed", sorted(before.keys() - after.keys())),
        ("changed", sorted(n for n in before.keys() & after.keys() if before[n] != after[n]))) if names]
    return "; ".join(parts)


def _follow(ref: weakref.ref, key: str, connection: Connection, note: list[str]) -> None:
    """When the server announces a new tool list, swap this toolbox's tools for the new ones."""
    def changed(c: Connection) -> None:
        target = ref()
        if target is None:  # that toolbox is gone (a finished sub-agent's): forget it
            c.on_tools_changed.remove(changed)
            return
        _offer(target, key, c.spec, c.known(), note)
    connection.on_tools_changed.append(changed)
