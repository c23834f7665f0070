"""An agent directory's config.json: its fields and tunables, their defaults, validation.

Layers, lowest first: the defaults below; config.json; the command line (`--model`,
`--endpoint`, `--provider`, `--set KEY=VALUE`). Keys of bantam's own configuration (`timeout`,
`retry_delays`, `stream`, ...) may appear in config.json too and go to the model client; "request"
holds extra fields sent with every API request (`{"max_tokens": 2000}`). The names other
agents use for bantam's keys are accepted as they are: `api_base` is `endpoint`, `context_tokens` is
`context_window`, `bash_timeout` is `shell_timeout` (config.KEYS; same units). Every value is
checked by config.check, as JSON: a string is not a number. The API key comes from
the environment first (ATTOBOT_API_KEY, LLM_API_KEY), then config.json's api_key, then
OPENAI_API_KEY / ANTHROPIC_API_KEY. A bad value stops the daemon with one line naming the file.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from .. import config as bantam_config
from ..config import Choice, Kind, Number, knob
from ..envpolicy import register_secret
from ..errors import ConfigError, Refused
from ..fsutil import read_setting

KEY_ENV = ("ATTOBOT_API_KEY", "LLM_API_KEY")  # over config.json's api_key
POSITIVE = Number(float, 0, above=True)
COUNT = Number(int, 0, above=True)


def core(name: str, default: Any) -> Any:
    """A knob of bantam's configuration (config.KEYS: its kind, unit and aliases) with the
    daemon's default."""
    spec = bantam_config.KEYS[name]
    return knob(default, spec.kind, spec.comment, spec.unit, spec.env, spec.aliases, secret=name == "api_key")


@dataclass(frozen=True)
class Settings:
    # chat (all optional: no telegram_token, no chat channel)
    telegram_token: str = knob("", Kind(), "the bot's token", secret=True)
    telegram_chat_id: str = knob("", Kind(), "required with a token: the one chat accepted")
    telegram_thread_id: str = knob("", Kind(), "a forum topic, when the chat is a supergroup")
    telegram_api_base: str = knob("https://api.telegram.org", bantam_config.Url(), "a local fake Bot API in tests")
    telegram_poll_s: float = knob(30.0, POSITIVE, "getUpdates long-poll timeout", "seconds")
    # the model: bantam's own keys, with the daemon's defaults (api_base and context_tokens are its names)
    api_key: str = core("api_key", "")
    # "": not set here, so bantam's own layers decide, as in every mode (the user's file, then the
    # environment, then the embedded model)
    model: str = core("model", "")
    endpoint: str = core("endpoint", "")
    temperature: float = core("temperature", 1.0)
    reasoning_effort: str = core("reasoning_effort", "medium")
    context_window: int = core("context_window", 100_000)  # auto-stash past 80% (4 characters a token)
    multimodal_support: bool = knob(False, bantam_config.Flag(), "READ_FILE sends images to the model")
    provider: str = knob("", Kind(), '"" = OpenAI-compatible; anthropic, local, or providers/<name>.py')
    opt: tuple[str, ...] = knob((), bantam_config.Names(), 'opt/ add-ons copied in at first boot ("tools/nudge")')
    primary_dir: str = knob("agent", Kind(), "a subconscious: the directory it reviews")
    # tunables
    life_tail: int = knob(30, COUNT, "LIFE.md lines that ride along after the conversation", "lines")
    memory_limit: int = knob(10_000, COUNT, "MEMORY.md characters before its middle is elided", "characters")
    tool_timeout: float = knob(30.0, POSITIVE, "in the foreground before a tool is backgrounded", "seconds")
    tool_output_limit: int = core("tool_output_limit", 5_000)  # the rest is clipped and stashed
    trigger_tick: float = knob(30.0, POSITIVE, "between trigger scans", "seconds")
    cmd_timeout: float = knob(60.0, POSITIVE, "a trigger's cmd may run", "seconds")
    heartbeat_s: float = knob(225.0, Number(float, 0), "the heartbeat's tick; 0 = no heartbeat", "seconds")
    heartbeat_max_s: float = knob(3600.0, POSITIVE, "... backed off to this while idle", "seconds")
    inbox_tick: float = knob(10.0, POSITIVE, "between mail_inbox/ scans", "seconds")
    inbox_preview: int = knob(2_000, COUNT, "of a mail shown in its message", "characters")
    chat_msg_max: int = knob(4_000, COUNT, "per chat message (Telegram allows 4096)", "characters")
    shell_timeout: float = core("shell_timeout", 3600.0)  # BASH kills its command's process group after this
    search_url: str = knob("https://html.duckduckgo.com/html/", Kind(), "SEARCH posts q= here")
    watch: str = knob("auto", Choice("auto", "poll"), "auto: inotify via watchfiles when installed; poll")
    poll_s: float = knob(1.0, POSITIVE, "polling interval without inotify", "seconds")
    retry_turn_s: float = knob(15.0, POSITIVE, "an unanswered turn (model down) is tried again after this", "seconds")
    retry_turn_max_s: float = knob(300.0, POSITIVE, "... doubling each time, up to this", "seconds")
    outbox_retry_max_s: float = knob(60.0, POSITIVE, "a Telegram send that failed is retried, backing off to this",
                                    "seconds")


