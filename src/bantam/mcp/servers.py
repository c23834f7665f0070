"""Which MCP servers to start: the `mcpServers` files and the trust a project file needs.

Two files, in the format Claude Code and others read (`{"mcpServers": {NAME: {...}}}`):
- `~/.config/bantam/mcp.json` ($XDG_CONFIG_HOME respected): the user's own, always trusted.
- `.mcp.json` in the current directory: came with the repository, so its commands run only once
  the user has trusted this file's exact content (`bantam mcp trust`, or the terminal's question).
  Trust is kept in `~/.bantam/mcp-trust.json` as {absolute path: sha256 of the content}; any edit
  to the file asks again. A project server with the name of a user server replaces it.

A stdio server has `command` (and `args`, `env`, `cwd`); a Streamable HTTP one has `url` (and
`headers`). `timeout` (seconds per tool call, default `shell_timeout`) is bantam's own key.
`${VAR}` and `${VAR:-default}` in any of these strings take the value from bantam's environment.
Nothing here imports the MCP SDK: this module decides, `hub` connects.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..fsutil import atomic_write, bantam_home, private_dir
from . import PROJECT_FILE, project_file, user_file

NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")  # so that `name__tool` stays a valid tool name


@dataclass(frozen=True)
class ServerSpec:
    name: str
    source: str                      # the file it came from, for messages
    command: str = ""                # stdio: the program and its arguments
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""                    # Streamable HTTP
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold a token
    timeout: float | None = None     # seconds per tool call; None: the config's shell_timeout

    def describe(self) -> str:
        return self.url or " ".join([self.command, *self.args])


def read_specs(path: Path) -> dict[str, ServerSpec]:
    """The servers a file names; {} when it does not exist. A bad file is a ConfigError."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    servers = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: expected an object with an \"mcpServers\" object")
    return {name: _spec(name, entry, f"{path}: mcpServers.{name}") for name, entry in servers.items()}


def _spec(name: str, entry: Any, where: str) -> ServerSpec:
    if not NAME.match(name):
        raise ConfigError(f"{where}: a server name may hold only letters, digits, _ and - (at most 40)")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object")
    if bool(entry.get("command")) == bool(entry.get("url")):
        raise ConfigError(f"{where}: give either \"command\" (stdio) or \"url\" (Streamable HTTP)")
    timeout = entry.get("timeout")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConfigError(f"{where}.timeout: expected a positive number of seconds")
    return ServerSpec(name, where.partition(":")[0], command=_str(entry, "command", where),
                      args=tuple(_strings(entry, "args", where)), env=_table(entry, "env", where),
                      cwd=_str(entry, "cwd", where), url=_str(entry, "url", where),
                      headers=_table(entry, "headers", where), timeout=timeout)


def _str(entry: dict, key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}: expected a string")
    return _expand(value, f"{where}.{key}")


def _strings(entry: dict, key: str, where: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.{key}: expected a list of strings")
    return [_expand(v, f"{where}.{key}") for v in value]


def _table(entry: dict, key: str, where: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}.{key}: expected an object of strings")
    return {k: _expand(v, f"{where}.{key}.{k}") for k, v in value.items()}


VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(text: str, where: str) -> str:
    """`${VAR}` and `${VAR:-default}`, as Claude Code expands them, so that a token can stay in
    the environment instead of the file. A variable that is unset and has no default is an error."""
    def value(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is None:
            raise ConfigError(f"{where}: ${{{name}}} is not set (give it a default: ${{{name}:-...}})")
        return default
    return VARIABLE.sub(value, text)


# --- trust -------------------------------------------------------------------------------

def _trust_path() -> Path:
    return bantam_home() / "mcp-trust.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trusted() -> dict[str, str]:
    try:
        data = json.loads(_trust_path().read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_trusted(path: Path) -> bool:
    try:
        return _trusted().get(str(path)) == _digest(path)
    except OSError:
        return False


def trust(path: Path) -> None:
    """Remember this file's current content as trusted."""
    trusted = _trusted()
    trusted[str(path)] = _digest(path)
    private_dir(bantam_home())
    atomic_write(_trust_path(), json.dumps(trusted, indent=1).encode(), 0o600)


@dataclass
class Selection:
    servers: dict[str, ServerSpec]
    untrusted: dict[str, ServerSpec]  # a project's servers waiting for the user's word


def select(directory: str | os.PathLike = ".") -> Selection:
    """The servers to start: the user's, plus the project's when its file is trusted."""
    servers = read_specs(user_file())
    project = project_file(directory)
    wanted = read_specs(project)
    if wanted and is_trusted(project):
        return Selection({**servers, **wanted}, {})
    return Selection(servers, wanted)


def untrusted_notice(untrusted: dict[str, ServerSpec]) -> str:
    return (f"{PROJECT_FILE} is not trusted, so its MCP servers ({', '.join(untrusted)}) were not "
            f"started; read it, then run `bantam mcp trust` to start them")


def trust_question(untrusted: dict[str, ServerSpec]) -> str:
    lines = [f"  {s.name}: {s.describe()}" for s in untrusted.values()]
    return "\n".join([f"{project_file()} wants to start these MCP servers:", *lines,
                      "Trust this file and start them? [y/N] "])
