"""`bantam mcp [serve|list|trust]`: serve bantam over stdio, show the servers, trust a project's.

    bantam mcp            serve bantam over stdio (the same as `bantam mcp serve`)
    bantam mcp list       start the configured servers and show their state and tools
    bantam mcp trust      the same as `bantam trust`: this folder's files as they are now
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..options import Parser
from ..sanitize import visible
from ..mcp import need_sdk, servers


def main(argv: list[str]) -> int:
    from ..options import common_options, load_config
    p = common_options(Parser(prog="bantam mcp", description=__doc__,
                                               formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("action", nargs="?", default="serve", choices=("serve", "list", "trust"))
    args = p.parse_args(argv)
    if args.action == "trust":
        from ..commands import trust_main
        return trust_main([])
    cfg = load_config(args)
    if args.action == "list":
        print(listing(cfg.mcp, True, Path.cwd()))
        return 0
    need_sdk()
    from .serve import serve
    return serve(cfg, Path.cwd())  # a front end: its workspace is the folder it was started in


def listing(enabled: bool, start: bool, directory: str | os.PathLike) -> str:
    """The servers of the project in `directory`, their state and tools: `bantam mcp list` and the
    terminal's /mcp. What a file or a server wrote is shown `visible`: a project's .mcp.json could
    otherwise rewrite, with escape sequences, the very command the user reads before trusting it."""
    if not enabled:
        return "MCP is off (mcp=false)"
    selection = servers.select(directory)
    lines = []
    if selection.servers and start:
        need_sdk()
        from ..mcp.hub import hub
        hub().connect(selection.servers)
    known = _connections()
    for name, spec in selection.servers.items():
        c = known.get(name)
        state = c.state if c else "not started"
        lines.append(f"{visible(name)}  [{visible(state)}]  {visible(spec.describe())}  ({visible(spec.source)})")
        if c:
            from ..mcp.tools import tool_name
            lines += [f"    {visible(tool_name(name, t.name))}" for t in c.tools]
            lines += [f"    /{visible(name)}:{visible(p.name)}" for p in c.prompts]
    for name, spec in selection.untrusted.items():
        lines.append(f"{visible(name)}  [not trusted: run `bantam trust`]  {visible(spec.describe())}  "
                     f"({visible(spec.source)})")
    if not lines:
        return (f"no MCP servers configured (add them to {servers.user_file()} or "
                f"./{servers.PROJECT_FILE})")
    return "\n".join(lines)


def _connections() -> dict:
    if "bantam.mcp.hub" not in sys.modules:  # nothing was started in this process
        return {}
    from ..mcp.hub import _hub
    return dict(_hub.connections) if _hub else {}


# --- the terminal's /mcp ---------------------------------------------------------------

def mcp_command(arg: str, cfg, box) -> str:
    """`/mcp` lists the servers, their state and tools (the front end handles `/mcp trust`)."""
    if arg not in ("", "list"):
        return "usage: /mcp [trust]"
    return listing(cfg.mcp, False, box.ctx.folder)
