"""The daemon's tools: the core tools under the daemon's upper-case names (READ_FILE, BASH, ...),
and the daemon's own.

READ_FILE, WRITE_FILE, EDIT_FILE and BASH are the core read_file, write_file, edit_file and
shell_exec offered under the daemon's names and descriptions (bantam.tools.Offered, as a
controlled run offers them), run in the agent's home and the daemon's boundary (in_home;
boundary.py: its own files read-only, config.json unreadable, commands in the daemon's sandbox
with their pids noted for bg_run). The rest are plugins, and so are the operator's, all declared
one way: TOOLS = [(NAME, fn, description, parameters)], where `fn(args, agent)` returns text
(or a Popen-like object, which is waited for).

Every tool's `run` goes through the agent's bg_run, so every call is inline within tool_timeout and
backgrounded past it; bantam's Toolbox still checks arguments, sanitises and turns failures into
results the model can read. Tools in <agent>/tools/*.py are added at start (layout.load_module,
the daemon's one plugin loader): they are Python run in the daemon's process, so they come only
from tools/, which the model cannot write (boundary.py), as no tool may change config.json,
tools/ or providers/.
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import mcp
from ..approval import check_write
from ..errors import ToolError
from ..tools import Offered, Outcome, Tool, ToolContext, Toolbox
from ..tools.files import READ_LINES, read_bytes
from ..tools.media import IMAGE_LIMIT, sniff_image
from . import boundary, web
from .bg import note_pid
from .bus import MessageFile
from .layout import load_module
from .stash import middle_half, stash_range

if TYPE_CHECKING:
    from .agent import Agent

ToolFn = Callable[[dict, "Agent"], Any]
SHELL_CAPTURE = 2_000_000           # characters of BASH output kept (then clipped and stashed)
# An image READ_FILE shows stays in messages.jsonl and goes out again with every later request,
# unlike read_image's, which is sent once: half of the per-image limit (tools.media.IMAGE_LIMIT).
INLINE_IMAGE_LIMIT = IMAGE_LIMIT // 2
MAGIC_BYTES = 12                    # enough of a file for sniff_image (WebP's RIFF....WEBP)


def resolve(agent: "Agent", path: str) -> Path:
    """A path the model gave, placed as the core file tools place it (ToolContext.at: from the
    agent's home; below /tmp, in the session's /tmp that its commands see)."""
    if not str(path).strip():
        raise ToolError("path is empty")
    return agent.toolbox.ctx.at(path)


def _image(name: str, mime: str, data: bytes, agent: "Agent") -> str:
    """An image READ_FILE shows: attached as the next message (it stays in messages.jsonl)."""
    if not agent.settings.multimodal_support:
        hint = " (OCR_IMAGE reads its text)" if "OCR_IMAGE" in agent.toolbox.tools else ""
        raise ToolError(f"{name} is an image ({mime}) and this model cannot see images "
                        f"(multimodal_support is false){hint}")
    if len(data) > INLINE_IMAGE_LIMIT:
        raise ToolError(f"{name} is too large to show ({len(data)} bytes; the limit is {INLINE_IMAGE_LIMIT}): "
                        "make a smaller copy with BASH first")
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    agent.attach([{"type": "text", "text": f"<system-message>[image {name}]</system-message>"},
                  {"type": "image_url", "image_url": {"url": url}}])
    return f"[image {name}: {mime}, {len(data)} bytes; it follows as the next message]"


def search(args: dict, agent: "Agent") -> str:
    return web.search(agent.web, agent.settings.search_url, args["query"])


def fetch(args: dict, agent: "Agent") -> str:
    return web.fetch(agent.web, args["url"])


def stash(args: dict, agent: "Agent") -> str:
    digest = agent.blobs.put(args["content"])
    return f"[stash {digest}] saved as {agent.blobs.rel}/{digest}"


def stash_messages(args: dict, agent: "Agent") -> str:
    path = resolve(agent, args["path"]) if args.get("path") else agent.dir / "messages.jsonl"
    if path != agent.dir / "messages.jsonl":
        _may_rewrite_stream(agent, path, args["path"])
    conv = agent.conv if path == agent.dir / "messages.jsonl" else MessageFile(path)
    if args.get("start") is None and args.get("end") is None:
        start, end = middle_half(conv.read())
    else:
        start, end = int(args.get("start") or 1) - 1, int(args.get("end") or 10**9)
    return stash_range(conv, agent.blobs, agent.summarize, start, end)


def _may_rewrite_stream(agent: "Agent", path: Path, shown: str) -> None:
    """Reading a messages.jsonl heals it, a rewrite: so another stream is only one named so,
    where writes may go, and not the daemon's own (a config.json read as a stream loses every line)."""
    if path.name != "messages.jsonl":
        raise ToolError(f"{shown} is not a messages.jsonl")
    boundary.refuse_own(agent, path, shown)
    check_write(agent.cfg, agent.toolbox.ctx.approvals, str(path), cwd=agent.dir.home)


