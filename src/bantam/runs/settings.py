"""The run configuration: a TOML file with [limits], [runtime], [model], [tools], [tools.commands].

    [limits]
    max_replans = 20            # repair plans after failed tool calls; "unlimited" lifts only this
    [runtime]
    planning_strategy = "files" # plan from required reads, write_paths and verifications
    [tools]
    write_paths = ["app.py"]
    required_verifications = ["verify"]
    [tools.commands]
    verify = ["{python}", "{config_dir}/verify.py"]

The defaults below are for a model well under 2B parameters. Every value is checked by bantam's one configuration checker
(config.py's kinds, as from a typed file: "5" is not a number); the knobs bantam's configuration
also has use its names and units: [model] provider, model, endpoint, model_path, temperature,
context_window; [tools] shell_timeout (`command_timeout_seconds`, its older name, still accepted) and
tool_output_limit (`output_limit_bytes`, still accepted, same number). In command arrays
`{python}` is this Python interpreter and `{config_dir}` the folder of the TOML file, so an
example's config works from any checkout; they are resolved when the run is created and saved
resolved. The whole configuration is saved in
state.json and used again on resume; a resume config may change [limits], [runtime] and [model],
never the tool policy.
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, model_validator

from .. import config as bantam_config
from ..config import Choice, Flag, Kind, Names, Number
from ..errors import ConfigError, Refused
from ..fsutil import CONFIG_LIMIT, read_named

RESUMABLE = ("limits", "runtime", "model")        # what a resume config may change


def checked(kind: Kind, optional: bool = False) -> PlainValidator:
    """A section field whose value bantam's one checker reads (config.Kind, as from a typed file:
    TOML's "5" is not a number); pydantic only holds the sections and their cross-checks."""
    def read(value: Any) -> Any:
        return None if optional and value is None else kind.value(value)
    return PlainValidator(read)


def core(name: str, optional: bool = False) -> PlainValidator:
    """A field that is one of bantam's own keys (config.KEYS): its kind, its name and unit."""
    return checked(bantam_config.KEYS[name].kind, optional)


class Listed(Names):
    def value(self, value: Any) -> list[str]:  # type: ignore[override]  # the run keeps lists
        return list(super().value(value))


class Replans(Kind):
    def value(self, value: Any) -> int | Literal["unlimited"]:
        if value == "unlimited":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f'expected a non-negative integer or "unlimited", got {value!r}')
        return value


class Commands(Kind):
    """[tools.commands]: name -> a fixed, non-empty argument array."""

    def value(self, value: Any) -> dict[str, list[str]]:
        if not isinstance(value, dict):
            raise ValueError(f"expected a table of commands, got {value!r}")
        for name, argv in value.items():
            if not name.replace("_", "a").replace("-", "a").isalnum() or not isinstance(argv, list) \
                    or not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
                raise ValueError(f"{name}: a name of letters, digits, - and _, and a non-empty "
                                 "array of strings")
        return dict(value)


class Section(BaseModel):
    """A TOML table: unknown keys refused; bantam's keys also under their other names (a saved
    run's `output_limit_bytes` is `tool_output_limit`)."""
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        table = {name: bantam_config.KEYS[name] for name in cls.model_fields if name in bantam_config.KEYS}
        try:
            return {name: value for name, (_, value) in bantam_config.canonical(data, table, "").items()}
        except ConfigError as e:
            raise ValueError(str(e).removeprefix(": ")) from None


Count = Number(int, 1)


