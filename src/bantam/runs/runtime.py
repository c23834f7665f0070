"""Composition: the one place where a run's parts are chosen and wired together.

    start(flags, goal, options)    a new run directory, its state, then the loop
    resume(flags, ref, options)    the saved state, the saved configuration (a resume config on
                                   top, logged), then the loop

`flags` are bantam's own configuration flags (--model, --endpoint, --provider, --set). A run's
[model] section sits between them and .bantam.cfg; what was used is saved in the run and used
again on resume (never the API key).

`options.folder` is the folder the run is started from, a value: the runs directory, --config,
--workspace, --scripted and --prompt-artifact given as relative paths are read from it, and so
is its .bantam.cfg. The chat front ends pass their session's folder (two sessions in one process
keep their runs apart); `bantam run` passes none: its paths stay as the user typed them, in the
folder the command was started in.
"""
from __future__ import annotations

import os
import shutil
import stat
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import load as load_bantam_config
from ..errors import ConfigError
from ..fsutil import atomic_write
from ..events import OnEvent
from ..sandbox import Sandbox
from . import prompts, settings
from .gates import AllowedTool, Arguments, Commands, Paths, Rejected, Repetition, check_required_reads
from .loop import Run, drive
from .model import ProviderModel, RunModel, ScriptedModel, read_script
from .planning import files_plan, plan_md
from .state import RunState
from .store import RunDir, left_out
from .testing import find_report
from .tools import Workspace

# The gate pipelines, in order. A plan's steps pass the same checks as a call, except that a
# write step names only its path and repetition cannot apply yet.
CALL_GATES = (AllowedTool(), Arguments(), Paths(), Commands(), Repetition())
STEP_GATES = (AllowedTool(), Arguments(), Paths(), Commands())
MODEL_KEYS = ("provider", "model", "endpoint", "model_path", "temperature", "context_window", "n_ctx")


@dataclass
class Options:
    config: str | None = None          # --config FILE
    workspace: str | None = None       # --workspace DIR (new runs)
    require_read: list[str] = field(default_factory=list)
    scripted: str | None = None        # --scripted FILE
    runs_dir: str = "runs"
    retry_blocked: bool = False        # resume only
    output: str | None = None          # --output FILE: the generate-one-file preset (new runs)
    saved_config: settings.RunConfig | None = None  # instead of --config: a run's own (/fix)
    prompt_artifact: str | None = None  # --prompt-artifact FILE: demos and instructions (new runs)
    folder: Path | None = None          # where relative paths and .bantam.cfg are read (None: as typed)

    def at(self, path: str) -> str:
        """`path` as given, read from this run's folder (an absolute one stays as it is)."""
        return path if self.folder is None else str(self.folder / path)

    def placed(self) -> "Options":
        """These options with every path in them read from the folder: the one step where a
        relative path meets the folder, so no later read falls back on the process's folder."""
        def at(path: str | None) -> str | None:
            return None if path is None else self.at(path)
        return replace(self, config=at(self.config), workspace=at(self.workspace), scripted=at(self.scripted),
                       runs_dir=self.at(self.runs_dir), prompt_artifact=at(self.prompt_artifact))

    @property
    def directory(self) -> Path:
        """Where bantam's own configuration (.bantam.cfg) is read for this run."""
        return self.folder if self.folder is not None else Path(".")


