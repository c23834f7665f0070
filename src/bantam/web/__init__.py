"""`bantam web`: the browser view. Chat with the same agent loop as the terminal on the left,
watch the workspace's files on the right.

    bantam web                          # serve ./ on http://127.0.0.1:8765, print the link
    bantam web --workspace game --port 9000
    bantam web --set web_password=...   # a fixed password instead of a new token each start

The printed link carries a random token; opening it once sets a cookie and every request without
one of the two is refused. See docs/web.md for the panels and the viewer's security model.
Starlette and uvicorn (the `web` extra) are imported only here.
"""
from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import secrets
import socket
import sys
from pathlib import Path
from types import FrameType

from ..errors import ConfigError
from ..options import Parser

DEFAULT_PORT = 8765
DEFAULT_HOST = "127.0.0.1"
MIN_PASSWORD = 12  # web_password: shorter ones fall to guessing, however slowed


def parser() -> argparse.ArgumentParser:
    from ..options import common_options
    p = Parser(prog="bantam web", description="Chat with bantam and watch its work in a browser.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--workspace", default=".", metavar="DIR",
                   help="the project folder: the agent works there, the page shows its files (default: here)")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also accept requests for this Host name (a proxy's); repeatable")
    return common_options(p)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if not all(importlib.util.find_spec(name) for name in ("starlette", "uvicorn")):
        raise ConfigError("bantam web needs starlette and uvicorn: pip install -e '.[web]'")
    from ..options import flags as command_flags, load_config
    load_config(args)  # a bad flag or config file stops here, with its one-line message
    flags = carried_flags(command_flags(args), Path(args.workspace))
    # the session's folder, a value: tools, sessions, /cfg and /run work there, as `bantam` would
    # started in it; the process stays where it was started
    folder = open_workspace(Path.cwd() / args.workspace)
    return serve(flags, folder, args.host, args.port, tuple(args.allow_host))


def open_workspace(path: Path) -> Path:
    """The folder `--workspace` names, made when missing; absolute, its links resolved."""
    if not path.exists():
        path.mkdir(parents=True)
        print(f"bantam web: created {path}", file=sys.stderr)
    if not path.is_dir():
        raise ConfigError(f"--workspace {path}: not a directory")
    return path.resolve()


def carried_flags(flags: dict[str, str], workspace: Path) -> dict[str, str]:
    """The workspace's own config file is used when it has one. When it has none, the config file
    of the directory `bantam web` was started in still applies (command-line flags win)."""
    from .. import config
    here = Path.cwd()
    if (here / workspace).resolve() == here.resolve() or config.read_config_file(here / workspace)[0] is not None:
        return flags
    from .. import trust
    path, entries = config.read_config_file(here)
    # carried as flags, which outrank everything: so a boundary key only from a trusted file
    mine = path is not None and trust.is_trusted(path)
    return {**{key: value for key, value, _ in entries
               if mine or config.ALIASES.get(key, key) not in config.BOUNDARY_KEYS}, **flags}


def serve(flags: dict[str, str], folder: Path, host: str, port: int, allowed: tuple[str, ...] = ()) -> int:
    import uvicorn

    from .app import Keys, build_app
    from .files import FileView
    from .session import WebSession

    password = str(session_password(flags, folder) or "")
    if password and len(password) < MIN_PASSWORD:
        raise ConfigError(f"web_password: use at least {MIN_PASSWORD} characters (it has {len(password)})")
    session = WebSession(flags, folder)
    sock = listen(host, port)
    port = sock.getsockname()[1]
    # Listening beyond loopback is the user's choice of remote access: any Host then (as Jupyter's
    # allow_remote_access); on loopback only its own names, against DNS rebinding.
    hosts = tuple(h.lower() for h in allowed) + (() if is_loopback(host) else ("*",))
    keys = Keys(password or secrets.token_urlsafe(24), port, one_time=not password, hosts=hosts)
    workspace = FileView(folder, secrets=(session.chat.cfg.api_key, password))
    app = build_app(session, workspace, keys)
    shown = f"[{host}]" if ":" in host else host
    link = f"http://{shown}:{port}/" + ("" if password else f"?token={keys.secret}")
    print(f"bantam web: {link}", flush=True)
    print(f"bantam web: workspace {workspace.root}" + (" (password from web_password)" if password else "")
          + "; Ctrl+C stops", file=sys.stderr, flush=True)
    if not is_loopback(host):
        print("bantam web: warning: listening beyond this machine over plain HTTP; the token can be "
              "read on the way (put it behind HTTPS)", file=sys.stderr, flush=True)
    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            session.hub.close()  # open pages' event streams would hold the shutdown up
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                   timeout_graceful_shutdown=2))
    try:
        server.run(sockets=[sock])
    finally:
        session.close()
    return 0


def session_password(flags: dict[str, str], folder: Path) -> str:
    """`web_password` from --set or the folder's config file (a key of bantam's own: never sent to the API)."""
    from .. import session
    return session.load_config(flags, folder).web_password


def listen(host: str, port: int) -> socket.socket:
    """Bind before printing the link, so `--port 0` can print the port it got."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}; choose another --port") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
