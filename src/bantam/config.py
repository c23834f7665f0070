"""Configuration: flags over `.bantam.cfg` (else `model.cfg`) over the user's
`~/.config/bantam/config` over the environment over defaults.

Every key the seeds define is a field of `Config` below, with its default and a comment. Keys
bantam does not know are kept in `Config.forward` and sent with each API request (`top_p`,
`max_tokens`, ...). A bad value raises ConfigError naming where it came from:
`.bantam.cfg:3: temperature: expected a number, got 'hot'`.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import ConfigError

DEFAULT_ENDPOINT = "https://api.kilo.ai/api/openrouter"  # seed 001's default
DEFAULT_MODEL = "openrouter/free"
LOCAL_TEMPERATURE = 0.2  # small local models wander at the seed's 0.7 (SmolLM2's authors use 0.2)
ANTHROPIC_ENDPOINT = "https://api.anthropic.com/v1"  # when provider=anthropic names no endpoint
OPENAI_ENDPOINT = "https://api.openai.com/v1"
# A key from the environment with no endpoint configured goes to its own API, nowhere else:
# variable -> (provider, endpoint, model when none is configured). LLM_API_KEY without LLM_URL
# is the Agent seed's, whose documented default is Anthropic's Messages API.
KEY_HOMES = {
    "LLM_API_KEY": ("anthropic", ANTHROPIC_ENDPOINT, "claude-haiku-4-5"),
    "ANTHROPIC_API_KEY": ("anthropic", ANTHROPIC_ENDPOINT, "claude-haiku-4-5"),
    "OPENAI_API_KEY": ("openai", OPENAI_ENDPOINT, "gpt-4o-mini"),
}
FALLBACK_CONTEXT_WINDOW = 200_000
FIBONACCI_DELAYS = (1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0)
CONFIG_FILES = (".bantam.cfg", "model.cfg")  # the first one present wins
PROVIDERS = ("openai", "anthropic", "local")
ALIAS = "alias."  # `alias.fast=openrouter/some/model`: `--model fast` means that model


@dataclass(frozen=True)
class Config:
    endpoint: str = DEFAULT_ENDPOINT      # API base; bantam appends /chat/completions or /messages
    model: str = DEFAULT_MODEL
    temperature: float = 0.7
    api_key: str = field(default="", repr=False)  # bearer token; never written anywhere
    stream: bool = True                   # stream tokens as they arrive
    color: str = "auto"                   # auto (terminal only), always, never
    timeout: float = 300.0                # seconds to connect and between bytes of a response
    shell_timeout: float = 120.0          # seconds before shell_exec kills the process group
    max_al_iterations: int = 1000         # model requests per turn
    context_window: int | None = None     # used when the server does not say (then 200000)
    reasoning_effort: str = "high"        # forwarded to the API; empty to leave it out
    bantam_tools_dir: str = ""            # extra shell tools, announced in the system prompt
    provider: str = ""                    # openai | anthropic | local; inferred from endpoint
    tools: tuple[str, ...] = ("shell_exec", "write_file", "run_subagent")
    tool_budget: int = 200                # tool calls per turn
    max_fanout: int = 8                   # sub-agents one call may start
    tool_output_limit: int = 30_000       # bytes of tool output the model sees; the rest is clipped
    mcp: bool = True                      # false: no MCP server starts, whatever mcp.json files say
    model_path: str = ""                  # a local GGUF file for provider=local (default: bundled)
    web_password: str = field(default="", repr=False)  # `bantam web`: instead of a random token
    env_passthrough: tuple[str, ...] = ()  # secret-looking variables commands may see (GH_TOKEN, AWS_*)
    n_ctx: int | None = None              # provider=local: context size (default 8192)
    n_threads: int | None = None          # provider=local: CPU threads (default: llama.cpp's)
    local_tool_first: str = "auto"        # provider=local: a request that needs the machine gets a tool call first
    local_example: bool = True            # provider=local: show the model one worked tool call
    local_commands: bool = True           # provider=local: shell_exec commands start with a known program
    local_grounded: bool = True           # provider=local: an answer after a tool result uses its words
    retry_delays: tuple[float, ...] = FIBONACCI_DELAYS  # seconds between retries of a request
    max_tokens_limit: int = 32_768        # an answer cut at max_tokens is asked again, doubled, up to this
    sandbox: str = "workspace"            # off | workspace | read-only: around the model's commands (sandbox.py)
    sandbox_writable: tuple[str, ...] = ()  # writable roots for sandbox=workspace (default: the working dir)
    sandbox_network: bool = False         # sandboxed commands may use the network
    approval: str = "on-request"          # never | on-request | always: when a person is asked (approval.py)
    forward: Mapping[str, Any] = field(default_factory=dict)  # unknown keys, sent to the API
    file: str = ""                        # the config file that was read, if any
    warning: str = ""                     # something the user should hear about the config file
    embedded: bool = False                # nothing configured: running the bundled local model

    def with_values(self, **changes: Any) -> "Config":
        return replace(self, **changes)


# --- parsers: text -> value, raising ValueError with a short reason -------------------------

def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "yes", "on", "1"):
        return True
    if low in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _number(kind: type, minimum: float | None = None) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text.strip())
        except ValueError:
            raise ValueError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if not math.isfinite(value):  # nan, inf, 1e400
            raise ValueError(f"expected a finite number, got {text!r}")
        if minimum is not None and value < minimum:
            raise ValueError(f"must be at least {minimum}, got {text!r}")
        return value
    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {text!r}")
        return value
    return parse


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _delays(text: str) -> tuple[float, ...]:
    parse = _number(float, 0)
    return tuple(parse(part) for part in text.split(",") if part.strip())


def _text(text: str) -> str:
    return text.strip()


def _endpoint(text: str) -> str:
    url = text.strip().rstrip("/")
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {text.strip()!r}")
    return url


def _tool_names(text: str) -> tuple[str, ...]:
    from .tools import REGISTRY  # names only; no tool module is imported
    names = _names(text)
    unknown = [n for n in names if n not in REGISTRY and "__" not in n]  # server__tool: MCP's
    if unknown:
        raise ValueError(f"unknown tool {unknown[0]!r} (known: {', '.join(REGISTRY)})")
    return names


PARSERS: dict[str, Callable[[str], Any]] = {
    "endpoint": _endpoint,
    "model": _text,
    "temperature": _number(float, 0),
    "api_key": _text,
    "stream": _bool,
    "color": _choice("auto", "always", "never"),
    "timeout": _number(float, 0.001),
    "shell_timeout": _number(float, 0.001),
    "max_al_iterations": _number(int, 1),
    "context_window": _number(int, 1),
    "reasoning_effort": _text,
    "bantam_tools_dir": _text,
    "provider": _choice(*PROVIDERS),
    "tools": _tool_names,
    "tool_budget": _number(int, 1),
    "max_fanout": _number(int, 1),
    "tool_output_limit": _number(int, 200),
    "mcp": _bool,
    "model_path": _text,
    "web_password": _text,
    "env_passthrough": _names,
    "n_ctx": _number(int, 16),
    "n_threads": _number(int, 1),
    "local_tool_first": _choice("auto", "off"),
    "local_example": _bool,
    "local_commands": _bool,
    "local_grounded": _bool,
    "retry_delays": _delays,
    "max_tokens_limit": _number(int, 1),
    "sandbox": _choice("off", "workspace", "read-only"),
    "sandbox_writable": _names,
    "sandbox_network": _bool,
    "approval": _choice("never", "on-request", "always"),
}

# environment variable -> key; the config file and flags win over these
ENVIRONMENT = {
    "LLM_URL": "endpoint",
    "LLM_MODEL": "model",
    "AGENT_TOOL_BUDGET": "tool_budget",
    "AGENT_MAX_FANOUT": "max_fanout",
    "BANTAM_TOOLS_DIR": "bantam_tools_dir",
}


def forwarded_value(text: str) -> Any:
    """`max_tokens=100` forwards 100, `stop=["x"]` a list, anything not JSON as a string.
    NaN and Infinity are not JSON (no API accepts them): ValueError."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
        if isinstance(value, float) and not math.isfinite(value):  # 1e400
            raise _NotFinite(text)
        return value
    except _NotFinite:
        raise ValueError(f"expected a finite value, got {text.strip()!r}") from None
    except ValueError:
        if text.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
            raise ValueError(f"expected a finite value, got {text.strip()!r}") from None
        return text.strip()


