"""The tools each MCP server listed when it last started, kept so that a run need not wait for it.

    ~/.bantam/mcp/tools/KEY.json    {"server": "time 1.2.0", "tools": [{name, title, description, inputSchema}],
                                     "resources": true}

KEY is the SHA-256 of everything that decides which program runs and how: the server's name,
command, args, env (names and values), cwd, url and headers. A changed entry is a new key, so one
configuration never gets another's tools, and nothing readable of an entry (an env value, a
header's token) is written. The server's own name and version, learnt from its handshake, are
kept in the file: a start that reports another version or lists other tools rewrites it.

Whether a server may start at all (a project's .mcp.json needs trust) is decided before this is
read (`servers.select`): the cache is consulted only for servers that would start anyway.
No SDK import here: reading the cache is what spares a run the SDK's import.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fsutil import atomic_write, bantam_home, private_dir
from .servers import ServerSpec

FORMAT = 1  # part of every key: a change of this file's layout starts a fresh cache


@dataclass(frozen=True)
class ToolInfo:
    """One tool as a server lists it: what the model is offered (no SDK type needed)."""
    name: str
    description: str = ""
    title: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "description": self.description,
                "inputSchema": self.input_schema}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolInfo:
        return cls(str(data["name"]), str(data.get("description") or ""), str(data.get("title") or ""),
                   dict(data.get("inputSchema") or {}))


@dataclass(frozen=True)
class Cached:
    server: str                 # "name version" from the server's handshake ("" when it gave none)
    tools: tuple[ToolInfo, ...]
    resources: bool = False     # it has resources to read: the read_resource tool is offered


def key(spec: ServerSpec) -> str:
    """The hash of the launch configuration (the same as written means the same program)."""
    launch = [FORMAT, spec.name, spec.command, list(spec.args), sorted(spec.env.items()), spec.cwd,
              spec.url, sorted(spec.headers.items())]
    return hashlib.sha256(json.dumps(launch).encode("utf-8")).hexdigest()


def path(spec: ServerSpec) -> Path:
    return bantam_home() / "mcp" / "tools" / f"{key(spec)}.json"


def load(spec: ServerSpec) -> Cached | None:
    """What this configuration's server listed last time; None when never seen (or unreadable)."""
    try:
        data = json.loads(path(spec).read_bytes())
        return Cached(str(data.get("server") or ""), tuple(ToolInfo.from_json(t) for t in data["tools"]),
                      data.get("resources") is True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent or damaged: start as if new
        return None


def save(spec: ServerSpec, cached: Cached) -> bool:
    """Keep what the server listed now; True when it differs from what was kept."""
    if load(spec) == cached:
        return False
    data = {"server": cached.server, "tools": [t.to_json() for t in cached.tools], "resources": cached.resources}
    target = path(spec)
    private_dir(target.parent)
    atomic_write(target, json.dumps(data, ensure_ascii=False).encode("utf-8"), mode=0o600)
    return True
