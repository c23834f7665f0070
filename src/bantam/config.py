"""Configuration: flags over `.bantam.cfg` (else `model.cfg`) over the user's
`~/.config/bantam/config` over the environment over defaults.

This module holds bantam's one configuration schema. Every knob is a field of `Config` below,
written with `knob(...)` (kinds.py): its default, how a value is checked (`Kind`), its unit, a
comment, its environment variable and the other names it is accepted under (the daemon's
config.json and the runs' TOML files also take the names other agents use for some knobs:
`api_base` is `endpoint`, `context_tokens` is `context_window`, `bash_timeout` and
`command_timeout_seconds` are `shell_timeout`, `output_limit_bytes` is `tool_output_limit`).
The daemon and controlled runs read their own files onto these same keys, with their own
defaults, and describe their mode's own knobs with the same `knob(...)` and `Kind`s; `check` is
the one checker for all of them.

Keys bantam does not use itself are sent with each API request, kept in `Config.forward` (the
contract: `top_p`, `max_tokens`, a vendor's own field), except a near miss of a key bantam knows
(`tempreature`): that is a misspelling, not sent, and `Config.warning` holds one line naming where
it stood and the nearest key (`.bantam.cfg:3: tempreature: not a configuration key, ignored (did
you mean temperature?)`). `request.NAME` sends NAME whatever it is, near miss or not (the
daemon's config.json "request" object arrives this way). A bad value raises ConfigError naming where it came
from, the key once: `.bantam.cfg:3: temperature: expected a number, got 'hot'`.

The environment sits below the files, with one exception: a variable in
`ENV_FIRST` (BANTAM_TOOLS_DIR, which is checked first) beats both files, below the flags.
It is the user's own, so a project file, trusted or not, cannot override it.

Which keys are secret is the schema's word (`knob(..., secret=True)`), plus any value outside
it shaped like a credential (`secret`); `max_tokens_limit` is no secret for holding TOKEN.

The provider, when no `provider=` is given, is inferred from the endpoint: bantam's own rule for
an endpoint from a flag or a file (Anthropic for `anthropic.com` or `/v1/messages`, else
OpenAI-compatible, as `api_base=http://127.0.0.1:8080/v1` for llama.cpp wants), and a rule of
its own for the variable LLM_URL (OpenAI-compatible only with `/v1/chat/completions` in it,
Anthropic for anything else).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from . import bundled
from .errors import ConfigError, Refused
from .kinds import (Choice, Flag, Key, Kind, Names, Number, Numbers, Url, aliases_of, canonical, check,
                    keys_of, knob)
from .toolnames import ALIASES as TOOL_ALIASES, MCP_SEPARATOR, REGISTRY, canonical_tool

__all__ = ["Config", "load", "KEYS", "ALIASES", "Key", "Kind", "Flag", "Number", "Choice", "Url", "Names",
           "Numbers", "ToolNames", "knob", "keys_of", "aliases_of", "canonical", "check"]

DEFAULT_ENDPOINT = "https://api.kilo.ai/api/openrouter"  # a free OpenRouter gateway: works with no key
DEFAULT_MODEL = "openrouter/free"
# A tool result a local model sees, at most (the rest in a file the result names): a 30,000-byte
# `cat README.md` overflowed the embedded model's window, where 6,000 bytes are about 1,500 tokens
LOCAL_TOOL_OUTPUT = 6_000
LOCAL_TEMPERATURE = 0.2  # small local models wander at bantam's default 0.7 (SmolLM2's authors use 0.2)
ANTHROPIC_ENDPOINT = "https://api.anthropic.com/v1"  # when provider=anthropic names no endpoint
OPENAI_ENDPOINT = "https://api.openai.com/v1"
# A key from the environment with no endpoint configured goes to its own API, nowhere else:
# variable -> (provider, endpoint, model when none is configured). LLM_API_KEY without LLM_URL
# goes to Anthropic's Messages API.
ANTHROPIC_MODEL = "claude-haiku-4-5"  # an Anthropic endpoint's model when none is configured
# ...and the model at an Anthropic gateway named by LLM_URL, when none is configured
AGENT_MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
KEY_HOMES = {
    "LLM_API_KEY": ("anthropic", ANTHROPIC_ENDPOINT, ANTHROPIC_MODEL),
    "ANTHROPIC_API_KEY": ("anthropic", ANTHROPIC_ENDPOINT, ANTHROPIC_MODEL),
    "OPENAI_API_KEY": ("openai", OPENAI_ENDPOINT, "gpt-4o-mini"),
}
FALLBACK_CONTEXT_WINDOW = 200_000
FIBONACCI_DELAYS = (1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0)
CONFIG_FILES = (".bantam.cfg", "model.cfg")  # the first one present wins
PROVIDERS = ("openai", "anthropic", "local")
# The keys that draw the boundary around the model (sandbox.py, approval.py, envpolicy.py, MCP,
# the tools folder) or widen what it may do (its tools, budgets, fan-out, time per command). From
# a project file the user has not trusted (trust.py), a value may narrow what the layer below says,
# never widen it: key -> whether a new value stays within the old one. A key added later that
# widens what the model may do belongs here.


def _order(*looser_first: str) -> Callable[[Any, Any], bool]:
    """A choice whose values go from the loosest to the strictest."""
    return lambda new, old: looser_first.index(new) >= looser_first.index(old)


def _within(new: Any, old: Any) -> bool:
    """Names (tools, writable roots, passed variables): each one already allowed below, so a
    project may drop a tool but not add one; a value that is on (a flag, a folder): only if the
    value below is the same, or off. A number: no larger."""
    if isinstance(new, tuple):
        return set(new) <= set(old)
    if isinstance(new, (bool, str)):
        return not new or new == old
    return bool(new <= old)


BOUNDARY_KEYS: dict[str, Callable[[Any, Any], bool]] = {
    "sandbox": _order("off", "workspace", "read-only"),
    "approval": _order("never", "on-request", "always"),
    "sandbox_network": _within,
    "sandbox_writable": _within,
    "env_passthrough": _within,
    "mcp": _within,
    "bantam_tools_dir": _within,
    "tools": _within,
    "tool_budget": _within,
    "max_fanout": _within,
    "max_al_iterations": _within,
    "shell_timeout": _within,
}
# Keys of an older bantam that mean something else now: a file that still sets one gets this.
REPLACED_KEYS = dict.fromkeys(
    ("local_tool_first", "local_example", "local_commands", "local_grounded", "local_cite"),
    "local_aids=auto|off|NAME (the small-model aids are one profile now, providers/aids/profiles.json)")
ALIAS = "alias."  # `alias.fast=openrouter/some/model`: `--model fast` means that model
REQUEST = "request."  # `request.NAME=value`: NAME is sent with each API request, whatever it is
# Fields of the APIs bantam speaks (OpenAI chat completions, OpenRouter, Anthropic Messages,
# llama.cpp, vLLM, Ollama): a key near one of these is a misspelling (`top_pp`), not a new field.
REQUEST_FIELDS = frozenset((
    "max_tokens", "max_completion_tokens", "top_p", "top_k", "min_p", "typical_p", "stop", "stop_sequences",
    "seed", "n", "frequency_penalty", "presence_penalty", "repeat_penalty", "repetition_penalty",
    "logit_bias", "logprobs", "top_logprobs", "response_format", "tool_choice", "parallel_tool_calls",
    "user", "metadata", "service_tier", "store", "modalities", "prediction", "stream_options",
    "verbosity", "thinking", "reasoning", "include_reasoning", "transforms", "models", "route",
    "usage", "grammar", "json_schema", "mirostat", "mirostat_tau", "mirostat_eta", "cache_prompt",
    "chat_template_kwargs", "options", "keep_alive", "web_search_options", "extra_body"))
# Environment variables that beat the config files (below the flags): BANTAM_TOOLS_DIR overrides
# the files and is checked first. The others sit below the files, as bantam's own layers; the
# key fallback (OPENAI_API_KEY when no api_key is set) is below them too.
ENV_FIRST = frozenset(("BANTAM_TOOLS_DIR",))
# A value shaped like a credential: a known vendor prefix, or a long opaque token that mixes
# upper case, lower case and digits (model names and paths have dots, slashes or one case).
CREDENTIAL = re.compile(r"(sk|pk|rk)[-_][\w-]{8,}|sk-ant-[\w-]+|gh[pousr]_\w{20,}|github_pat_\w{20,}"
                        r"|xox[abpr]-[\w-]{10,}|AKIA[0-9A-Z]{16}|AIza[\w-]{30,}|glpat-[\w-]{20,}|hf_\w{20,}")
OPAQUE = re.compile(r"(?=[\w-]*[a-z])(?=[\w-]*[A-Z])(?=[\w-]*\d)[\w-]{32,}")


class ToolNames(Names):
    """Names of tools: the core's (toolnames.py, data below this module) or an MCP server's."""

    def value(self, value: Any) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(canonical_tool(n) for n in super().value(value)))  # run_shell: shell_exec
        unknown = [n for n in names if n not in REGISTRY and MCP_SEPARATOR not in n]
        if unknown:
            known = [*REGISTRY, *(f"{a} (= {n})" for a, n in TOOL_ALIASES.items())]
            raise ValueError(f"unknown tool {unknown[0]!r} (known: {', '.join(known)})")
        return names


@dataclass(frozen=True)
class Config:
    endpoint: str = knob(DEFAULT_ENDPOINT, Url(), "API base; bantam appends /chat/completions or /messages",
                        env="LLM_URL", aliases=("api_base",))
    model: str = knob(DEFAULT_MODEL, Kind(), "model name, or an alias.NAME", env="LLM_MODEL")
    temperature: float = knob(0.7, Number(float, 0), "sampling temperature (provider=local: 0.2)")
    api_key: str = knob("", Kind(), "bearer token; never written anywhere", secret=True)
    stream: bool = knob(True, Flag(), "stream tokens as they arrive")
    color: str = knob("auto", Choice("auto", "always", "never"), "auto (terminal only), always, never")
    timeout: float = knob(300.0, Number(float, 0.001), "to connect and between bytes of a response", "seconds")
    shell_timeout: float = knob(120.0, Number(float, 0.001), "before a command's process group is killed",
                               "seconds", aliases=("bash_timeout", "command_timeout_seconds"))
    max_al_iterations: int = knob(1000, Number(int, 1), "model requests per turn")
    context_window: int | None = knob(None, Number(int, 1), "used when the server does not say (then 200000)",
                                     "tokens", aliases=("context_tokens",))
    reasoning_effort: str = knob("high", Kind(), "forwarded to the API; empty to leave it out")
    bantam_tools_dir: str = knob("", Kind(), "extra shell tools, announced in the system prompt",
                                env="BANTAM_TOOLS_DIR")
    provider: str = knob("", Choice(*PROVIDERS), "openai | anthropic | local; inferred from endpoint")
    tools: tuple[str, ...] = knob(("shell_exec", "write_file", "run_subagent"), ToolNames(), "enabled tools")
    tool_budget: int = knob(200, Number(int, 1), "tool calls per turn", env="AGENT_TOOL_BUDGET")
    max_fanout: int = knob(8, Number(int, 1), "sub-agents one call may start", env="AGENT_MAX_FANOUT")
    # A command's output is cut at this many bytes, which is never more characters; files that
    # gave the limit in bytes (a run's output_limit_bytes) keep their number.
    tool_output_limit: int = knob(30_000, Number(int, 200), "of one tool result the model sees; the rest "
                                 "is clipped, head and tail kept", "characters", aliases=("output_limit_bytes",))
    mcp: bool = knob(True, Flag(), "false: no MCP server starts, whatever mcp.json files say")
    model_path: str = knob("", Kind(), "a local GGUF file for provider=local (default: bundled)")
    web_password: str = knob("", Kind(), "`bantam web`: instead of a random token", secret=True)
    env_passthrough: tuple[str, ...] = knob((), Names(), "secret-looking variables commands may see (GH_TOKEN, AWS_*)")
    n_ctx: int | None = knob(None, Number(int, 16), "provider=local: context size (default 8192)", "tokens")
    n_threads: int | None = knob(None, Number(int, 1), "provider=local: CPU threads (default: llama.cpp's)")
    local_aids: str = knob("auto", Kind(), "the aids for a small model, a profile of "
                           "providers/aids/profiles.json; auto: the bundled model's (none for a model_path= "
                           "GGUF or an endpoint), off, or a profile's name (for an endpoint too)")
    retry_delays: tuple[float, ...] = knob(FIBONACCI_DELAYS, Numbers(), "between retries of a request", "seconds")
    max_tokens_limit: int = knob(32_768, Number(int, 1), "an answer cut at max_tokens is asked again, "
                                "doubled, up to this", "tokens")
    sandbox: str = knob("workspace", Choice("off", "workspace", "read-only"),
                       "around the model's commands (sandbox.py)")
    sandbox_writable: tuple[str, ...] = knob((), Names(), "writable roots for sandbox=workspace (default: the working dir)")
    sandbox_network: bool = knob(False, Flag(), "sandboxed commands may use the network")
    undo_keep: int = knob(50, Number(int, 0), "turns kept for `bantam undo` per conversation; 0: none recorded")
    approval: str = knob("on-request", Choice("never", "on-request", "always"),
                        "when a person is asked (approval.py)")
    forward: Mapping[str, Any] = field(default_factory=dict)  # keys bantam does not use, sent to the API
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias.NAME=model: NAME -> model
    file: str = ""                        # the config file that was read, if any
    warning: str = ""                     # what the user should hear about the config (lines)
    ignored: tuple[str, ...] = ()         # "file:line key=value" an untrusted project file set in vain
    embedded: bool = False                # nothing configured: running the bundled local model
    exact_url: bool = False               # the endpoint is the URL requests go to, not a base (LLM_URL)

    def with_values(self, **changes: Any) -> "Config":
        return replace(self, **changes)


KEYS = keys_of(Config)
PARSERS: dict[str, Callable[[str], Any]] = {name: k.kind.text for name, k in KEYS.items()}
# environment variable -> key; the config file and flags win over these
ENVIRONMENT = {k.env: name for name, k in KEYS.items() if k.env}
ALIASES = aliases_of(KEYS)  # api_base -> endpoint, ...
SECRETS = frozenset(name for name, k in KEYS.items() if k.secret)  # api_key, web_password


def secret(key: str, value: Any) -> bool:
    """Is `key`'s value shown as ***? When the schema marks the key secret, or when the value has
    the shape of a credential (a key pasted into a forwarded field); never for what a name holds."""
    if key in SECRETS:
        return True
    return isinstance(value, str) and bool(CREDENTIAL.fullmatch(value) or OPAQUE.fullmatch(value))


def shown(key: str, value: Any) -> str:
    """`key`'s value as /cfg and `bantam config` show it, in the words a file would use (true,
    0.7, a,b): any name /cfg accepts, secrets as ***, "" when it has none."""
    if secret(ALIASES.get(key, key), value):
        return "***" if value else ""
    if isinstance(value, tuple):
        return ",".join(_word(v) for v in value)
    return "" if value is None else _word(value)


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


def value_of(cfg: "Config", key: str) -> Any:
    """The value `key` has in `cfg`, under any name /cfg accepts: a key or one of its aliases
    (api_base), alias.NAME, request.NAME or a request field; None when it has none."""
    key = ALIASES.get(key, key)
    if key in KEYS:
        return getattr(cfg, key)
    if key.startswith(ALIAS):
        return cfg.aliases.get(key[len(ALIAS):])
    return cfg.forward.get(key.removeprefix(REQUEST))


def is_key(key: str) -> bool:
    """Is `key` a name load() uses: bantam's (or an alias of one), a request field, alias.NAME,
    request.NAME, or any other name that is not a near miss of one of these (it is forwarded)?"""
    key = ALIASES.get(key, key)
    if key in KEYS or key in REQUEST_FIELDS or key.startswith((ALIAS, REQUEST)):
        return "." != key[-1]
    return nearest_key(key) is None


def nearest_key(key: str) -> str | None:
    """The key `key` is most likely a misspelling of, if any."""
    import difflib  # here: only a key bantam does not know needs it
    words = [*KEYS, *ALIASES, *REQUEST_FIELDS, *REPLACED_KEYS]
    near = difflib.get_close_matches(key.lower(), words, n=1, cutoff=0.75)
    return near[0] if near else None


def unknown_key(key: str, where: str = "", outcome: str = "ignored") -> str:
    """One line for a near miss of a key (`request.NAME` would send it as it is)."""
    return f"{where}: " * bool(where) + f"{key}: not a configuration key, {outcome} (did you mean {nearest_key(key)}?)"


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


def read_entries(path: Path, own: bool = False) -> list[tuple[str, str, str]]:
    """A config file's (key, value, "file:line") entries, in file order. `own`: the user's file,
    which may be a link to anywhere; a project's stays inside its folder (fsutil.read_setting)."""
    from .fsutil import read_setting
    try:
        text = read_setting(path, own=own).decode("utf-8")
    except Refused as e:
        raise ConfigError(str(e)) from None
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


