"""The daemon's tools, declared as the seed does: TOOLS = [(NAME, fn, description, parameters)].

`fn(args, agent)` returns text (or a Popen-like object, which is waited for). Each entry becomes a
bantam Tool whose `run` goes through the agent's bg_run, so every call is inline within
tool_timeout and backgrounded past it; bantam's Toolbox still checks arguments, sanitises and
turns failures into results the model can read. Tools in <agent>/tools/*.py are added at start:
they are Python run in the daemon's process, so they come only from tools/, which the model cannot
write (boundary.py), as no tool may change config.json, tools/ or providers/.
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import mcp
from ..approval import check_command, check_write
from ..errors import ToolError
from ..fsutil import Boundary
from ..tools import ToolContext, Toolbox, files
from ..tools.files import READ_LINES, numbered_lines, read_bytes, write_file
from ..tools.media import sniff_image
from ..tools.shell import run_shell
from . import boundary, web
from .bg import note_pid
from .bus import Conversation
from .layout import load_module
from .stash import middle_half, stash_range

if TYPE_CHECKING:
    from .agent import Agent

ToolFn = Callable[[dict, "Agent"], Any]
IMAGE_LIMIT = 10 * 1024 * 1024      # bytes of an image shown to the model (it stays in messages.jsonl)
SHELL_CAPTURE = 2_000_000           # characters of BASH output kept (then clipped and stashed)
RAW_ARGUMENTS = {"WRITE_FILE": ("content",), "EDIT_FILE": ("old_string", "new_string")}
WRITES = ("WRITE_FILE", "EDIT_FILE")  # their `path` may not be one of the daemon's own files


def resolve(agent: "Agent", path: str) -> Path:
    if not str(path).strip():
        raise ToolError("path is empty")
    return agent.dir.home / Path(path).expanduser()  # an absolute path stays absolute


def read_file(args: dict, agent: "Agent") -> str:
    data = read_bytes(resolve(agent, args["path"]), args["path"])
    mime = sniff_image(data)
    if mime:
        return _image(args["path"], mime, data, agent)
    return numbered_lines(data, args["path"], args.get("offset"), args.get("limit"))


def _image(name: str, mime: str, data: bytes, agent: "Agent") -> str:
    if not agent.settings.multimodal_support:
        hint = " (OCR_IMAGE reads its text)" if "OCR_IMAGE" in agent.toolbox.tools else ""
        raise ToolError(f"{name} is an image ({mime}) and this model cannot see images "
                        f"(multimodal_support is false){hint}")
    if len(data) > IMAGE_LIMIT:
        raise ToolError(f"{name} is too large to show ({len(data)} bytes; the limit is {IMAGE_LIMIT}): "
                        "make a smaller copy with BASH first")
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    agent.attach([{"type": "text", "text": f"<system-message>[image {name}]</system-message>"},
                  {"type": "image_url", "image_url": {"url": url}}])
    return f"[image {name}: {mime}, {len(data)} bytes; it follows as the next message]"


def write(args: dict, agent: "Agent") -> str:
    path = str(resolve(agent, args["path"]))
    return write_file(path, args["content"], boundary=_allowed(agent, path))


def edit_file(args: dict, agent: "Agent") -> str:
    path = resolve(agent, args["path"])
    return files.edit_file(path, args["path"], args["old_string"], args["new_string"],
                           bool(args.get("replace_all")), boundary=_allowed(agent, str(path)))


def _allowed(agent: "Agent", path: str) -> Boundary:
    """The core tools' rule for the daemon's writes: the sandbox around the agent's home (as for
    its BASH), asked or refused past it, and written by Boundary.write, which also keeps out of
    the daemon's own files on what it writes (FnTool.run's refuse_own names them first)."""
    allowed = check_write(agent.cfg, agent.toolbox.ctx.approvals, path, cwd=agent.dir.home)
    own = boundary.own_files(agent.dir, agent.settings.primary_dir)
    return replace(allowed, guarded=(*allowed.guarded, *(Path(os.path.realpath(p)) for p in own)))


def bash(args: dict, agent: "Agent") -> str:
    command, box = check_command(agent.cfg, agent.toolbox.ctx.approvals, args["command"], cwd=agent.dir.home)
    return run_shell(command, agent.settings.shell_timeout, SHELL_CAPTURE, cancel=agent.stop,
                     on_start=lambda proc: note_pid(proc.pid), sandbox=boundary.sandbox(agent, box)).for_model()


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
    conv = agent.conv if path == agent.dir / "messages.jsonl" else Conversation(path)
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


def send_attachment(args: dict, agent: "Agent") -> str:
    if not args.get("path"):
        raise ToolError("SEND_ATTACHMENT sends a file; plain text replies reach the chat by themselves")
    if agent.telegram is None:
        raise ToolError("there is no chat channel (no telegram_token in config.json)")
    path = resolve(agent, args["path"])
    if not path.is_file():
        raise ToolError(f"{args['path']} is not a file")
    method = agent.telegram.send_file(path, args.get("caption") or "")
    return f"sent {args['path']} ({method})"


def _obj(required: list[str], **props: tuple[str, str]) -> dict:
    return {"type": "object", "required": required,
            "properties": {k: {"type": t, "description": d} for k, (t, d) in props.items()}}


PATH = ("string", "file path, relative to your home")
TOOLS: list[tuple[str, ToolFn, str, dict]] = [
    ("SEND_ATTACHMENT", send_attachment, "Send a file to the operator's chat (photo, voice, video, "
     "audio or document by extension), with an optional caption.",
     _obj(["path"], path=PATH, caption=("string", "text shown with the file"))),
    ("READ_FILE", read_file, "Read a text file as numbered lines (offset: first line, from 1; "
     "limit: how many lines). Images are shown to you when the model supports them.",
     _obj(["path"], path=PATH, offset=("integer", "first line, from 1"),
          limit=("integer", f"number of lines (default {READ_LINES})"))),
    ("WRITE_FILE", write, "Write a whole file (parent directories are created).",
     _obj(["path", "content"], path=PATH, content=("string", "the new content"))),
    ("EDIT_FILE", edit_file, "Replace old_string by new_string in a file. old_string must be unique "
     "unless replace_all is true.",
     _obj(["path", "old_string", "new_string"], path=PATH, old_string=("string", "exact text to find"),
          new_string=("string", "replacement"), replace_all=("boolean", "replace every occurrence"))),
    ("BASH", bash, "Run a bash command in your home directory; returns its output and exit code. "
     "stdin is closed.", _obj(["command"], command=("string", "the command line"))),
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
class FnTool:
    """A (NAME, fn, description, parameters) entry as a bantam Tool, run through bg_run."""
    name: str
    fn: ToolFn
    description: str
    parameters: dict
    agent: "Agent"

    @property
    def raw_arguments(self) -> tuple[str, ...]:
        """File content is data: WRITE_FILE and EDIT_FILE get it byte for byte."""
        return RAW_ARGUMENTS.get(self.name, ())

    def run(self, args: dict, ctx: ToolContext) -> str:
        if self.name in WRITES:
            boundary.refuse_own(self.agent, resolve(self.agent, args["path"]), args["path"])
        if self.name == "READ_FILE":
            boundary.refuse_read(self.agent, resolve(self.agent, args["path"]), args["path"])
        return self.agent.bg.run(self.name, self.agent.current_call,
                                 lambda: _text(self.fn(args, self.agent)),
                                 json.dumps(args, ensure_ascii=False)[:300])


def _text(result: Any) -> str:
    """A Popen-like result (the seed's streamed tools) is waited for here, in the worker."""
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
    tools: dict[str, Any] = {}
    for name, fn, description, parameters in [*TOOLS, *load_tool_files(agent.dir / "tools", agent.log)]:
        tools[name] = FnTool(name, fn, description, parameters, agent)
    return mcp.offer(Toolbox(tools, ctx))  # the user's MCP servers serve the daemon too