class _NotFinite(Exception):
    pass


def _no_constant(name: str) -> Any:
    raise _NotFinite(name)


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's own file, below every project's: `$XDG_CONFIG_HOME/bantam/config`, else
    `~/.config/bantam/config`."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config", "bantam", "config")


def read_config_file(directory: str | os.PathLike = ".") -> tuple[Path | None, list[tuple[str, str, str]]]:
    """Return the config file used and its (key, value, where) entries, in file order."""
    for name in CONFIG_FILES:
        path = Path(directory, name)
        if path.is_file():
            break
    else:
        return None, []
    return path, read_entries(path)


def read_entries(path: Path) -> list[tuple[str, str, str]]:
    """A config file's (key, value, "file:line") entries, in file order."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line[:60]!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        entries.append((key, value, f"{path}:{number}"))
    return entries


EMBEDDED_NOTICE = ("no endpoint configured: answering with the bundled SmolLM2-135M-Instruct on this "
                   "machine (set endpoint= and model= in .bantam.cfg, or --endpoint, for a remote model)")


def exposed_key_warning(path: Path | None, entries: list[tuple[str, str, str]]) -> str:
    """A config file holding an API key that other users can read deserves a word."""
    if path is None or not any(key == "api_key" and value for key, value, _ in entries):
        return ""
    try:
        exposed = path.stat().st_mode & 0o077
    except OSError:
        return ""
    return f"{path} holds an api_key and other users can read it (chmod 600 {path})" if exposed else ""


def infer_provider(endpoint: str) -> str:
    return "anthropic" if "/v1/messages" in endpoint or "anthropic.com" in endpoint else "openai"


def load(flags: Mapping[str, str] | None = None, directory: str | os.PathLike = ".",
         environ: Mapping[str, str] | None = None) -> Config:
    """Build the Config from every layer. `flags` maps keys to values given on the command line."""
    environ = os.environ if environ is None else environ
    raw, path, entries = layers(flags, directory, environ)
    values: dict[str, Any] = {}
    forward: dict[str, Any] = {}
    aliases = {key[len(ALIAS):]: text.strip() for key, (text, _) in raw.items() if key.startswith(ALIAS)}
    for key, (text, where) in raw.items():
        parser = PARSERS.get(key)
        if key.startswith(ALIAS):
            continue
        if key == "model":  # `--model fast` with `alias.fast=openrouter/...` in a config file
            text = aliases.get(text.strip(), text)
        try:
            if parser is None:
                forward[key] = forwarded_value(text)
            else:
                values[key] = parser(text)
        except ValueError as e:
            raise ConfigError(f"{where}: {key}: {e}") from None
    if not values.get("api_key") and "endpoint" not in values:
        _route_env_key(values, environ)
    embedded = False
    if not values.get("provider") and "endpoint" not in values:
        from .providers.local import available  # the bundled model, when the local extra is installed
        embedded = available()
        if embedded:
            values["provider"] = "local"
    if not values.get("provider"):
        values["provider"] = infer_provider(values.get("endpoint", DEFAULT_ENDPOINT))
    if values["provider"] == "local" and "temperature" not in values:
        values["temperature"] = LOCAL_TEMPERATURE
    elif values["provider"] == "anthropic" and "endpoint" not in values:
        values["endpoint"] = ANTHROPIC_ENDPOINT
    withheld = ""
    if not values.get("api_key") and not embedded and values.get("endpoint"):
        fallback = "ANTHROPIC_API_KEY" if values["provider"] == "anthropic" else "OPENAI_API_KEY"
        var = "LLM_API_KEY" if environ.get("LLM_API_KEY") else fallback
        withheld = withheld_key(var, values["endpoint"], raw.get("endpoint"), path, environ)
        values["api_key"] = "" if withheld else environ.get(var) or ""
    _protect(values)
    return Config(**values, forward=forward, file=str(path) if path else "", embedded=embedded,
                  warning=exposed_key_warning(path, entries) or withheld)


def withheld_key(var: str, endpoint: str, source: tuple[str, str] | None, path: Path | None,
                 environ: Mapping[str, str]) -> str:
    """Why the key in `var` must not go to `endpoint`, or "" when it may. A project's file (a
    cloned repository's) may not send the user's key elsewhere than its own API or an endpoint
    the user chose: a flag, the user's file or the environment."""
    if not environ.get(var) or source is None or path is None or not source[1].startswith(f"{path}:"):
        return ""  # no key, or an endpoint the user chose
    chosen = [environ.get("LLM_URL", ""), KEY_HOMES[var][1]]
    user = user_config_path(environ)
    chosen += [value for key, value, _ in (read_entries(user) if user.is_file() else []) if key == "endpoint"]
    if any(c and _host(c) == _host(endpoint) for c in chosen):
        return ""
    return (f"{source[1]} sets endpoint={endpoint}, so your {var} is not sent (a project's file may not "
            f"send your key to a server you did not choose); to send it there, put api_key= in {path}, "
            f"or pass --endpoint {endpoint}, or set endpoint={endpoint} in {user}")