def embedded_notice(cfg: "Config") -> str:
    """The one line that says a run answers on this machine, naming the model it loads."""
    model = bundled.default_model()
    name = Path(cfg.model_path).stem if cfg.model_path else model.name if model else "the embedded model"
    return (f"no endpoint configured: answering with {name} on this machine (set endpoint=, model= and "
            f"api_key= in {user_config_path()}, or pass --endpoint, for a remote model)")


def exposed_key_warning(path: Path | None, entries: list[tuple[str, str, str]]) -> str:
    """A config file holding an API key that other users can read deserves a word."""
    if path is None or not any(key == "api_key" and value for key, value, _ in entries):
        return ""
    try:
        exposed = path.stat().st_mode & 0o077
    except OSError:
        return ""
    return f"{path} holds an api_key and other users can read it (chmod 600 {path})" if exposed else ""


SEED_URL = "LLM_URL"  # its provider follows a rule of its own (infer_provider)


def infer_provider(endpoint: str, seed_url: bool = False) -> str:
    """The provider an endpoint implies when `provider=` names none. LLM_URL's own
    rule (`seed_url`): OpenAI-compatible only when the URL holds `/v1/chat/completions`, the
    Anthropic Messages API for anything else (a gateway at a path of its own). bantam's rule for
    an endpoint from a flag or a file, whose usual value is an OpenAI-compatible base such as
    `http://127.0.0.1:8080/v1`: Anthropic only for `anthropic.com` or `/v1/messages`."""
    if seed_url:
        return "openai" if "/v1/chat/completions" in endpoint else "anthropic"
    return "anthropic" if "/v1/messages" in endpoint or "anthropic.com" in endpoint else "openai"