def start(flags: dict[str, str], goal: str, options: Options, on_event: OnEvent,
          pause: threading.Event | None = None) -> tuple[RunDir, RunState]:
    """A new run, driven until it ends or pauses. `pause`, set from any thread, pauses it at the
    next safe point (the terminal's /pause, the page's Stop)."""
    if not goal.strip():
        raise ConfigError("the goal is empty")
    options = options.placed()
    config = options.saved_config or settings.load(options.config)
    required = [_required(p) for p in options.require_read]
    if options.output:
        config, required = _generate(config, options.output, required)
    source = _source(options.workspace, Path(options.runs_dir))
    if options.output and source is not None and os.path.lexists(source / GOAL_FILE):
        raise ConfigError(f"--output: {source} already has a {GOAL_FILE}; the preset writes the goal there")
    model_info = _model_info(flags, config, options.scripted, options.directory)
    if options.prompt_artifact:
        prompts.read(Path(options.prompt_artifact))  # before the run directory exists: nothing half-made
    store = RunDir.create(Path(options.runs_dir), goal, source)
    try:
        if options.output:
            atomic_write(store.workspace / GOAL_FILE, goal.encode("utf-8"))
        state = RunState(id=store.id, goal=goal, config=config, model=model_info, require_read=required)
        if options.prompt_artifact:
            state.prompt_artifact = prompts.adopt(options.prompt_artifact, store.path)
        if config.runtime.planning_strategy == "files":
            state.plan, state.phase = files_plan(config, required), "act"
        store.save(state, plan_md(state))
        try:
            run = _assemble(state, store, flags, on_event, pause, options.directory)
            _readable(run)
        except ConfigError:  # e.g. provider=local without llama-cpp-python: nothing ran, keep nothing
            shutil.rmtree(store.path, ignore_errors=True)
            raise
        run.emit("created", f"run {store.id} in {store.path} · model: {run.model.label}",
                 workspace=str(source) if source else None)
        if run.prompt is not None:
            run.emit("prompt_artifact", f"prompt artifact: {len(run.prompt.demos)} worked examples "
                     f"({run.prompt.strategy}) from {options.prompt_artifact}, frozen in {store.path / prompts.RUN_COPY}")
        if state.scripted:
            run.emit("scripted", f"SCRIPTED: model answers are replayed from {state.scripted}; no model is asked")
        return store, drive(run)
    finally:
        store.unlock()


def resume(flags: dict[str, str], ref: str, options: Options, on_event: OnEvent,
           pause: threading.Event | None = None) -> tuple[RunDir, RunState]:
    options = options.placed()
    store = RunDir.find(ref, Path(options.runs_dir), options.folder)
    store.lock()
    try:
        repaired = store.heal_logs()
        state = store.load()
        changes = _new_config(state, options.config)
        if options.scripted:
            read_script(options.scripted)
            new = str(Path(options.scripted).resolve())
            if new != state.scripted:  # another file starts at its first answer
                state.scripted_used = 0
            state.model = {"scripted": new}
        run = _assemble(state, store, flags, on_event, pause, options.directory)
        for note in repaired:
            run.emit("healed", note)
        if changes:
            run.emit("config_changed", "configuration changed: " + ", ".join(
                f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items()), changes=changes)
            run.commit()
        retried = _unblock(run, options.retry_blocked)
        if state.status != "running":
            return store, state
        run.emit("resumed", f"resuming run {store.id} · model: {run.model.label}")
        return store, drive(run, retried)
    finally:
        store.unlock()


def _new_config(state: RunState, path: str | None) -> dict:
    if not path:
        return {}
    state.config, changes = settings.for_resume(state.config, path)
    return changes


def _unblock(run: Run, retry: bool) -> str:
    """--retry-blocked: a blocked or failed run runs again (its streaks start over); an
    interrupted write or command is run again. Returns the gate being retried, if any."""
    st = run.state
    if st.status == "paused":
        st.status = "running"
    if st.status in ("blocked", "failed") and not retry:
        run.emit("not_resumed", f"run {st.id} is {st.status} ({st.gate}: {st.reason}); resume it "
                 "explicitly with --retry-blocked (and a --config with larger limits if a budget ran out)")
        return ""
    if not retry or st.status == "completed":
        return ""
    gate = st.gate or "interrupted"
    if st.status in ("blocked", "failed"):
        run.emit("retry_blocked", f"retrying after {st.gate}: {st.reason}", gate=st.gate)
        st.status, st.gate, st.reason = "running", "", ""
        st.counters.consecutive_failures = st.counters.parse_retries = 0
    run.commit()
    return gate


