"""`bantam acp`: bantam in an editor, over the Agent Client Protocol (ACP, version 1).

The editor (Zed, a JetBrains IDE, Neovim, Emacs...) starts `bantam acp` and speaks JSON-RPC 2.0
on its stdin and stdout. Every `session/new` is a bantam session (session.build) in the folder
the editor names, with that folder's project configuration under the trust rules, the user's
configuration, and the MCP servers the editor passes (the answer waits, bounded, for those never
seen before: conversation.py); several live in one process at once.

    rpc.py           the JSON-RPC transport (threads, requests both ways)
    conversation.py  one session: the loop's events as updates, approvals as permission requests,
                     cancel, saving and loading
    updates.py       the update payloads (tool kinds, titles, diffs, the replay of a saved session)
    output.py        a running command's output, shown as it comes
    settings.py      the modes and the configuration options (the model)
    commands.py      the slash commands: the terminal's table, run here

The protocol is spoken directly, in plain dicts: the `agent-client-protocol` SDK builds about
two hundred pydantic models on import (a second of start-up, six times bantam's own), and an
editor starts its agent often. The tests drive this with that SDK's client side.

Stdout carries the protocol and nothing else: at start the real stdout is kept for the protocol
and file descriptor 1 is pointed at stderr, so a library, a tool or a model's command that
prints cannot corrupt the stream. Logs go to stderr.
"""
from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import BantamError, SessionError
from ..options import Parser
from .rpc import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, Later, RpcError, RpcLink

PROTOCOL_VERSION = 1


def main(argv: list[str]) -> int:
    from ..options import common_options, flags
    p = common_options(Parser(
        prog="bantam acp", description="Serve the Agent Client Protocol on stdin/stdout, for editors."))
    args = p.parse_args(argv)
    conn = RpcLink(*protocol_fds())
    agent = EditorAgent(conn, flags(args))
    conn.serve(agent.handlers(), {"session/cancel": agent.cancel})
    return 0


def protocol_fds() -> tuple[int, int]:
    """(read, write) descriptors for the protocol; fd 0 becomes /dev/null and fd 1 stderr, so
    nothing else in this process or its children can read the client's stream or write to it."""
    sys.stdout.flush()
    read_fd, write_fd = os.dup(0), os.dup(1)  # not inherited by children (os.dup's default)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return read_fd, write_fd


def new_id() -> str:
    """A saved session's id (transcripts.VALID_ID): sortable by time, unique."""
    from ..transcripts import EDITOR_PREFIX
    return f"{EDITOR_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"