def is_api_base(url: str) -> bool:
    """Whether LLM_URL names an API base rather than the URL to post to: no path, or one that ends
    in a version (`http://127.0.0.1:8080/v1`, the Anthropic SDK's and llama.cpp's form). Any other
    path is the endpoint as given (`https://gateway.example/claude`, `.../v1/messages`)."""
    from urllib.parse import urlsplit
    path = urlsplit(url).path.rstrip("/")
    return not path or re.fullmatch(r"v\d+(beta\d*|alpha\d*)?", path.rsplit("/", 1)[-1]) is not None


def refuse_empty_model(text: str, where: str, given: str) -> None:
    """An empty model would be sent as "model": "", which no API serves."""
    if not text.strip():
        raise ConfigError(f"{where}: {given}: empty; name a model (`bantam models` lists the "
                          f"endpoint's) or leave the key out for the default")


def load(flags: Mapping[str, str] | None = None, directory: str | os.PathLike = ".",
         environ: Mapping[str, str] | None = None) -> Config:
    """Build the Config from every layer. `flags` maps keys to values given on the command line."""
    environ = os.environ if environ is None else environ
    ignored: list[str] = []
    raw, path, entries = layers(flags, directory, environ, ignored)
    values: dict[str, Any] = {}
    forward: dict[str, Any] = {}
    unknown: list[str] = []
    aliases = {key[len(ALIAS):]: text.strip() for key, (text, _, _) in raw.items() if key.startswith(ALIAS)}
    for key, (text, where, given) in raw.items():
        if key.startswith(ALIAS):
            continue
        if key == "model":  # `--model fast` with `alias.fast=openrouter/...` in a config file
            text = aliases.get(text.strip(), text)
        if key == "model":
            refuse_empty_model(text, where, given)
        if key in KEYS:
            values[key] = check(KEYS[key], text, where, named=given)
        elif key in REPLACED_KEYS:  # a key of an older bantam: say what it became
            raise ConfigError(f"{where}: {key} was replaced by {REPLACED_KEYS[key]}")
        elif is_key(key):  # a request field, request.NAME, or a field bantam does not know of
            forward[key.removeprefix(REQUEST)] = _forwarded(text, where, given)
        else:
            unknown.append(unknown_key(given, where))
    if not values.get("api_key") and "endpoint" not in values:
        _route_env_key(values, environ)
    embedded = False
    if not values.get("provider") and "endpoint" not in values:
        embedded = bundled.available()  # the bundled model, when the local extra is installed
        if embedded:
            values["provider"] = "local"
    seed_url = raw.get("endpoint", ("", "", ""))[1] == f"environment variable {SEED_URL}"
    if not values.get("provider"):
        values["provider"] = infer_provider(values.get("endpoint", DEFAULT_ENDPOINT), seed_url)
    if values["provider"] == "local":
        values.setdefault("temperature", LOCAL_TEMPERATURE)
        values.setdefault("tool_output_limit", LOCAL_TOOL_OUTPUT)
    elif values["provider"] == "anthropic":
        values.setdefault("endpoint", ANTHROPIC_ENDPOINT)
        if "model" not in values:  # the default openrouter/free is no model of an Anthropic endpoint
            gateway = seed_url and "anthropic.com" not in values["endpoint"].lower()
            values["model"] = AGENT_MODEL if gateway else ANTHROPIC_MODEL
    withheld = ""
    user = user_config_path(environ)
    if values.get("api_key") and raw.get("api_key", ("", ""))[1].startswith(f"{user}:") and values.get("endpoint"):
        withheld = withheld_key(f"api_key ({raw['api_key'][1]})", DEFAULT_ENDPOINT, values["endpoint"],
                                raw.get("endpoint"), path, environ)
        values["api_key"] = "" if withheld else values["api_key"]
    elif not values.get("api_key") and not embedded and values.get("endpoint"):
        fallback = "ANTHROPIC_API_KEY" if values["provider"] == "anthropic" else "OPENAI_API_KEY"
        var = "LLM_API_KEY" if environ.get("LLM_API_KEY") else fallback
        if environ.get(var):
            withheld = withheld_key(var, KEY_HOMES[var][1], values["endpoint"], raw.get("endpoint"), path, environ)
        values["api_key"] = "" if withheld else environ.get(var) or ""
    _protect(values)
    warnings = [*unknown, exposed_key_warning(path, entries), withheld, ignored_warning(path, ignored)]
    return Config(**values, forward=forward, aliases=aliases, file=str(path) if path else "", embedded=embedded,
                  warning="\n".join(w for w in warnings if w), ignored=tuple(ignored),
                  exact_url=seed_url and not is_api_base(values.get("endpoint", "")))