class RunLimits(Section):
    """A run's limits. They become the core loop's (runs/loop.py `limits`) for what is left of
    them; their defaults differ from bantam's on purpose: a run's counts persist across resumes
    and cover the whole run, bantam's max_al_iterations and tool_budget (1000, 200) one turn."""
    max_replans: Annotated[int | Literal["unlimited"], checked(Replans())] = 20  # repair plans; 0 disables them; "unlimited"
    max_iterations: Annotated[int, checked(Count)] = 200        # loop turns: inferences and direct executions
    max_tool_calls: Annotated[int, checked(Count)] = 160        # executed tool calls, failed ones included
    max_tokens: Annotated[int, checked(Count)] = 500_000        # prompt + completion, reserved before inference
    max_consecutive_failures: Annotated[int, checked(Count)] = 20  # parse errors, rejections, failed tools in a row
    max_parse_retries: Annotated[int, checked(Number(int, 0))] = 5  # unusable answers in a row, after the first
    max_runtime_seconds: Annotated[float, checked(Number(float, 0, above=True))] = 3600.0  # from creation, pauses included
    # The same call on unchanged files, in a row, persisted: the (max_repeats + 1)th is rejected.
    # Not the core's REPEAT_LIMIT (loop.py: the 3rd identical call of a turn is refused, whatever
    # the files): a run's checks are meant to run again after a write, and to count across resumes.
    max_repeats: Annotated[int, checked(Count)] = 3


class Runtime(Section):
    file_output_format: Annotated[str, checked(Choice("fenced", "json"))] = "fenced"  # in a code fence, or JSON
    planning_strategy: Annotated[str, checked(Choice("llm", "files"))] = "llm"  # who writes the first plan
    execute_plan: Annotated[bool, checked(Flag())] = False  # run fully specified steps without asking the model
    repair_strategy: Annotated[str, checked(Choice("llm", "rewrite"))] = "llm"  # who writes the repair plan
    repair_paths: Annotated[list[str], checked(Listed())] = []  # files a "rewrite" repair writes again (default: write_paths)
    keep_best: Annotated[bool, checked(Flag())] = False  # show the best tested attempt when repairing
    repair_edit: Annotated[str, checked(Choice("file", "lines", "function"))] = "file"  # a write to an existing
    # file may replace named lines or one function instead of the whole file (fenced format; runs/patch.py)


class Model(Section):
    provider: Annotated[str | None, core("provider", True)] = None  # these seven go to bantam's
    model: Annotated[str | None, core("model", True)] = None        # configuration, over .bantam.cfg
    endpoint: Annotated[str | None, core("endpoint", True)] = None
    model_path: Annotated[str | None, core("model_path", True)] = None
    temperature: Annotated[float | None, core("temperature", True)] = None
    max_output_tokens: Annotated[int, checked(Number(int, 16))] = 1024  # per answer; reserved before each inference
    context_window: Annotated[int | None, checked(Number(int, 256), True)] = None  # tokens, when the provider does not say
    n_ctx: Annotated[int | None, checked(Number(int, 256), True)] = None  # provider=local: context size, tokens
    seed: Annotated[int | None, checked(Number(int), True)] = None
    grammar: Annotated[bool, checked(Flag())] = True  # provider=local: constrain proposals by a JSON-schema grammar


class Tools(Section):
    write_paths: Annotated[list[str], checked(Listed())] = []  # the only files write_file may write
    required_verifications: Annotated[list[str], checked(Listed())] = []  # commands that must pass on the current files
    shell_timeout: Annotated[float, core("shell_timeout")] = 20.0  # seconds (also read as command_timeout_seconds)
    tool_output_limit: Annotated[int, core("tool_output_limit")] = 8192  # of any tool output (also read as output_limit_bytes)
    commands: Annotated[dict[str, list[str]], checked(Commands())] = {}  # name -> fixed argv, run without a shell

    @model_validator(mode="after")
    def _policy(self) -> "Tools":
        self.write_paths = [clean_path(p, "write_paths") for p in self.write_paths]
        for name in self.required_verifications:
            if name not in self.commands:
                raise ValueError(f"required_verifications: {name!r} is not in [tools.commands]")
        return self


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limits: RunLimits = RunLimits()
    runtime: Runtime = Runtime()
    model: Model = Model()
    tools: Tools = Tools()

    @model_validator(mode="after")
    def _strategies(self) -> "RunConfig":
        rt, tools = self.runtime, self.tools
        rt.repair_paths = [clean_path(p, "repair_paths") for p in rt.repair_paths]
        if stray := [p for p in rt.repair_paths if p not in tools.write_paths]:
            raise ValueError(f"repair_paths: {stray[0]!r} is not in [tools] write_paths")
        if rt.repair_strategy == "rewrite" and not tools.write_paths:
            raise ValueError('repair_strategy = "rewrite" needs [tools] write_paths')
        if rt.keep_best and len(tools.required_verifications) != 1:
            raise ValueError("keep_best needs exactly one command in required_verifications")
        return self

    def rewrite_paths(self) -> list[str]:
        return self.runtime.repair_paths or self.tools.write_paths


