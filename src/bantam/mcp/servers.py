"""Which MCP servers to start: the `mcpServers` files and the trust a project file needs.

Two files, in the format Claude Code and others read (`{"mcpServers": {NAME: {...}}}`):
- `~/.config/bantam/mcp.json` ($XDG_CONFIG_HOME respected): the user's own, always trusted.
- `.mcp.json` in the current directory: came with the repository, so its commands run only once
  the user has trusted this file's exact content (`bantam trust`, or the terminal's question): the
  one project trust of trust.py, kept with the project's other files; any edit asks again. A
  project server with the name of a user server replaces it. What the user is shown before
  trusting (`describe`) is everything that will run or be sent: command, args, cwd, env and
  headers as the file writes them, with the variables of the user's environment they expand.

A stdio server has `command` (and `args`, `env`, `cwd`); a Streamable HTTP one has `url` (and
`headers`). `timeout` (seconds per tool call, default `shell_timeout`) is bantam's own key.
`${VAR}` and `${VAR:-default}` in any of these strings take the value from bantam's environment.
Nothing here imports the MCP SDK: this module decides, `hub` connects.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Refused
from ..fsutil import read_setting
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
    shown: str = ""                  # the whole entry as the file writes it (see `shown`)

    def describe(self) -> str:
        return self.shown or self.url or " ".join([self.command, *self.args])


def read_specs(path: Path, own: bool = False) -> dict[str, ServerSpec]:
    """The servers a file names; {} when it does not exist. A bad file is a ConfigError. `own`:
    the user's file, which may be a link to anywhere (a project's stays inside the project)."""
    try:
        data = json.loads(read_setting(path, own=own))
    except (FileNotFoundError, NotADirectoryError):  # (a HOME under a file: no such file either)
        return {}
    except Refused as e:
        raise ConfigError(str(e)) from None
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
    spec = ServerSpec(name, where.partition(":")[0], command=_str(entry, "command", where),
                      args=tuple(_strings(entry, "args", where)), env=_table(entry, "env", where),
                      cwd=_str(entry, "cwd", where), url=_str(entry, "url", where),
                      headers=_table(entry, "headers", where), timeout=timeout)
    return replace(spec, shown=shown(entry, mask=Path(spec.source) == user_file()))


def shown(entry: dict, mask: bool = False) -> str:
    """An entry as the file writes it, unexpanded: the program (or URL) and its args, then cwd,
    env and headers, then which of the user's variables go to the server (`${OPENAI_API_KEY}`
    in a header sends that key). With `mask` (the user's own file, shown on screen), a literal
    value under a secret-looking name is ***."""
    from ..envpolicy import looks_secret
    parts = [entry.get("url") or " ".join([entry.get("command", ""), *entry.get("args", [])])]
    if entry.get("cwd"):
        parts.append(f"cwd={entry['cwd']}")
    for table in ("env", "headers"):
        for name, value in (entry.get(table) or {}).items():
            literal = mask and looks_secret(name) and not VARIABLE.search(value)
            parts.append(f"{table}.{name}={'***' if literal else value}")
    used = sorted({m.group(1) for m in VARIABLE.finditer(json.dumps(entry))})
    if used:
        parts.append(f"(sends your {', '.join(used)})")
    return "  ".join(parts)


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


# --- trust (one store for every project file: trust.py) ------------------------------------

def is_trusted(path: Path) -> bool:
    from ..trust import is_trusted
    return is_trusted(path)


@dataclass
class Selection:
    servers: dict[str, ServerSpec]
    untrusted: dict[str, ServerSpec]  # a project's servers waiting for the user's word


def select(directory: str | os.PathLike = ".") -> Selection:
    """The servers to start: the user's, plus the project's when its file is trusted."""
    servers = read_specs(user_file(), own=True)
    project = project_file(directory)
    wanted = read_specs(project)
    if wanted and is_trusted(project):
        return Selection({**servers, **wanted}, {})
    return Selection(servers, wanted)


def untrusted_notice(untrusted: dict[str, ServerSpec]) -> str:
    return (f"{PROJECT_FILE} is not trusted, so its MCP servers ({', '.join(untrusted)}) were not "
            f"started; read it, then run `bantam trust` to start them")


def untrusted_lines(untrusted: dict[str, ServerSpec]) -> list[str]:
    """What a project's untrusted .mcp.json would start, in full, for a trust question."""
    if not untrusted:
        return []
    return [f"{project_file()} wants to start these MCP servers:",
            *[f"  {s.name}: {s.describe()}" for s in untrusted.values()]]