def _forwarded(text: str, where: str, given: str) -> Any:
    try:
        return forwarded_value(text)
    except ValueError as e:
        raise ConfigError(f"{where}: {given}: {e}") from None


def withheld_key(key: str, home: str, endpoint: str, source: tuple[str, ...] | None, path: Path | None,
                 environ: Mapping[str, str]) -> str:
    """Why the user's `key` (whose own API is `home`) must not go to `endpoint`, or "" when it
    may. A project's file (a cloned repository's) the user has not trusted may not send the
    user's key elsewhere than its own API or an endpoint the user chose: a flag, the user's
    file or the environment."""
    if source is None or path is None or not source[1].startswith(f"{path}:"):
        return ""  # an endpoint the user chose
    from . import trust
    if trust.is_trusted(path):
        return ""
    user = user_config_path(environ)
    chosen = [environ.get("LLM_URL", ""), home]
    chosen += [value for k, value, _ in (read_entries(user, own=True) if user.is_file() else []) if k == "endpoint"]
    if any(c and _host(c) == _host(endpoint) for c in chosen):
        return ""
    return (f"{source[1]} sets endpoint={endpoint}, so your {key} is not sent (a project's file may not "
            f"send your key to a server you did not choose); to send it there, trust the project "
            f"(`bantam trust`), put api_key= in {path}, pass --endpoint {endpoint}, or set "
            f"endpoint={endpoint} in {user}")