def clean_path(path: str, where: str) -> str:
    """A workspace-relative path in one spelling: no absolute paths, no `..`."""
    pure = PurePosixPath(path)
    if not path.strip() or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"{where}: {path!r} must be a relative path inside the workspace")
    return str(pure)


def load(path: str | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The configuration of a new run: the TOML file (if any) with placeholders resolved."""
    data = read_toml(path) if path else {}
    commands = data.get("tools", {}).get("commands") if isinstance(data.get("tools"), dict) else None
    if isinstance(commands, dict):
        base = str(Path(path).resolve().parent) if path else "."
        for name, argv in commands.items():
            if isinstance(argv, list):
                commands[name] = [resolve(a, base) for a in argv]
    data.update(overrides or {})
    return validate(data, path or "configuration")


def resolve(arg: Any, config_dir: str) -> Any:
    if not isinstance(arg, str):
        return arg
    return arg.replace("{python}", sys.executable).replace("{config_dir}", config_dir)


def read_toml(path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(read_named(path, CONFIG_LIMIT).decode("utf-8"))
    except Refused as e:
        raise ConfigError(f"--config: {e}") from None
    except FileNotFoundError:
        raise ConfigError(f"--config: {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"--config: cannot read {path}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def validate(data: dict[str, Any], where: str) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{where}: {describe(e)}") from None


def describe(error: ValidationError) -> str:
    """The first problem, as `[section] key: message` (a union's branches reported once)."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"] if not str(part).startswith(("int", "literal", "function"))]
    where = f"[{loc[0]}]" + (f" {'.'.join(loc[1:])}" if len(loc) > 1 else "") if loc else ""
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def for_resume(saved: RunConfig, path: str) -> tuple[RunConfig, dict[str, list[Any]]]:
    """A resume config over the saved one: [limits], [runtime], [model] change; the tool policy
    must stay as it is; a run keeps its file_output_format. Returns the config and the changes."""
    data = load(path).model_dump()
    given = read_toml(path)
    if "tools" in given and data["tools"] != saved.tools.model_dump():
        raise ConfigError(f"{path}: [tools] cannot change for an existing run; start a new run")
    if unknown := set(given) - set(RESUMABLE) - {"tools"}:
        raise ConfigError(f"{path}: unknown section [{sorted(unknown)[0]}]")
    merged = saved.model_dump()
    for section in RESUMABLE:  # only the keys the file names change; the rest stay as the run had them
        if isinstance(given.get(section), dict):
            merged[section].update({k: data[section][k] for k in given[section] if k in data[section]})
    kept = saved.runtime.file_output_format
    asked = merged["runtime"]["file_output_format"]
    merged["runtime"]["file_output_format"] = kept
    new = validate(merged, path)
    found = changes(saved.model_dump(), new.model_dump())
    if asked != kept:
        found["runtime.file_output_format"] = [kept, f"{asked} (ignored: a run keeps its format)"]
    return new, found


def changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    out = {}
    for section in RESUMABLE:
        for key, value in new[section].items():
            if old[section].get(key) != value:
                out[f"{section}.{key}"] = [old[section].get(key), value]
    return out