def _host(url: str) -> str:
    """`scheme://host:port` of an endpoint: where a key would be sent."""
    from urllib.parse import urlsplit
    parts = urlsplit(url.strip().lower())
    return f"{parts.scheme}://{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _route_env_key(values: dict[str, Any], environ: Mapping[str, str]) -> None:
    """No endpoint and no api_key configured: a key in the environment picks its own API (and a
    provider= setting picks among the keys). Without one, the defaults apply with no key."""
    for var, (provider, endpoint, model) in KEY_HOMES.items():
        if environ.get(var) and values.get("provider", provider) == provider:
            values.update(provider=provider, endpoint=endpoint, api_key=environ[var])
            values.setdefault("model", model)
            return


def _protect(values: dict[str, Any]) -> None:
    """Secrets become *** wherever bantam writes; the passthrough list shapes the tool environment."""
    from . import envpolicy
    envpolicy.register_secret(values.get("api_key"))
    envpolicy.register_secret(values.get("web_password"))
    envpolicy.set_passthrough(values.get("env_passthrough", ()))


def layers(flags: Mapping[str, str] | None, directory: str | os.PathLike,
           environ: Mapping[str, str]) -> tuple[dict[str, tuple[str, str]], Path | None, list]:
    """Every key's text and where it came from, the higher layer winning: flags > project file
    > user file > environment. Also the project file and its entries."""
    raw: dict[str, tuple[str, str]] = {}  # key -> (text, where it came from)
    for var, key in ENVIRONMENT.items():
        if environ.get(var):
            raw[key] = (environ[var], f"environment variable {var}")
    user = user_config_path(environ)
    for key, value, where in read_entries(user) if user.is_file() else []:
        raw[key] = (value, where)
    path, entries = read_config_file(directory)
    for key, value, where in entries:
        raw[key] = (value, where)
    for key, value in (flags or {}).items():
        raw[key] = (value, f"command-line {key}")
    return raw, path, entries