ATTACHMENT_LIMIT = 50 << 20  # bytes: the Bot API's limit for a file a bot sends


def send_attachment(args: dict, agent: "Agent") -> str:
    if not args.get("path"):
        raise ToolError("SEND_ATTACHMENT sends a file; plain text replies reach the chat by themselves")
    if agent.telegram is None:
        raise ToolError("there is no chat channel (no telegram_token in config.json)")
    path = resolve(agent, args["path"])  # read as READ_FILE reads: never config.json, /proc or a FIFO
    data = read_bytes(path, args["path"], ATTACHMENT_LIMIT + 1, boundary.config_files(agent), agent.toolbox.ctx.tmp)
    if len(data) > ATTACHMENT_LIMIT:
        raise ToolError(f"{args['path']} is larger than {ATTACHMENT_LIMIT >> 20} MB, what a chat bot may send")
    method = agent.telegram.send_file(path.name, data, args.get("caption") or "")
    return f"sent {args['path']} ({method})"


def _obj(required: list[str], **props: tuple[str, str]) -> dict:
    return {"type": "object", "required": required,
            "properties": {k: {"type": t, "description": d} for k, (t, d) in props.items()}}


PATH = ("string", "file path, relative to your home")


# The core tools under the daemon's names; one that mutates may not write the daemon's own files.
CORE_TOOLS: list[Offered] = [
    Offered("READ_FILE", "read_file", "Read a text file as numbered lines (offset: first line, from 1; "
             "limit: how many lines). Images are shown to you when the model supports them.",
             _obj(["path"], path=PATH, offset=("integer", "first line, from 1"),
                  limit=("integer", f"number of lines (default {READ_LINES})"))),
    Offered("WRITE_FILE", "write_file", "Write a whole file (parent directories are created).",
             _obj(["path", "content"], path=PATH, content=("string", "the new content")), mutates=True),
    Offered("EDIT_FILE", "edit_file", "Replace old_string by new_string in a file. old_string must be "
             "unique unless replace_all is true.",
             _obj(["path", "old_string", "new_string"], path=PATH, old_string=("string", "exact text to find"),
                  new_string=("string", "replacement"), replace_all=("boolean", "replace every occurrence")),
             mutates=True),
    Offered("BASH", "shell_exec", "Run a bash command in your home directory; returns its output and "
             "exit code. stdin is closed.", _obj(["command"], command=("string", "the command line")), mutates=True),
]
TOOLS: list[tuple[str, ToolFn, str, dict]] = [
    ("SEND_ATTACHMENT", send_attachment, "Send a file to the operator's chat (photo, voice, video, "
     "audio or document by extension), with an optional caption.",
     _obj(["path"], path=PATH, caption=("string", "text shown with the file"))),
    ("SEARCH", search, "Search the web; returns titles, links and snippets.",
     _obj(["query"], query=("string", "what to search for"))),
    ("WEB_FETCH", fetch, "Fetch a web page as Markdown (or a text file as it is).",
     _obj(["url"], url=("string", "http(s) URL"))),
    ("STASH", stash, "Save text in the content-addressed blob store; returns [stash <hash>].",
     _obj(["content"], content=("string", "what to save"))),
    ("STASH_MESSAGES", stash_messages, "Collapse lines start..end (from 1) of a messages.jsonl "
     "(default: your own, its middle half) into one [stash <hash>] line with a summary.",
     _obj([], start=("integer", "first line"), end=("integer", "last line, inclusive"),
          path=("string", "another messages.jsonl (default: your own)"))),
]


@dataclass
class Plugin(Tool):
    """A (NAME, fn, description, parameters) entry, the one shape of the daemon's own tools and the
    operator's: `fn(args, agent)` returns text, or a Popen-like object, which is waited for."""
    name: str
    fn: ToolFn
    description: str
    parameters: dict
    agent: "Agent"

    def run(self, args: dict, ctx: ToolContext) -> str:
        return _text(self.fn(args, self.agent))


