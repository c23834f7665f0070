"""The MCP client: tools, resources and prompts from Model Context Protocol servers (bantam
served as one, `bantam mcp`, is the front end bantam.mcpserve).

    servers.py  which servers: ~/.config/bantam/mcp.json and a trusted .mcp.json (no SDK import)
    cache.py    each server's tool list from its last start, keyed by its configuration's hash
    launch.py   the SDK's import and the servers' start, in a background thread
    hub.py      the client: one event-loop thread holding every server's connection
    tools.py    each server's tools as bantam tools named server__tool (cached ones at once)
    resources.py  the read_resource tool, and `@server:uri` in what the user types
    prompts.py  each server's prompts as slash commands /server:prompt
    results.py  what a server answers (a tool result, a resource, a prompt) as text

The SDK (`pip install 'bantam[mcp]'`) is imported only when an MCP file exists, so a run
without one pays two stat calls; and then in a background thread, as the servers start, so the
first model request waits for neither the SDK nor the servers. It offers the tools known by then
(a running server's, or its cached list); a server never seen before offers its tools from the
first request after its start has ended (`bantam mcp list` starts every server and caches its
tools; an editor's session/new waits, bounded, for the servers it names, acp/conversation.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..tools import ToolContext, Toolbox
    from .servers import ServerSpec

PROJECT_FILE = ".mcp.json"


def user_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base, "bantam", "mcp.json")


def project_file(directory: str | os.PathLike = ".") -> Path:
    return Path(directory, PROJECT_FILE).absolute()


def configured(directory: str | os.PathLike = ".") -> bool:
    """Cheap (two stat calls): is there any MCP file at all? Nothing else runs without one.
    (This module imports nothing heavier than pathlib, for the same reason.)"""
    return user_file().is_file() or project_file(directory).is_file()


def offer(box: Toolbox) -> Toolbox:
    """`box` with the MCP servers' tools added, when any are configured and mcp is on: the user's
    servers and those of the session's project (its folder's trusted .mcp.json). The session
    builder passes this as the tools' `ToolFront.extend`, so children's toolboxes get them too."""
    if box.ctx.cfg.mcp and configured(_folder(box)):  # two stat calls; the SDK loads only past this line
        attach(box)
    return box


def servers_here(enabled: bool, directory: str | os.PathLike) -> dict[str, ServerSpec]:
    """The servers a session in `directory` starts (the user's, and a trusted .mcp.json's): none
    when MCP is off (`enabled`), no file names any or the SDK is not installed."""
    if not (enabled and configured(directory) and has_sdk()):
        return {}
    from .servers import select
    return select(directory).servers


def _folder(box: Toolbox) -> str | os.PathLike:
    """The session's project folder (a hand-built context without one: paths as given)."""
    return box.ctx.folder if box.ctx.folder is not None else os.curdir


def attach(box: Toolbox) -> None:
    """Add the tools of every configured (and trusted) server to `box`; say what was left out."""
    from .servers import select, untrusted_notice
    selection = select(_folder(box))
    if selection.untrusted:
        tell(box.ctx, "untrusted", untrusted_notice(selection.untrusted))
    if not selection.servers:
        return
    if not has_sdk():  # a project's .mcp.json written for another agent must not stop bantam
        tell(box.ctx, "sdk", f"MCP servers ({', '.join(selection.servers)}) are configured, but the "
             "mcp package is not installed, so they were not started: pip install 'bantam[mcp]'")
        return
    from .tools import add_tools
    add_tools(box, selection.servers)


def has_sdk() -> bool:
    """Is the SDK installed? Found, not imported: its import is most of a second."""
    from importlib.util import find_spec
    try:
        return find_spec("mcp") is not None  # the SDK, not this package: names are absolute
    except (ImportError, ValueError):
        return False


def need_sdk() -> None:
    if not has_sdk():
        from ..errors import ConfigError
        raise ConfigError("MCP needs the mcp package: pip install 'bantam[mcp]'")


_told: set[str] = set()  # notices already shown in this process (children build toolboxes too)


def tell(ctx: ToolContext, key: str, message: str) -> None:
    """One notice line per subject and process."""
    if key not in _told:
        from ..events import Notice
        _told.add(key)
        ctx.on_event(Notice(message=message))