class EditorAgent:
    """bantam as the agent an editor drives over ACP: the protocol's requests, and the editor's sessions."""

    def __init__(self, conn: RpcLink, flags: dict[str, str]):
        self.conn, self.flags = conn, flags
        self.sessions: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.client: dict = {}  # initialize's clientCapabilities: which file and terminal requests the editor serves

    def handlers(self) -> dict:
        return {"initialize": self.initialize, "session/new": self.new, "session/load": self.load,
                "session/prompt": self.prompt, "session/set_mode": self.set_mode,
                "session/set_config_option": self.set_option, "session/set_model": self.set_model,
                "session/list": self.list, "session/resume": self.resume, "session/close": self.close,
                "session/fork": self.fork, "authenticate": lambda params: {}}

    def initialize(self, params: dict) -> Later:
        capabilities = params.get("clientCapabilities")
        self.client = capabilities if isinstance(capabilities, dict) else {}
        return Later(self.capabilities(), warm_up)

    def capabilities(self) -> dict:
        return {"protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": {
                    "loadSession": True,
                    # images go to the model as its image input (one it cannot take fails the turn)
                    "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
                    "mcpCapabilities": {"http": True, "sse": False},  # the hub speaks stdio and Streamable HTTP
                    # fork is the protocol's unstable part: offered, used by clients that know it
                    "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "fork": {}}},
                "agentInfo": {"name": "bantam", "title": "bantam", "version": __version__},
                "authMethods": []}

    def new(self, params: dict) -> Later:
        folder = folder_of(params)
        chat = self.start(new_id(), folder, params)
        return Later({"sessionId": chat.id, **chat.settings()}, chat.announce)

    def load(self, params: dict) -> Later:
        """session/load: the saved session, its history replayed to the editor."""
        chat, replay = self.reopen(params)
        for update in replay:  # the history first, then the answer (the protocol's order)
            chat.update(update)
        return Later(chat.settings(), chat.announce)

    def resume(self, params: dict) -> Later:
        """session/resume: the saved session, without its history (the editor still shows it)."""
        chat, _ = self.reopen(params)
        return Later(chat.settings(), chat.announce)

    def reopen(self, params: dict) -> tuple[Any, list[dict]]:
        session_id = saved_id(params)
        chat = self.start(session_id, folder_of(params), params)
        try:
            return chat, chat.resume()
        except SessionError as e:
            raise RpcError(RESOURCE_NOT_FOUND, str(e)) from None

    def fork(self, params: dict) -> Later:
        """session/fork: a new session that starts with a copy of this one's conversation (the
        one in memory when it is open here, else the saved one); the two go on apart."""
        from .. import transcripts
        source = self.sessions.get(params.get("sessionId"))  # type: ignore[arg-type]
        if source is not None:
            history = list(source.messages)
        else:
            try:
                history = transcripts.load(saved_id(params))[1]
            except SessionError as e:
                raise RpcError(RESOURCE_NOT_FOUND, str(e)) from None
        chat = self.start(new_id(), folder_of(params), params)
        chat.adopt(history)
        return Later({"sessionId": chat.id, **chat.settings()}, chat.announce)

    def close(self, params: dict) -> dict:
        """session/close: its turn stops, and the session is forgotten here (it stays saved)."""
        chat = self.find(params)
        chat.cancel()
        with self.lock:
            self.sessions.pop(chat.id, None)
        return {}

    def start(self, session_id: str, folder: Path, params: dict) -> Any:
        from .conversation import EditorSession
        servers = mcp_specs(params.get("mcpServers") or [], folder)
        try:
            chat = EditorSession(self.conn, session_id, folder, self.flags, servers, self.client)
        except BantamError as e:  # a bad configuration: the editor shows why
            raise RpcError(INTERNAL_ERROR, f"bantam: {e}") from None
        with self.lock:
            self.sessions[session_id] = chat
        return chat

    def find(self, params: dict) -> Any:
        chat = self.sessions.get(params.get("sessionId"))  # type: ignore[arg-type]
        if chat is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"unknown session {params.get('sessionId')!r}")
        return chat

    def prompt(self, params: dict) -> dict:
        chat = self.find(params)
        blocks = params.get("prompt")
        if not isinstance(blocks, list):
            raise RpcError(INVALID_PARAMS, "prompt: a list of content blocks is required")
        return chat.prompt(blocks)

    def set_mode(self, params: dict) -> dict:
        self.find(params).set_mode(str(params.get("modeId")))
        return {}

    def set_option(self, params: dict) -> dict:
        option, value = params.get("configId"), params.get("value")
        if not isinstance(option, str) or not isinstance(value, str):
            raise RpcError(INVALID_PARAMS, "configId and a string value are required")
        return {"configOptions": self.find(params).set_option(option, value)}

    def set_model(self, params: dict) -> dict:
        """session/set_model, the model picker of editors that predate configuration options."""
        self.find(params).set_model(str(params.get("modelId") or ""))
        return {}

    def cancel(self, params: dict) -> None:
        chat = self.sessions.get(params.get("sessionId"))  # type: ignore[arg-type]
        if chat is not None:
            chat.cancel()

    def list(self, params: dict) -> dict:
        """The saved sessions made through ACP (those of a folder, when `cwd` is given)."""
        from .. import transcripts
        cwd = params.get("cwd")
        found = [s for s in transcripts.listing() if s.id.startswith(transcripts.EDITOR_PREFIX) and not s.problem
                 and (not cwd or s.project == cwd)]
        return {"sessions": [{"sessionId": s.id, "cwd": s.project, "title": s.summary[:80] or None,
                              "updatedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.updated))}
                             for s in found]}


def warm_up() -> None:
    """Once the editor has the answer to `initialize`: import what the first `session/new` needs
    (the session core, httpx) in the background, while the editor is still opening its thread."""
    def load() -> None:
        from . import conversation  # noqa: F401 (imported for its import cost, paid now)
        from ..providers.http import load_httpx
        load_httpx()
    threading.Thread(target=load, daemon=True, name="acp warm-up").start()


def saved_id(params: dict) -> str:
    from .. import transcripts
    session_id = params.get("sessionId")
    if not isinstance(session_id, str) or not transcripts.VALID_ID.match(session_id) \
            or not transcripts.path_of(session_id).is_file():
        raise RpcError(RESOURCE_NOT_FOUND, f"no saved session {session_id!r}")
    return session_id


def folder_of(params: dict) -> Path:
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise RpcError(INVALID_PARAMS, f"cwd must be an absolute path, got {cwd!r}")
    if not os.path.isdir(cwd):
        raise RpcError(INVALID_PARAMS, f"cwd {cwd!r} is not a directory")
    return Path(cwd)


def mcp_specs(entries: list, folder: Path) -> dict[str, Any]:
    """session/new's mcpServers as bantam's ServerSpecs (stdio, or Streamable HTTP)."""
    if not isinstance(entries, list):
        raise RpcError(INVALID_PARAMS, "mcpServers must be a list")
    from ..mcp.servers import ServerSpec
    specs = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise RpcError(INVALID_PARAMS, f"an MCP server needs a name: {entry!r}")
        pairs = {p["name"]: str(p.get("value", "")) for p in entry.get("env") or entry.get("headers") or []
                 if isinstance(p, dict) and isinstance(p.get("name"), str)}
        kind = entry.get("type", "stdio")
        if kind == "stdio" and isinstance(entry.get("command"), str):
            specs[entry["name"]] = ServerSpec(entry["name"], "the editor (session/new)", command=entry["command"],
                                              args=tuple(str(a) for a in entry.get("args") or []),
                                              env=pairs, cwd=str(folder))
        elif kind == "http" and isinstance(entry.get("url"), str):
            specs[entry["name"]] = ServerSpec(entry["name"], "the editor (session/new)", url=entry["url"],
                                              headers=pairs)
        else:
            raise RpcError(INVALID_PARAMS, f"MCP server {entry['name']!r}: only stdio and http are supported")
    return specs