def known_keys() -> list[str]:
    return [f.name for f in fields(Config) if f.name in PARSERS]


def check_value(key: str, value: str) -> Any:
    """Parse one value as the config file would; ConfigError if it is bad."""
    if not key.replace("_", "a").replace(".", "a").isalnum() or not key[:1].isalpha():  # alias.NAME
        raise ConfigError(f"{key!r} is not a configuration key")
    if "\n" in value or "\r" in value:  # it would become a second line of the config file
        raise ConfigError(f"{key}: a value is one line; this one holds a line break")
    parser = PARSERS.get(key)
    try:
        return parser(value) if parser else forwarded_value(value)
    except ValueError as e:
        raise ConfigError(f"{key}: {e}") from None


def write_value(key: str, value: str, directory: str | os.PathLike = ".", user: bool = False) -> Path:
    """Set `key=value` in `.bantam.cfg` (with `user`, in the user's own file), keeping every other
    line; starts from model.cfg if that is the file in use, so that creating `.bantam.cfg` hides
    nothing."""
    from .fsutil import atomic_write, private_dir
    check_value(key, value)
    source, _ = read_config_file(directory)
    if user:
        target = user_config_path()
        source = target if target.is_file() else None
        private_dir(target.parent)
    lines = source.read_text(encoding="utf-8").splitlines() if source else []
    kept, done = [], False
    for line in lines:
        name, sep, _ = line.strip().partition("=")
        if sep and name.strip() == key and not line.lstrip().startswith("#"):
            if not done:
                kept.append(f"{key}={value}")
            done = True
            continue
        kept.append(line)
    if not done:
        kept.append(f"{key}={value}")
    target = user_config_path() if user else Path(directory, CONFIG_FILES[0])
    atomic_write(target, ("\n".join(kept) + "\n").encode("utf-8"), mode=0o600)
    return target
