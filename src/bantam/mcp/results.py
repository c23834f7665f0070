"""What an MCP server answers as the text the model reads (the SDK is loaded by the time an answer
arrives): a tool's result, a resource read, a prompt's messages.

Text blocks as they are, images described by the model as `read_image` would (one side request),
resources as text under their URI, the whole clipped to `tool_output_limit` with the full text
kept in a file, as shell_exec does.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import mcp_types

from ..envpolicy import redact
from ..errors import ToolError
from ..sanitize import sanitize
from ..tools.shell import ClippedOutput

if TYPE_CHECKING:
    from ..tools import ToolContext

IMAGE_QUESTION = "Describe this image in detail; it is the result of the tool {name}."


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
        return resource_text(block.resource)
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link {block.uri}] {block.description or block.name}"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)} bytes, not shown]"
    return f"[{getattr(block, 'type', type(block).__name__)} content, not shown]"


def resource_text(res: mcp_types.TextResourceContents | mcp_types.BlobResourceContents) -> str:
    if isinstance(res, mcp_types.TextResourceContents):
        return f"[resource {res.uri}]\n{res.text}"
    return f"[resource {res.uri}: {res.mime_type or 'binary'}, {_size(res.blob)} bytes, not shown]"


def contents_text(result: mcp_types.ReadResourceResult) -> str:
    """A resource read: each of its parts under its URI."""
    return "\n".join(resource_text(res) for res in result.contents) or "(empty)"


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


def for_the_chat(text: str) -> str:
    """Text a server wrote, made fit to enter the conversation outside a tool result (a prompt's
    messages, an attached resource) as Toolbox.execute makes a result: sanitised, secrets ***."""
    return redact(sanitize(text))


def clip(text: str, limit: int) -> str:
    out = ClippedOutput(limit)
    out.add(text.encode("utf-8"))
    return out.text()
