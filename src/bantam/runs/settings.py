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

The defaults below are seed 002's. In command arrays `{python}` is this Python interpreter and
`{config_dir}` the folder of the TOML file, so an example's config works from any checkout; they
are resolved when the run is created and saved resolved. The whole configuration is saved in
state.json and used again on resume; a resume config may change [limits], [runtime] and [model],
never the tool policy.
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ConfigError

STRICT = ConfigDict(strict=True, extra="forbid")  # TOML has real types: "5" is not a number
RESUMABLE = ("limits", "runtime", "model")        # what a resume config may change


class RunLimits(BaseModel):
    model_config = STRICT
    max_replans: int | Literal["unlimited"] = 20  # repair plans; 0 disables them
    max_iterations: int = Field(200, ge=1)          # loop turns: inferences and direct executions
    max_tool_calls: int = Field(160, ge=1)          # executed tool calls, failed ones included
    max_tokens: int = Field(500_000, ge=1)          # prompt + completion, reserved before inference
    max_consecutive_failures: int = Field(20, ge=1)  # parse errors, rejections, failed tools in a row
    max_parse_retries: int = Field(5, ge=0)         # unusable answers in a row, after the first
    max_runtime_seconds: float = Field(3600.0, gt=0)  # from run creation, pauses included
    max_repeats: int = Field(3, ge=1)               # the same call on unchanged files, in a row

    @model_validator(mode="after")
    def _replans(self) -> "RunLimits":
        if isinstance(self.max_replans, int) and self.max_replans < 0:
            raise ValueError("max_replans must be a non-negative integer or \"unlimited\"")
        return self


class Runtime(BaseModel):
    model_config = STRICT
    file_output_format: Literal["fenced", "json"] = "fenced"  # file text in a code fence, or JSON
    planning_strategy: Literal["llm", "files"] = "llm"  # who writes the first plan
    execute_plan: bool = False        # run fully specified steps without asking the model
    repair_strategy: Literal["llm", "rewrite"] = "llm"  # who writes the repair plan
    repair_paths: list[str] = []      # files a "rewrite" repair writes again (default: write_paths)
    keep_best: bool = False           # show the best tested attempt when repairing
    repair_edit: Literal["file", "lines", "function"] = "file"  # a write to an existing file may
    # replace named lines or one function instead of the whole file (fenced format; runs/patch.py)


class Model(BaseModel):
    model_config = STRICT
    provider: str | None = None       # these five go to bantam's configuration, over .bantam.cfg
    model: str | None = None
    endpoint: str | None = None
    model_path: str | None = None
    temperature: float | None = None
    max_output_tokens: int = Field(1024, ge=16)   # per answer; reserved before each inference
    context_window: int | None = Field(None, ge=256)  # when the provider does not say
    n_ctx: int | None = Field(None, ge=256)       # provider=local: context size
    seed: int | None = None
    grammar: bool = True              # provider=local: constrain proposals by a JSON-schema grammar


class Tools(BaseModel):
    model_config = STRICT
    write_paths: list[str] = []             # the only files write_file may write
    required_verifications: list[str] = []  # commands that must pass on the current files
    command_timeout_seconds: float = Field(20.0, gt=0)
    output_limit_bytes: int = Field(8192, ge=256)  # of any tool output
    commands: dict[str, list[str]] = {}     # name -> fixed argv, run without a shell

    @model_validator(mode="after")
    def _policy(self) -> "Tools":
        self.write_paths = [clean_path(p, "write_paths") for p in self.write_paths]
        for name, argv in self.commands.items():
            if not name.replace("_", "a").replace("-", "a").isalnum() or not argv or not argv[0]:
                raise ValueError(f"commands.{name}: a name of letters, digits, - and _, and a "
                                 "non-empty argument array")
        for name in self.required_verifications:
            if name not in self.commands:
                raise ValueError(f"required_verifications: {name!r} is not in [tools.commands]")
        return self


class RunConfig(BaseModel):
    model_config = STRICT
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
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"--config: {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"--config: cannot read {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
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
