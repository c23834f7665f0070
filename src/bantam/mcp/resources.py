"""MCP resources, read by the model through one tool and by the user with `@server:uri`.

- `read_resource(server, uri?)`: offered while some server of the toolbox has resources (it says
  so at its start; the cache keeps that, so it is offered from the first request). With `uri`:
  that resource (a URI the server lists, or one a resource link in a tool result names), clipped
  to `tool_output_limit` like every tool result; without: the server's resources and templates.
- `@server:uri` in what the user types (the form Claude Code reads): each such resource of a
  running project's server is read and attached below the message before it is sent; one that
  cannot be read stops the message with one line, and nothing is sent.

No SDK import here: results.py converts an answer, once a request has needed the SDK anyway.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import ToolError
from ..tools import Tool
from . import launch
from .servers import ServerSpec

if TYPE_CHECKING:
    from ..tools import ToolContext

READ_RESOURCE = "read_resource"
# `@server:scheme:...` after a space or at the start; trailing punctuation belongs to the sentence
MENTION = re.compile(r"(?<!\S)@([A-Za-z0-9_-]{1,40}):([A-Za-z][A-Za-z0-9+.-]*:\S*[^\s.,;:!?)'\"])")


class ReadResource(Tool):
    name = READ_RESOURCE
    parallel = True  # reads of one server or several go out together

    def __init__(self, servers: dict[str, tuple[str, ServerSpec]]):
        self.servers = servers  # a server's name -> its key in the hub and its spec
        names = sorted(servers)
        self.description = ("Read a resource of an MCP server: a URI the server lists, or one a resource "
                            "link in a tool result names. Without uri: the resources the server offers. "
                            f"Servers with resources: {', '.join(names)}")
        self.parameters = {"type": "object", "required": ["server"], "properties": {
            "server": {"type": "string", "enum": names, "description": "the MCP server"},
            "uri": {"type": "string", "description": "the resource's URI; leave out to list them"}}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if args["server"] not in self.servers:
            raise ToolError(f"no MCP server {args['server']!r} with resources; these have: "
                            f"{', '.join(sorted(self.servers))}")
        text = read(*self.servers[args["server"]], args.get("uri") or "", ctx)
        from .results import clip
        return clip(text, ctx.cfg.tool_output_limit)


def reader(current: Any, key: str, spec: ServerSpec, offers: bool) -> ReadResource | None:
    """The toolbox's read_resource once server `key` offers resources (`offers`) or not: None
    when no server has any left."""
    servers = {name: held for name, held in getattr(current, "servers", {}).items() if held[0] != key}
    if offers:
        servers[spec.name] = (key, spec)
    return ReadResource(servers) if servers else None


def read(key: str, spec: ServerSpec, uri: str, ctx: ToolContext) -> str:
    """The resource at `uri` as text, or with no `uri` the list of what the server offers."""
    timeout = spec.timeout or ctx.cfg.shell_timeout
    if not uri:
        return launch.request(key, spec, lambda c: c.request(_listing, timeout), ctx.cancel)
    result = launch.request(key, spec, lambda c: c.request(lambda client: client.read_resource(uri), timeout),
                            ctx.cancel)
    from .results import contents_text
    return contents_text(result)


async def _listing(client: Any) -> str:
    from mcp.shared.exceptions import MCPError

    from .hub import pages
    lines = [f"{r.uri}  {r.name}" + (f": {r.description}" if r.description else "")
             for r in await pages(lambda cursor: client.list_resources(cursor=cursor), "resources")]
    try:  # templates are optional: a server without any may not know the method
        templates = await pages(lambda cursor: client.list_resource_templates(cursor=cursor), "resource_templates")
    except MCPError:
        templates = []
    lines += [f"{t.uri_template}  {t.name} (a template: fill in the {{...}} parts)"
              + (f": {t.description}" if t.description else "") for t in templates]
    return "\n".join(lines) or "(no resources)"


def with_resources(text: str, servers: dict[str, ServerSpec], ctx: ToolContext) -> str:
    """`text` with each resource it mentions as `@server:uri` attached below it (a server not
    among `servers` is no mention: the text stays as typed). ToolError: one could not be read."""
    by_name = {spec.name: (key, spec) for key, spec in servers.items()}
    wanted = dict.fromkeys((m.group(1), m.group(2)) for m in MENTION.finditer(text) if m.group(1) in by_name)
    parts = [text]
    for name, uri in wanted:
        try:
            body = read(*by_name[name], uri, ctx)
        except ToolError as e:
            raise ToolError(f"@{name}:{uri} could not be read: {e}") from None
        from .results import clip, for_the_chat
        parts.append(for_the_chat(f"[resource {name}:{uri}]\n{clip(body, ctx.cfg.tool_output_limit)}"))
    return "\n\n".join(parts)