def user_key_goes_to(endpoint: str, environ: Mapping[str, str]) -> bool:
    """Whether the api_key in the user's file may be sent to `endpoint`, which another file chose
    (the daemon's config.json): a key goes only to the endpoint configured beside it (same host),
    or, with none beside it, nowhere but bantam's defaults."""
    user = user_config_path(environ)
    entries = read_entries(user, own=True) if user.is_file() else []
    beside = [value for k, value, _ in entries if ALIASES.get(k, k) == "endpoint"]
    return any(_host(b) == _host(endpoint) for b in beside)


def ignored_warning(path: Path | None, ignored: list[str]) -> str:
    """One line: what an untrusted project file set about the boundary, and how to trust it."""
    if not ignored:
        return ""
    return (f"{path} is not trusted, so it may not loosen bantam's boundary; ignored: "
            f"{', '.join(ignored)} (read it, then `bantam trust` applies it)")


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
    """Secrets become *** wherever bantam writes (the passthrough list is the session's: its
    Sandbox carries it to each command)."""
    from . import envpolicy
    envpolicy.register_secret(values.get("api_key"))
    envpolicy.register_secret(values.get("web_password"))


def layers(flags: Mapping[str, str] | None, directory: str | os.PathLike,
           environ: Mapping[str, str], ignored: list[str] | None = None
           ) -> tuple[dict[str, tuple[str, str, str]], Path | None, list]:
    """Every key's text, where it came from and the name it had there (an alias: `api_base`), by
    its one name, the higher layer winning: flags > project file > user file > environment. Also
    the project file and its entries. A boundary key the project file may not set (not trusted,
    and looser than what it would replace) is left out and noted in `ignored`."""
    raw: dict[str, tuple[str, str, str]] = {}  # key -> (text, where it came from, the name given there)
    first: dict[str, tuple[str, str, str]] = {}  # ENV_FIRST: above the files
    for var, key in ENVIRONMENT.items():
        if environ.get(var):
            (first if var in ENV_FIRST else raw)[key] = (environ[var], f"environment variable {var}", key)
    user = user_config_path(environ)
    path, entries = read_config_file(directory)
    for file_entries, project in ((read_entries(user, own=True) if user.is_file() else [], None), (entries, path)):
        named: dict[str, str] = {}  # a key's one name -> the name this file gave it
        below = dict(raw)  # what the layers under this file say (not an earlier line of its own)
        for key, value, where in file_entries:
            one = ALIASES.get(key, key)
            if named.setdefault(one, key) != key:
                raise ConfigError(f"{where}: {key}: the same key as {named[one]!r}, given twice; keep one")
            if one in first:  # the user's own variable wins: no file's value matters, nor its trust
                continue
            if project and one in BOUNDARY_KEYS and not _may_set(one, value, below.get(one), project, directory):
                if ignored is not None:
                    ignored.append(f"{where} {key}={value}")
                continue
            raw[one] = (value, where, key)
    raw.update(first)
    for key, value in (flags or {}).items():
        raw[ALIASES.get(key, key)] = (value, "command line", key)
    return raw, path, entries


