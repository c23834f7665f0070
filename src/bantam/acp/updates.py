"""bantam's events as ACP `session/update` payloads, and a saved conversation replayed as them.

Plain dicts in the protocol's camelCase: the shapes are few, and building them by hand keeps
pydantic's schema models (a second of start-up) out of `bantam acp`.
"""
from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from ..errors import ToolError

KINDS = {"shell_exec": "execute", "write_file": "edit", "edit_file": "edit", "read_file": "read",
         "list_files": "search", "spawn_agent": "think", "run_subagent": "think"}
EDITS = ("write_file", "edit_file")
DIFF_LIMIT = 1 << 20  # a file larger than this is not sent whole as the diff's old and new text


def text(kind: str, words: str) -> dict:
    """An `agent_message_chunk`, `agent_thought_chunk` or `user_message_chunk`."""
    return {"sessionUpdate": kind, "content": {"type": "text", "text": words}}


def arguments(raw: str) -> dict:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


def title(name: str, args: dict) -> str:
    """What the editor shows on the call's line."""
    if name == "shell_exec":
        return str(args.get("command", name))
    if "path" in args and name in ("write_file", "edit_file", "read_file", "list_files"):
        verb = {"write_file": "Write", "edit_file": "Edit", "read_file": "Read", "list_files": "List"}[name]
        return f"{verb} {args['path']}"
    return name


def started(call_id: str, name: str, args: dict, where: Path | None) -> dict:
    update: dict[str, Any] = {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title(name, args),
                              "kind": KINDS.get(name, "other"), "status": "in_progress", "rawInput": args}
    if where is not None:
        update["locations"] = [{"path": str(where)}]
    return update


def finished(call_id: str, result: str, failed: bool, diff: dict | None = None,
             shown: list[dict] | None = None) -> dict:
    """The call's last update. `shown`: where its output was already shown (the editor's
    terminal), which stays, with the result's last line (the exit status) under it."""
    text = result.rstrip().rpartition("\n")[2] if shown else result
    content: list[dict] = [*(shown or []), {"type": "content", "content": {"type": "text", "text": text}}]
    if diff is not None and not failed:
        content.insert(0, diff)
    return {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
            "status": "failed" if failed else "completed", "content": content,
            "rawOutput": {"output": result}}


def read_text(path: Path, tmp: Path | None = None) -> str | None:
    """A file's text for a diff, read as the model's own reads are (no FIFO, device, kernel file
    or bantam's own files but the session's `tmp`, and never more than DIFF_LIMIT): the diff goes
    to the editor before any check of the write. None when it does not exist, is refused, not
    text, or too large."""
    from ..sandbox import read_for_model
    try:
        data = read_for_model(path, str(path), DIFF_LIMIT + 1, tmp=tmp)
        return data.decode("utf-8") if len(data) <= DIFF_LIMIT else None
    except (ToolError, UnicodeDecodeError):
        return None


def diff(path: Path, old: str | None, new: str | None) -> dict | None:
    if new is None or len(new) > DIFF_LIMIT or (old is not None and len(old) > DIFF_LIMIT):
        return None
    return {"type": "diff", "path": str(path), "oldText": old, "newText": new}


def asked(action: str, text: str, name: str, args: dict, where: Path | None, old: str | None) -> list[dict]:
    """What a permission request shows besides its title: the command line in full, or the
    write's diff (the file's text before, from the call's start, and after, from its arguments;
    for an edit whose old text is unknown, the replaced piece and its replacement)."""
    if action != "write":
        return [{"type": "content", "content": {"type": "text", "text": f"```sh\n{text}\n```"}}]
    new = None
    if name == "write_file" and isinstance(args.get("content"), str):
        new = args["content"]
    elif name == "edit_file" and isinstance(args.get("old_string"), str) and isinstance(args.get("new_string"), str):
        before, after = args["old_string"], args["new_string"]
        if old is None or before not in old:
            return [{"type": "diff", "path": str(where or text), "oldText": before, "newText": after}]
        new = old.replace(before, after, -1 if args.get("replace_all") else 1)
    shown = diff(where or Path(text), old, new)
    return [shown] if shown is not None else [{"type": "content", "content": {"type": "text", "text": text}}]


def prompt_content(blocks: list) -> tuple[str, str | list[dict], list[str]]:
    """The user's words, the message's content for the model (the words; with images, OpenAI
    content parts, which every provider translates to its own image input, as for read_image),
    and notes on what was left out (an image that is not a PNG or JPEG, or too large)."""
    words, left_out = prompt_text(blocks)
    images = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "image":
            try:
                images.append(image_part(block))
            except ToolError as e:
                left_out.append(str(e))
    if not images:
        return words, words, left_out
    return words, [{"type": "text", "text": words}, *images], left_out


def image_part(block: dict) -> dict:
    """An ACP image block as an OpenAI image part, checked as read_image checks a file."""
    from ..tools.media import IMAGE_LIMIT, image_type
    encoded = block.get("data")
    try:
        data = base64.b64decode(encoded if isinstance(encoded, str) else "", validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("an image that is not base64 data") from None
    if not data or len(data) > IMAGE_LIMIT:
        raise ToolError(f"an image of {len(data)} bytes (the limit is {IMAGE_LIMIT >> 20} MB)")
    mime = image_type(data, "the attached image")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}}


def prompt_text(blocks: list) -> tuple[str, list[str]]:
    """The user's words from a prompt's content blocks, and notes on what was left out. Text
    as it is; an embedded resource (a file the user attached) as its text under its URI; a
    link as a link; images are prompt_content's; audio is not taken (initialize says so)."""
    parts, left_out = [], []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource":
            resource = block.get("resource") or {}
            if "text" in resource:
                parts.append(f"Context from {resource.get('uri', 'an attached resource')}:\n"
                             f"```\n{resource['text']}\n```")
            else:
                left_out.append(f"binary resource {resource.get('uri', '')}")
        elif kind == "resource_link":
            parts.append(f"[{block.get('name') or block.get('uri')}]({block.get('uri')})")
        elif kind != "image":
            left_out.append(str(kind))
    return "\n\n".join(p for p in parts if p), left_out


def images_of(content: Any) -> list[dict]:
    """A saved message's images (OpenAI parts with data URLs) as ACP image blocks."""
    found = []
    for part in content if isinstance(content, list) else []:
        url = str((part.get("image_url") or {}).get("url", "")) if isinstance(part, dict) else ""
        head, _, data = url.partition(";base64,")
        if head.startswith("data:") and data:
            found.append({"type": "image", "mimeType": head.removeprefix("data:"), "data": data})
    return found


def replay(messages: list[dict]) -> list[dict]:
    """A saved conversation as the updates that show it: the user's and the model's messages,
    and each tool call with its result."""
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    updates = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user":
            updates.append(text("user_message_chunk", content if isinstance(content, str) else
                                prompt_text(content if isinstance(content, list) else [])[0]))
            updates.extend({"sessionUpdate": "user_message_chunk", "content": image}
                           for image in images_of(content))
        elif m.get("role") == "assistant":
            if isinstance(content, str) and content:
                updates.append(text("agent_message_chunk", content))
            for call in m.get("tool_calls") or []:
                function = call.get("function") or {}
                name, args = str(function.get("name", "")), arguments(str(function.get("arguments", "")))
                ident = str(call.get("id", ""))
                updates.append(started(ident, name, args, None))
                updates.append(finished(ident, results.get(ident, ""), results.get(ident, "").startswith("error:")))
    return updates