KEYS = bantam_config.keys_of(Settings)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_setting(path).decode("utf-8"))
    except Refused as e:
        raise ConfigError(str(e)) from None
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
    values, passthrough = _split(data, str(path), typed=True)
    cli_values, cli_pass = _split(cli or {}, "command line", typed=False)
    settings = Settings(**{**values, **cli_values})
    check(settings, str(path))
    register_secret(settings.telegram_token)  # *** in LIFE.md, messages and tool results
    explicit = set(values) | set(cli_values)
    cfg = make_config(settings, explicit, {**passthrough, **cli_pass}, request, environ, str(path))
    return settings, cfg


def _split(data: Mapping[str, Any], where: str, typed: bool) -> tuple[dict, dict[str, str]]:
    """Settings fields (checked) apart from bantam's other configuration keys (checked, as text).
    Given as text (`--set`), a key bantam does not know is forwarded to the API, as bantam does."""
    values, passthrough = {}, {}
    for name, (given, value) in bantam_config.canonical(data, {**bantam_config.KEYS, **KEYS}, where).items():
        if name in KEYS:
            values[name] = bantam_config.check(KEYS[name], value, where, typed, given)
            if name == "model":  # "" is the default only while the key is absent
                bantam_config.refuse_empty_model(values[name], where, given)
        elif name in bantam_config.KEYS:
            spec = bantam_config.KEYS[name]
            passthrough[name] = _as_text(bantam_config.check(spec, value, where, typed, given))
        elif not typed:
            passthrough[name] = str(value)
        else:
            raise ConfigError(f"{where}: unknown key {given!r} (fields to send with each API request "
                              f"go under \"request\")")
    return values, passthrough


def _as_text(value: Any) -> str:
    """A checked value as bantam's key=value text: tuples as its comma lists."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value)


def check(s: Settings, where: str) -> None:
    """What no single value can say."""
    if s.telegram_token and not s.telegram_chat_id:
        raise ConfigError(f"{where}: telegram_chat_id is required when telegram_token is set "
                          "(the one chat whose messages are accepted)")


def make_config(s: Settings, explicit: set[str], passthrough: dict[str, str], request: dict,
                environ: Mapping[str, str], where: str) -> bantam_config.Config:
    flags: dict[str, str] = {"temperature": str(s.temperature), "reasoning_effort": s.reasoning_effort}
    flags.update({k: v for k, v in (("endpoint", s.endpoint), ("model", s.model)) if v})
    if s.provider in bantam_config.PROVIDERS:  # "" (OpenAI-compatible, or an opt provider file): bantam's rule
        flags["provider"] = s.provider
    key = next((environ[v] for v in KEY_ENV if environ.get(v)), "") or s.api_key
    if key:
        flags["api_key"] = key
    elif s.endpoint and not bantam_config.user_key_goes_to(s.endpoint, environ):
        flags["api_key"] = ""  # the user's file's key belongs to the user's file's endpoint
    flags.update(passthrough)
    flags.update({f"{bantam_config.REQUEST}{k}": json.dumps(v) for k, v in request.items()})  # sent as they are
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
