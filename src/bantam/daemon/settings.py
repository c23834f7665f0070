"""An agent directory's config.json: the seed's fields and tunables, their defaults, validation.

Layers, lowest first: the defaults below; config.json; the command line (`--model`,
`--endpoint`, `--provider`, `--set KEY=VALUE`). Keys of bantam's own configuration (`timeout`,
`retry_delays`, `stream`, ...) may appear in config.json too and go to the model client; "request"
holds extra fields sent with every API request (`{"max_tokens": 2000}`). The API key comes from
the environment first (ATTOBOT_API_KEY, LLM_API_KEY), then config.json's api_key, then
OPENAI_API_KEY / ANTHROPIC_API_KEY. A bad value stops the daemon with one line naming the file.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from .. import config as bantam_config
from ..envpolicy import register_secret
from ..errors import ConfigError

KEY_ENV = ("ATTOBOT_API_KEY", "LLM_API_KEY")  # over config.json's api_key (the seed's precedence)


@dataclass(frozen=True)
class Settings:
    # chat (all optional: no telegram_token, no chat channel)
    telegram_token: str = ""
    telegram_chat_id: str = ""            # required with a token: the one chat accepted
    telegram_thread_id: str = ""          # a forum topic, when the chat is a supergroup
    telegram_api_base: str = "https://api.telegram.org"  # a local fake Bot API in tests
    telegram_poll_s: float = 30.0         # getUpdates long-poll timeout
    # the model
    api_key: str = ""
    model: str = "deepseek-v4-pro"
    api_base: str = "https://api.deepseek.com/v1"
    temperature: float = 1.0
    reasoning_effort: str = "medium"
    context_tokens: int = 100_000         # auto-stash past 80% of this (4 characters a token)
    multimodal_support: bool = False      # READ_FILE sends images to the model
    provider: str = ""                    # "" = OpenAI-compatible; anthropic, local, or providers/<name>.py
    opt: tuple[str, ...] = ()             # opt/ add-ons copied in at first boot ("tools/nudge")
    primary_dir: str = "agent"            # a subconscious: the directory it reviews
    # tunables
    life_tail: int = 30                   # LIFE.md lines that ride along after the conversation
    memory_limit: int = 10_000            # MEMORY.md characters before its middle is elided
    tool_timeout: float = 30.0            # seconds in the foreground before a tool is backgrounded
    tool_output_limit: int = 5_000        # characters of one result; the rest is clipped and stashed
    trigger_tick: float = 30.0            # seconds between trigger scans
    cmd_timeout: float = 60.0             # seconds a trigger's cmd may run
    heartbeat_s: float = 225.0            # the heartbeat's tick; 0 = no heartbeat
    heartbeat_max_s: float = 3600.0       # ... backed off to this while idle
    inbox_tick: float = 10.0              # seconds between mail_inbox/ scans
    inbox_preview: int = 2_000            # characters of a mail shown in its message
    chat_msg_max: int = 4_000             # characters per chat message (Telegram allows 4096)
    bash_timeout: float = 3600.0          # BASH kills its command's process group after this
    search_url: str = "https://html.duckduckgo.com/html/"  # SEARCH posts q= here
    watch: str = "auto"                   # auto: inotify via watchfiles when installed; poll
    poll_s: float = 1.0                   # polling interval without inotify
    retry_turn_s: float = 15.0            # an unanswered turn (model down) is tried again after this,
    retry_turn_max_s: float = 300.0       # ... doubling each time, up to this
    outbox_retry_max_s: float = 60.0      # a Telegram send that failed is retried, backing off to this


NAMES = {f.name: f for f in fields(Settings)}
POSITIVE = {"context_tokens", "life_tail", "memory_limit", "tool_timeout", "tool_output_limit",
            "trigger_tick", "cmd_timeout", "heartbeat_max_s", "inbox_tick", "inbox_preview",
            "chat_msg_max", "bash_timeout", "telegram_poll_s", "poll_s", "retry_turn_s",
            "retry_turn_max_s", "outbox_retry_max_s"}
CLI_ALIASES = {"endpoint": "api_base"}  # bantam's flag names for the seed's fields


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing (every agent directory needs a config.json)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a JSON object, got {type(data).__name__}")
    return data


def load(path: Path, cli: Mapping[str, str] | None = None,
         environ: Mapping[str, str] | None = None) -> tuple[Settings, bantam_config.Config]:
    """The daemon's settings and the bantam Config its model client uses."""
    environ = os.environ if environ is None else environ
    data = read_json(path)
    request = data.pop("request", {})
    if not isinstance(request, dict):
        raise ConfigError(f"{path}: request: expected an object of API request fields")
    values, passthrough = _split(data, str(path), parse_text=False)
    cli_values, cli_pass = _split({CLI_ALIASES.get(k, k): v for k, v in (cli or {}).items()},
                                  "command line", parse_text=True)
    settings = Settings(**{**values, **cli_values})
    check(settings, str(path))
    register_secret(settings.telegram_token)  # *** in LIFE.md, messages and tool results
    explicit = set(values) | set(cli_values)
    cfg = make_config(settings, explicit, {**passthrough, **cli_pass}, request, environ, str(path))
    return settings, cfg


