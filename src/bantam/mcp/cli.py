"""`bantam mcp [serve|list|trust]`: serve bantam over stdio, show the servers, trust a project's.

    bantam mcp            serve bantam over stdio (the same as `bantam mcp serve`)
    bantam mcp list       start the configured servers and show their state and tools
    bantam mcp trust      trust this directory's .mcp.json as it is now (its servers may start)
"""
from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from . import need_sdk, servers


def main(argv: list[str]) -> int:
    from ..cli import common_options, load_config
    p = common_options(argparse.ArgumentParser(prog="bantam mcp", description=__doc__,
                                               formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("action", nargs="?", default="serve", choices=("serve", "list", "trust"))
    args = p.parse_args(argv)
    if args.action == "trust":
        return trust_project()
    cfg = load_config(args)
    if args.action == "list":
        print(listing(cfg.mcp, start=True))
        return 0
    need_sdk()
    from .serve import serve
    return serve(cfg)


def trust_project() -> int:
    print(trust_project_file())
    return 0


def trust_project_file() -> str:
    path = servers.project_file()
    specs = servers.read_specs(path)
    if not specs:
        raise ConfigError(f"no MCP servers to trust: {path} does not exist or names none")
    servers.trust(path)
    lines = [f"trusted {spec.name}: {spec.describe()}" for spec in specs.values()]
    return "\n".join([*lines, f"({path} as it is now; an edit to it asks again)"])


def listing(enabled: bool, start: bool) -> str:
    """The servers, their state and tools: `bantam mcp list` and the terminal's /mcp."""
    if not enabled:
        return "MCP is off (mcp=false)"
    selection = servers.select()
    lines = []
    if selection.servers and start:
        need_sdk()
        from .hub import hub
        hub().connect(selection.servers)
    known = _connections()
    for name, spec in selection.servers.items():
        c = known.get(name)
        state = c.state if c else "not started"
        lines.append(f"{name}  [{state}]  {spec.describe()}  ({spec.source})")
        if c:
            from .tools import tool_name
            lines += [f"    {tool_name(name, t.name)}" for t in c.tools]
    for name, spec in selection.untrusted.items():
        lines.append(f"{name}  [not trusted: run `bantam mcp trust`]  {spec.describe()}  ({spec.source})")
    if not lines:
        return (f"no MCP servers configured (add them to {servers.user_file()} or "
                f"./{servers.PROJECT_FILE})")
    return "\n".join(lines)


def _connections() -> dict:
    if "bantam.mcp.hub" not in sys.modules:  # nothing was started in this process
        return {}
    from .hub import _hub
    return dict(_hub.connections) if _hub else {}


# --- the terminal's /mcp and its question at start -------------------------------------------

def ask_trust(cfg, read) -> bool:
    """In the terminal, before the first prompt: may this project's untrusted servers start?"""
    if not cfg.mcp:
        return False
    untrusted = servers.select().untrusted
    if not untrusted:
        return False
    try:
        return read(servers.trust_question(untrusted)).strip().lower() in ("y", "yes")
    except (KeyboardInterrupt, EOFError):
        return False


def trust_note(cfg) -> str:
    """For a front end that cannot ask at start (the browser view): how to trust, or ""."""
    untrusted = servers.select().untrusted if cfg.mcp else {}
    if not untrusted:
        return ""
    lines = [f"  {s.name}: {s.describe()}" for s in untrusted.values()]
    return "\n".join([f"{servers.project_file()} names MCP servers that are not trusted yet:", *lines,
                      "Read it; `/mcp trust` trusts it and starts them."])


def mcp_command(arg: str, cfg, box) -> str:
    """`/mcp` lists the servers, their state and tools; `/mcp trust` trusts ./.mcp.json and
    starts its servers in this session."""
    if arg == "trust":
        trust_project_file()
        from . import attach
        attach(box)
    elif arg not in ("", "list"):
        return "usage: /mcp [trust]"
    return listing(cfg.mcp, start=False)
