"""Gates: deterministic checks between what the model proposes and what the runtime does.

Call gates see every proposed tool call (and every step of a proposed plan) and raise `Rejected`:
the reason goes back to the model. Budget gates run before every turn, tool call and inference
and raise `Blocked`: the run stops, resumable with `--retry-blocked` (and usually a larger limit).
The completion gate decides whether a final answer may end the run. Which gates run, in which
order, is decided in runtime.py; nothing here knows about the loop.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Protocol

from ..errors import Blocked as Blocked  # re-exported: the gates raise these
from ..errors import Rejected as Rejected
from .planning import matching_step
from .settings import RunConfig
from .state import Call, RunState
from .tools import TOOLS, Refused, Workspace

READ_TOOLS = ("read_file", "list_files")


@dataclass
class GateContext:
    state: RunState
    config: RunConfig
    workspace: Workspace
    planning: bool = False   # checking a plan step (a write names only its path)


class CallGate(Protocol):
    name: str

    def check(self, call: Call, ctx: GateContext) -> None: ...


def allowed_tools(config: RunConfig, planning: bool) -> list[str]:
    """Reading always; writing only with write_paths (and only as a plan step); commands only
    when named. Without a tool policy a run can only read."""
    names = list(READ_TOOLS)
    if planning and config.tools.write_paths:
        names.append("write_file")
    if config.tools.commands:
        names.append("shell")
    return names


class AllowedTool:
    name = "tools"

    def check(self, call: Call, ctx: GateContext) -> None:
        allowed = allowed_tools(ctx.config, ctx.planning)
        due = ctx.state.current()
        if call.tool == "write_file" and due is not None and matching_step(ctx.state, call.tool, call.arguments) == due:
            return  # the write of the write step that is due, with the content the model gave for it
        if call.tool not in allowed:
            writes = call.tool == "write_file" and ctx.config.tools.write_paths
            extra = (" (files are written only as plan steps: the plan names the path, you give the "
                     "content when the step is due)") if writes else ""
            raise Rejected(self.name, f"{call.tool!r} is not an allowed tool; allowed: {', '.join(allowed)}{extra}")


class Arguments:
    name = "arguments"

    def check(self, call: Call, ctx: GateContext) -> None:
        schema = TOOLS[call.tool].parameters
        allowed = [k for k in schema["properties"] if not (ctx.planning and k == "content")]
        for key, value in call.arguments.items():
            if key not in allowed:
                raise Rejected(self.name, f"{call.tool} takes no argument {key!r} (arguments: {', '.join(allowed)})")
            if not isinstance(value, str):  # every run tool's argument is a string
                raise Rejected(self.name, f"{call.tool}: argument {key!r} must be a str")
        required = (*schema["required"], *(("content",) if call.tool == "write_file" and not ctx.planning else ()))
        for key in required:
            if key not in call.arguments:
                raise Rejected(self.name, f"{call.tool} needs the argument {key!r}")


class Paths:
    """Relative to the workspace; no absolute paths, no `..`, no symlink that resolves outside;
    reads need an existing regular file (a plan may name a file an earlier step writes)."""
    name = "paths"

    def check(self, call: Call, ctx: GateContext) -> None:
        path = call.arguments.get("path", "." if call.tool == "list_files" else None)
        if path is None:
            return
        try:
            if call.tool == "read_file" and not ctx.planning:
                ctx.workspace.regular_file(path)
            else:
                ctx.workspace.locate(path, existing=call.tool == "list_files")
        except Refused as e:
            raise Rejected(self.name, str(e)) from None
        if call.tool == "write_file" and normal(path) not in ctx.config.tools.write_paths:
            raise Rejected(self.name, f"{path}: not in write_paths ({', '.join(ctx.config.tools.write_paths)})")


def check_required_reads(ctx: GateContext) -> None:
    """Every --require-read must pass the paths gate as the read that will prove it: a missing
    file, a folder or a link out of the workspace would leave a run that can never complete, so
    it is refused when the run starts. A file a write step makes need only lie inside."""
    for path in ctx.state.require_read:
        writes = normal(path) in ctx.config.tools.write_paths
        Paths().check(Call(tool="read_file", arguments={"path": path}),
                      GateContext(ctx.state, ctx.config, ctx.workspace, planning=writes))


class Commands:
    name = "commands"

    def check(self, call: Call, ctx: GateContext) -> None:
        if call.tool != "shell":
            return
        names = ctx.config.tools.commands
        if call.arguments.get("command") not in names:
            raise Rejected(self.name, f"{call.arguments.get('command')!r} is not a named command; "
                                      f"use one of: {', '.join(names)} (no other command lines run)")


class Repetition:
    """The same call on unchanged files, more than max_repeats times in a row, cannot help."""
    name = "repetition"

    def check(self, call: Call, ctx: GateContext) -> None:
        limit = ctx.config.limits.max_repeats
        if call_key(call, ctx) == ctx.state.last_call and ctx.state.repeats >= limit:
            raise Rejected(self.name, f"this exact call already ran {ctx.state.repeats} times on "
                                      "unchanged files; its result will not change. Do something else")


def call_key(call: Call, ctx: GateContext) -> str:
    files = ctx.workspace.files_hash(ctx.config.tools.write_paths)
    args = {k: (v if k != "content" else len(v)) for k, v in call.arguments.items()}
    return f"{call.tool} {json.dumps(args, sort_keys=True)} @{files}"


def normal(path: Any) -> str:
    return str(PurePosixPath(path)) if isinstance(path, str) and path.strip() else str(path)


# --- budgets ------------------------------------------------------------------------------------

def check_turn(state: RunState, config: RunConfig, now: float | None = None) -> None:
    """Before every turn: iterations, runtime, failures in a row, parse retries."""
    c, limits = state.counters, config.limits
    if c.iterations >= limits.max_iterations:
        raise Blocked("max_iterations", f"{c.iterations} of {limits.max_iterations} iterations used")
    elapsed = (now or time.time()) - state.created
    if elapsed > limits.max_runtime_seconds:
        raise Blocked("max_runtime_seconds", f"{elapsed:.0f}s since the run was created, "
                                             f"limit {limits.max_runtime_seconds:g}s")
    if c.consecutive_failures >= limits.max_consecutive_failures:
        raise Blocked("max_consecutive_failures", f"{c.consecutive_failures} failures in a row "
                                                  f"(limit {limits.max_consecutive_failures})")
    if c.parse_retries > limits.max_parse_retries:
        raise Blocked("max_parse_retries", f"{c.parse_retries} unusable answers in a row "
                                           f"({limits.max_parse_retries} retries allowed)")


def check_tool_budget(state: RunState, config: RunConfig) -> None:
    """Blocked once the run's tool calls reach max_tool_calls (the run's own count, kept across resumes)."""
    if state.counters.tool_calls >= config.limits.max_tool_calls:
        used, limit = state.counters.tool_calls, config.limits.max_tool_calls
        raise Blocked("max_tool_calls", f"{used} of {limit} tool calls used")


def check_tokens(state: RunState, config: RunConfig, prompt: int, output: int, window: int) -> None:
    """Before an inference: the prompt must fit the model (refused, never cut) and the budget
    must hold the whole reservation: the prompt and the largest possible answer."""
    if prompt + output > window:
        raise Blocked("context", f"the prompt needs about {prompt} tokens plus {output} for the answer, "
                                 f"more than the model's context window of {window}; refused rather than "
                                 "cut (shorten the goal, or set a larger [model] context_window / n_ctx)")
    used, limit = state.counters.tokens_used, config.limits.max_tokens
    if used + prompt + output > limit:
        raise Blocked("max_tokens", f"{used} of {limit} tokens used; the next inference reserves "
                                    f"{prompt + output}")


def check_replans(state: RunState, config: RunConfig) -> None:
    limit = config.limits.max_replans
    if limit != "unlimited" and state.counters.replans >= limit:
        raise Blocked("max_replans", f"a step failed and all {limit} repair plans are used")


class Budgets:
    """The budget gates, grouped by the moment the loop consults them. The tool budget is not
    here: the core's ToolBudget enforces it (runs/loop.py RunBudget), check_tool_budget says so."""
    before_turn = staticmethod(check_turn)
    before_inference = staticmethod(check_tokens)
    before_replan = staticmethod(check_replans)


# --- completion ---------------------------------------------------------------------------------

def unmet(ctx: GateContext) -> list[str]:
    """What still stands between the run and completion (empty: it may complete). This proves
    the file accesses and checks, not that the final answer is right."""
    state, tools = ctx.state, ctx.config.tools
    missing = [f"step {i + 1} ({s.description}) is not done" for i, s in enumerate(state.plan)
               if s.status != "done"]
    if not state.plan:
        missing.append("there is no plan yet")
    if not state.reads:
        missing.append("no file has been read in full yet")
    missing += [f"the required file {p} has not been read in full" for p in state.require_read
                if p not in state.reads]
    current = ctx.workspace.files_hash(tools.write_paths)
    missing += [f"the check {name!r} has not passed on the current files" for name in
                tools.required_verifications if state.verifications.get(name) != current]
    return missing


def check_final(ctx: GateContext) -> None:
    if missing := unmet(ctx):
        raise Rejected("completion", "not complete: " + "; ".join(missing))