def _split(data: Mapping[str, Any], where: str, parse_text: bool) -> tuple[dict, dict[str, str]]:
    """Settings fields (typed) apart from bantam configuration keys (as text)."""
    values, passthrough = {}, {}
    for key, value in data.items():
        if key in NAMES:
            values[key] = coerce(key, value, where, parse_text)
        elif key in bantam_config.PARSERS or parse_text:  # --set forwards unknown keys, as bantam does
            passthrough[key] = _as_text(value)
        else:
            raise ConfigError(f"{where}: unknown key {key!r} (fields to send with each API request "
                              f"go under \"request\")")
    return values, passthrough


def _as_text(value: Any) -> str:
    """A JSON value as bantam's key=value text: lists as its comma lists ("retry_delays": [0, 0])."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return json.dumps(value)


def coerce(key: str, value: Any, where: str, parse_text: bool = False) -> Any:
    default = NAMES[key].default
    try:
        if parse_text and isinstance(value, str) and not isinstance(default, str):
            value = bantam_config.forwarded_value(value) if not isinstance(default, tuple) else \
                [v.strip() for v in value.split(",") if v.strip()]
        return _typed(default, value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {key}: {e}") from None


def _typed(default: Any, value: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ValueError(f"expected true or false, got {value!r}")
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {value!r}")
        if isinstance(default, int) and value != int(value):
            raise ValueError(f"expected an integer, got {value!r}")
        return type(default)(value)
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return tuple(value)
    if isinstance(value, (dict, list)) or value is None:
        raise ValueError(f"expected a string, got {value!r}")
    return str(value)  # chat ids are often written as numbers


def check(s: Settings, where: str) -> None:
    for key in POSITIVE:
        if getattr(s, key) <= 0:
            raise ConfigError(f"{where}: {key}: must be greater than 0, got {getattr(s, key)!r}")
    if s.heartbeat_s < 0:
        raise ConfigError(f"{where}: heartbeat_s: must be 0 (off) or more")
    if s.telegram_token and not s.telegram_chat_id:
        raise ConfigError(f"{where}: telegram_chat_id is required when telegram_token is set "
                          "(the one chat whose messages are accepted)")
    if s.watch not in ("auto", "poll"):
        raise ConfigError(f"{where}: watch: expected auto or poll, got {s.watch!r}")
    if not urlparse(s.api_base).scheme.startswith("http"):
        raise ConfigError(f"{where}: api_base: expected an http(s) URL, got {s.api_base!r}")


def make_config(s: Settings, explicit: set[str], passthrough: dict[str, str], request: dict,
                environ: Mapping[str, str], where: str) -> bantam_config.Config:
    flags: dict[str, str] = {"temperature": str(s.temperature), "reasoning_effort": s.reasoning_effort}
    # bantam's LLM_URL / LLM_MODEL beat the daemon's defaults, never what the user wrote
    # (and provider=anthropic without an api_base talks to Anthropic, not to the default's host)
    if "api_base" in explicit or not (environ.get("LLM_URL") or s.provider == "anthropic"):
        flags["endpoint"] = s.api_base
    if "model" in explicit or not environ.get("LLM_MODEL"):
        flags["model"] = s.model
    # "" is the seed's OpenAI-compatible default; an opt provider file builds on that config too
    flags["provider"] = s.provider if s.provider in bantam_config.PROVIDERS else "openai"
    key = next((environ[v] for v in KEY_ENV if environ.get(v)), "") or s.api_key
    if key:
        flags["api_key"] = key
    flags.update(passthrough)
    flags.update({k: json.dumps(v) for k, v in request.items()})
    if "endpoint" in flags and "api_base" not in explicit:  # the seed's default host (DeepSeek):
        environ = {k: v for k, v in environ.items() if k not in bantam_config.KEY_HOMES}  # not theirs
    try:
        cfg = bantam_config.load(flags, directory=os.devnull, environ=environ)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    if not cfg.api_key and cfg.provider != "local" and not is_local(cfg.endpoint):
        raise ConfigError(f"{where}: no API key: set ATTOBOT_API_KEY in the environment or "
                          f"\"api_key\" in this file (a model server on localhost needs none)")
    return cfg


def is_local(url: str) -> bool:
    """A server on this machine (llama.cpp, Ollama, a test's fake) needs no key."""
    host = urlparse(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")