@dataclass
class DaemonTool(Tool):
    """A tool as the daemon runs it, an offered core tool or a plugin: every call through the
    agent's bg_run; a core tool in the agent's home and boundary (in_home)."""
    tool: "Offered | Plugin"
    agent: "Agent"

    def __post_init__(self) -> None:
        self.name, self.description = self.tool.name, self.tool.description
        self.parameters, self.raw_arguments = self.tool.parameters, self.tool.raw_arguments

    def run(self, args: dict, ctx: ToolContext) -> str:
        if isinstance(self.tool, Offered) and self.tool.mutates and "path" in self.parameters["properties"]:
            # by name and through links, before anything runs
            boundary.refuse_own(self.agent, resolve(self.agent, args["path"]), args["path"])
        return self.agent.bg.run(self.name, self.agent.current_call, lambda: self.work(args, ctx),
                                 json.dumps(args, ensure_ascii=False)[:300])

    def work(self, args: dict, ctx: ToolContext) -> str:
        if isinstance(self.tool, Plugin):
            return self.tool.run(args, ctx)
        if self.tool.core == "read_file" and (shown := _shown_image(args, self.agent)) is not None:
            return shown
        if self.tool.core == "write_file":  # WRITE_FILE names the whole path it wrote
            args = {**args, "path": str(resolve(self.agent, args["path"]))}
        result = self.tool.run(args, in_home(self.agent, ctx))
        return result.content if isinstance(result, Outcome) else result


def in_home(agent: "Agent", ctx: ToolContext) -> ToolContext:
    """The core tools' context for the daemon: paths and commands from the agent's home, every
    write kept out of the daemon's own files (Boundary.write checks them on what it writes,
    whatever the sandbox mode or a person allowed; refuse_own named them first), every command in
    the daemon's sandbox with its pid noted for bg_run, stopped with the agent, its output kept
    up to SHELL_CAPTURE (the agent clips and stashes the rest) within the agent's shell_timeout."""
    own = boundary.own_files(agent.dir, agent.settings.primary_dir)
    cfg = replace(ctx.cfg, shell_timeout=agent.settings.shell_timeout, tool_output_limit=SHELL_CAPTURE)
    front = replace(ctx.front, guarded=(*ctx.front.guarded, *(Path(os.path.realpath(p)) for p in own)),
                    secret=(*ctx.front.secret, *boundary.config_files(agent)),
                    on_process=lambda proc: note_pid(proc.pid), fence=lambda box: boundary.sandbox(agent, box))
    return replace(ctx, cfg=cfg, folder=agent.dir.home, cancel=agent.stop, front=front)


def _shown_image(args: dict, agent: "Agent") -> str | None:
    """An image file READ_FILE shows to the model instead of reading it as text; None: not one."""
    path, secret = resolve(agent, args["path"]), boundary.config_files(agent)
    tmp = agent.toolbox.ctx.tmp
    if sniff_image(read_bytes(path, args["path"], MAGIC_BYTES, secret, tmp)) is None:
        return None
    data = read_bytes(path, args["path"], refuse=secret, tmp=tmp)
    mime = sniff_image(data)
    return _image(args["path"], mime, data, agent) if mime else None


def _text(result: Any) -> str:
    """A Popen-like result (a plugin may return its process) is waited for here, in the worker."""
    if hasattr(result, "pid") and hasattr(result, "communicate"):
        note_pid(result.pid)
        out, err = result.communicate()
        parts = [p.decode("utf-8", "replace") if isinstance(p, bytes) else (p or "") for p in (out, err)]
        return f"{''.join(parts)}\n\nexit: {result.returncode}"
    return "" if result is None else str(result)


def load_tool_files(folder: Path, log: Callable[[str, str], None]) -> list[tuple]:
    """TOOLS from <agent>/tools/*.py; a file that fails to load is logged and skipped."""
    entries = []
    for path in sorted(folder.glob("*.py")):
        try:
            module = load_module(path, "bantam_agent_tools")
            found = list(getattr(module, "TOOLS", []))
            if not all(isinstance(t, tuple) and len(t) == 4 and callable(t[1]) for t in found):
                raise TypeError("TOOLS must hold (NAME, fn, description, parameters) tuples")
            entries.extend(found)
        except Exception as e:  # the agent's own file: its mistake must not stop the daemon
            log("tools", f"{path.name} not loaded: {type(e).__name__}: {e}")
    return entries


def make_toolbox(agent: "Agent", ctx: ToolContext) -> Toolbox:
    offered: list[Offered | Plugin] = [*CORE_TOOLS]
    for name, fn, description, parameters in [*TOOLS, *load_tool_files(agent.dir / "tools", agent.log)]:
        offered.append(Plugin(name, fn, description, parameters, agent))
    tools: dict[str, Tool] = {t.name: DaemonTool(t, agent) for t in offered}
    box = Toolbox(tools, ctx)
    # the user's MCP servers serve the daemon too: the session's own extension when it set one
    return ctx.front.extend(box) if ctx.front.extend is not None else mcp.offer(box)