def _assemble(state: RunState, store: RunDir, flags: dict[str, str], on_event: OnEvent,
              pause: threading.Event | None = None, directory: Path = Path(".")) -> Run:
    """`directory`: where bantam's configuration file is read (the run's folder)."""
    tools = state.config.tools
    workspace = Workspace(store.workspace, tuple(tools.write_paths), dict(tools.commands),
                          tools.shell_timeout, tools.tool_output_limit,
                          Sandbox.for_config(load_bantam_config(flags, directory), store.workspace), find_report)
    return Run(state, store, workspace, _model(state, flags, workspace, directory), list(CALL_GATES),
               list(STEP_GATES), on_event, pause=pause or threading.Event(),
               prompt=prompts.frozen(store.path, state.prompt_artifact))


def _model(state: RunState, flags: dict[str, str], workspace: Workspace, directory: Path) -> RunModel:
    if state.scripted:
        return ScriptedModel(state.scripted, state.scripted_used, state.config.model)
    cfg = _bantam_config(state.model, state.config, flags, directory)
    model = ProviderModel(cfg, state.config.model, workspace)
    state.model = {**_describe(cfg), "label": model.label}
    return model


def _bantam_config(saved: dict, config: settings.RunConfig, flags: dict[str, str], directory: Path):
    """bantam's configuration for the run: flags over [model] over what the run used before
    over `directory`'s .bantam.cfg and the environment."""
    used = {k: str(v) for k, v in saved.items() if k in MODEL_KEYS and v}
    return load_bantam_config({**used, **_model_flags(config), **flags}, directory)


def _model_info(flags: dict[str, str], config: settings.RunConfig, scripted: str | None,
                directory: Path) -> dict:
    """What the run will use, as saved in state.json: the scripted file, or the model (no key)."""
    if scripted:
        read_script(scripted)
        return {"scripted": str(Path(scripted).resolve())}
    return _describe(_bantam_config({}, config, flags, directory))


def _describe(cfg) -> dict:
    info = {"provider": cfg.provider, "model": cfg.model}
    if cfg.provider == "local":
        info["model_path"] = cfg.model_path
    else:
        info["endpoint"] = cfg.endpoint
    return info


def _model_flags(config: settings.RunConfig) -> dict[str, str]:
    values = config.model.model_dump()
    return {k: str(values[k]) for k in MODEL_KEYS if values.get(k) is not None}


GOAL_FILE = "goal.md"  # --output: the goal, in the workspace, read as the run's first step


def _generate(config: settings.RunConfig, output: str, required: list[str]) -> tuple[settings.RunConfig, list[str]]:
    """--output FILE: a fixed plan that reads the goal, writes FILE (the
    only file it may write) in a code fence, then answers; every gate applies as usual."""
    try:
        path = settings.clean_path(output, "--output")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if path == GOAL_FILE:
        raise ConfigError(f"--output: {GOAL_FILE} holds the goal; choose another file name")
    data = config.model_dump()
    data["runtime"].update(planning_strategy="files", execute_plan=True, file_output_format="fenced")
    data["tools"]["write_paths"] = [path]
    return settings.validate(data, "--output"), [GOAL_FILE, *[p for p in required if p != GOAL_FILE]]


def _readable(run: Run) -> None:
    """The required reads, checked once the workspace is in place, by the paths gate itself."""
    try:
        check_required_reads(run.ctx())
    except Rejected as e:
        raise ConfigError(f"--require-read: {e.reason}") from None


def _required(path: str) -> str:
    try:
        return settings.clean_path(path, "--require-read")
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _source(workspace: str | None, runs_dir: Path) -> Path | None:
    if workspace is None:
        return None
    source = Path(workspace)
    if not source.is_dir():
        raise ConfigError(f"--workspace: {workspace} is not a directory")
    _only_files_and_links(source, runs_dir)  # before the run directory exists: nothing half-made
    return source


def _only_files_and_links(source: Path, runs_dir: Path) -> None:
    """A named pipe, socket or device in the workspace cannot be copied (a pipe would block).
    The runs folder is not looked into: the copy leaves it out (store.left_out)."""
    skip = left_out((runs_dir,))
    for folder, dirs, files in os.walk(source):
        left = skip(folder, dirs)
        dirs[:] = [d for d in dirs if d not in left]
        for name in dirs + files:
            path = Path(folder, name)
            mode = path.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise ConfigError(f"--workspace: {path} is not a regular file, folder or link "
                                  "(a named pipe, socket or device cannot be copied into a run)")
