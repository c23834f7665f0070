"""MCP tools as bantam tools: `server__tool`, called through the same Toolbox as shell_exec.

`add_tools(box, servers)` starts the configured servers (in parallel, once per process) and adds their tools
to a Toolbox, so sanitising, the budget, the repeat guard, approvals and events apply to them as
to every other tool. A result becomes text: text blocks as they are, images described by the
model as `read_image` would (one side request), resources as text under their URI, the whole
clipped to `tool_output_limit` with the full text kept in a file, as shell_exec does.
"""
from __future__ import annotations

import json
import re
import weakref
from typing import TYPE_CHECKING, Any

import mcp_types

from ..errors import ToolError
from ..tools.shell import ClippedOutput
from . import tell
from .hub import Connection, hub
from .servers import ServerSpec

if TYPE_CHECKING:
    from ..tools import Toolbox, ToolContext

SEPARATOR = "__"
IMAGE_QUESTION = "Describe this image in detail; it is the result of the tool {name}."


class McpTool:
    parallel = True  # one server answers several requests at once; the SDK matches the replies

    def __init__(self, connection: Connection, tool: mcp_types.Tool):
        self.connection = connection
        self.remote = tool.name
        self.name = tool_name(connection.spec.name, tool.name)
        text = tool.description or tool.title or tool.name
        self.description = f"[MCP server {connection.spec.name}] {text}"
        schema = dict(tool.input_schema or {})
        schema.setdefault("type", "object")
        schema.pop("$schema", None)  # some providers refuse keys they do not know
        self.parameters = schema

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        timeout = self.connection.spec.timeout or ctx.cfg.shell_timeout
        result = hub().submit(self.connection.call(self.remote, args, timeout), cancel=ctx.cancel)
        text = clip(result_text(result, ctx, self.name), ctx.cfg.tool_output_limit)
        if result.is_error:
            raise ToolError(text)
        return text


def tool_name(server: str, tool: str) -> str:
    """`server__tool`, in the characters and length every provider accepts."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{SEPARATOR}{tool}")[:64]


def result_text(result: mcp_types.CallToolResult, ctx: ToolContext, name: str) -> str:
    parts = [block_text(block, ctx, name) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts) if parts else "(no output)"


def block_text(block: Any, ctx: ToolContext, name: str) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return image_text(block, ctx, name)
    if isinstance(block, mcp_types.EmbeddedResource):
        res = block.resource
        if isinstance(res, mcp_types.TextResourceContents):
            return f"[resource {res.uri}]\n{res.text}"
        return f"[resource {res.uri}: {res.mime_type or 'binary'}, {_size(res.blob)} bytes, not shown]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link {block.uri}] {block.description or block.name}"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)} bytes, not shown]"
    return f"[{getattr(block, 'type', type(block).__name__)} content, not shown]"


def image_text(block: mcp_types.ImageContent, ctx: ToolContext, name: str) -> str:
    """What the model says it sees, as `read_image` gives it (the picture never enters the chat)."""
    from ..tools.media import IMAGE_LIMIT, ask_model
    if _size(block.data) > IMAGE_LIMIT:  # the same bound as read_image's
        return f"[image: {block.mime_type}, {_size(block.data)} bytes: over {IMAGE_LIMIT} bytes, not shown]"
    url = f"data:{block.mime_type};base64,{block.data}"
    parts: list[dict[str, Any]] = [{"type": "text", "text": IMAGE_QUESTION.format(name=name)},
                                   {"type": "image_url", "image_url": {"url": url}}]
    try:
        return f"[image: {block.mime_type}] {ask_model(ctx, parts, f'the image from {name}')}"
    except ToolError as e:  # the other blocks of the result still count
        return f"[image: {block.mime_type}, {_size(block.data)} bytes; not described: {e}]"


def _size(data: str) -> int:
    return len(data) * 3 // 4  # base64: close enough for a message


def clip(text: str, limit: int) -> str:
    out = ClippedOutput(limit)
    out.add(text.encode("utf-8"))
    return out.text()


def add_tools(box: Toolbox, servers: dict[str, ServerSpec]) -> None:
    """Start these servers (those not running yet) and add their tools to `box`."""
    connections = hub().connect(servers)
    for c in connections:
        if c.state.startswith("failed"):
            tell(box.ctx, c.spec.name, f"MCP server {c.spec.name} {c.state[8:]}")
        _follow(box, c)
    box.tools.update({t.name: t for c in connections for t in offered(c)})


def offered(connection: Connection) -> list[McpTool]:
    return [McpTool(connection, tool) for tool in connection.tools]


def _follow(box: Toolbox, connection: Connection) -> None:
    """When the server announces a new tool list, swap this toolbox's tools for the new ones."""
    ref = weakref.ref(box)

    def changed(c: Connection) -> None:
        target = ref()
        if target is None:  # that toolbox is gone (a finished sub-agent's): forget it
            c.on_tools_changed.remove(changed)
            return
        kept = {k: t for k, t in target.tools.items() if getattr(t, "connection", None) is not c}
        target.tools = {**kept, **{t.name: t for t in offered(c)}}  # one assignment: no torn dict
    connection.on_tools_changed.append(changed)
