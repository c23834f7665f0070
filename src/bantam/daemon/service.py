"""`bantam daemon --install-service [DIR ...]`: a systemd user unit that keeps the daemon running.

The unit runs this Python with `-m bantam daemon DIR ...`, restarts it 10 s after it fails (not
after a bad configuration, exit status 2, which a restart cannot fix), and stops it with SIGTERM,
which the daemon handles as Ctrl+C; whatever is left after TimeoutStopSec is killed. The API key
and other secrets go in ~/.config/bantam/daemon.env (KEY=value lines, mode 600), not in the unit.
Nothing here runs systemctl: the commands to enable the unit are printed for the user to run.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Mapping

from ..fsutil import atomic_write

UNIT = """\
[Unit]
Description=bantam daemon: persistent agent(s) in {where}
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
WorkingDirectory={home}
ExecStart={command}
EnvironmentFile=-%h/.config/bantam/daemon.env
Environment=PYTHONUNBUFFERED=1
Restart=on-failure
RestartSec=10
RestartPreventExitStatus=2
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=30

[Install]
WantedBy=default.target
"""


def unit_name(dirs: list[Path]) -> str:
    """bantam-<first directory's name>.service: ./agent gives bantam-agent.service."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", dirs[0].resolve().name).strip("-") or "agent"
    return f"bantam-{slug}.service"


def unit_text(dirs: list[Path], options: list[str]) -> str:
    paths = [str(d.resolve()) for d in dirs]
    command = " ".join(_quote(a) for a in [sys.executable, "-m", "bantam", "daemon", *options, *paths])
    return UNIT.format(where=", ".join(p.replace("%", "%%") for p in paths),
                       home=str(dirs[0].resolve().parent).replace("%", "%%"),  # taken verbatim
                       command=command)


def _quote(arg: str) -> str:
    """systemd's quoting: plain when safe, else in double quotes with \\ and " escaped; a % is
    doubled, or systemd would read it as a specifier."""
    arg = arg.replace("%", "%%")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def install(dirs: list[Path], options: list[str], environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    config = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    target = config / "systemd" / "user" / unit_name(dirs)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, unit_text(dirs, options).encode("utf-8"), mode=0o644)
    name = target.name
    print(f"wrote {target}\n"
          f"Put the API key in ~/.config/bantam/daemon.env (ATTOBOT_API_KEY=..., chmod 600), then:\n"
          f"  systemctl --user daemon-reload\n"
          f"  systemctl --user enable --now {name}\n"
          f"  loginctl enable-linger $USER      # keep it running while you are logged out\n"
          f"  journalctl --user -u {name} -f    # one line per turn\n"
          f"  systemctl --user stop {name}      # stops it cleanly (SIGTERM)")
    return 0