def _may_set(key: str, text: str, below: tuple[str, str, str] | None, path: Path,
             directory: str | os.PathLike) -> bool:
    """May the project file at `path` set boundary key `key` to `text`? Yes when the user trusts
    the file as it is (and, for a tools folder, that folder as it is), or when the value stays
    within the one it replaces (what the layers below say, else the default)."""
    from . import trust
    if trust.is_trusted(path):
        return key != "bantam_tools_dir" or trust.tools_trusted(directory, text.strip())
    kind = KEYS[key].kind
    try:
        new = kind.text(text)
        old = kind.text(below[0]) if below else KEYS[key].default
    except ValueError:
        return True  # a bad value: load() reports it with its file and line
    return BOUNDARY_KEYS[key](new, old)


def known_keys() -> list[str]:
    return list(KEYS)


def check_value(key: str, value: str) -> Any:
    """Parse one value as the config file would; ConfigError if it is bad, or if the key is none
    that load() would use (a misspelling: written, it would only be ignored)."""
    if not key.replace("_", "a").replace(".", "a").isalnum() or not key[:1].isalpha():  # alias.NAME
        raise ConfigError(f"{key!r} is not a configuration key")
    if "\n" in value or "\r" in value:  # it would become a second line of the config file
        raise ConfigError(f"{key}: a value is one line; this one holds a line break")
    one = ALIASES.get(key, key)
    if one in REPLACED_KEYS:
        raise ConfigError(f"{key} was replaced by {REPLACED_KEYS[one]}")
    if not is_key(one):
        raise ConfigError(unknown_key(key, outcome="not written"))
    try:
        return KEYS[one].kind.text(value) if one in KEYS else forwarded_value(value)
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
