"""Plans: the deterministic strategies, step matching, and plan.md (the state's readable projection).

    planning_strategy = "llm"     the model writes the first plan
    planning_strategy = "files"   read every required file, write every write_path, run every
                                  required verification: no model call
    repair_strategy = "llm"       after a failed step the model writes a repair plan
    repair_strategy = "rewrite"   after a failed step: write repair_paths again, then run the
                                  verifications again; the model only writes file contents

A step is checked off only by a matching, successful and unclipped call: same tool, and the
step's arguments equal to the call's (a write step names only its path).
"""
from __future__ import annotations

import time
from pathlib import PurePosixPath
from typing import Any

from .settings import RunConfig
from .state import PlanStep, RunState

KEEP_DONE = 12  # done steps kept in the plan after a replan; older ones live on in the logs


def files_plan(config: RunConfig, require_read: list[str]) -> list[PlanStep]:
    steps = [PlanStep(description=f"Read {p}", tool="read_file", arguments={"path": p}) for p in require_read]
    if not steps and not config.tools.write_paths:
        steps.append(PlanStep(description="List the workspace files", tool="list_files", arguments={"path": "."}))
    steps += [PlanStep(description=f"Write {p}", tool="write_file", arguments={"path": p})
              for p in config.tools.write_paths]
    return steps + verification_steps(config)


def rewrite_plan(config: RunConfig) -> list[PlanStep]:
    steps = [PlanStep(description=f"Rewrite {p} to fix the failure", tool="write_file", arguments={"path": p})
             for p in config.rewrite_paths()]
    return steps + verification_steps(config)


def verification_steps(config: RunConfig) -> list[PlanStep]:
    return [PlanStep(description=f"Run the check {name}", tool="shell", arguments={"command": name})
            for name in config.tools.required_verifications]


def replace_plan(state: RunState, steps: list[PlanStep]) -> None:
    """New steps after the done ones; at most KEEP_DONE done steps stay."""
    done = [s for s in state.plan if s.status == "done"][-KEEP_DONE:]
    state.plan = done + steps
    state.phase = "act"


def normal_args(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in args.items() if k != "content"}
    if tool == "list_files":
        out.setdefault("path", ".")
    if isinstance(out.get("path"), str) and out["path"].strip():
        out["path"] = str(PurePosixPath(out["path"]))
    return out


def matching_step(state: RunState, tool: str, args: dict[str, Any]) -> int | None:
    """The first open step this call would check off."""
    call = normal_args(tool, args)
    for i, step in enumerate(state.plan):
        if step.status != "done" and step.tool == tool and normal_args(tool, step.arguments) == call:
            return i
    return None


def direct(step: PlanStep, config: RunConfig) -> bool:
    """execute_plan: a fully specified step runs without asking the model (writes need content)."""
    return config.runtime.execute_plan and step.tool != "write_file"


def describe_call(tool: str, args: dict[str, Any]) -> str:
    shown = [f"{k}={v!r}" if k != "content" else f"content=<{len(v)} chars>" for k, v in args.items()]
    return f"{tool}({', '.join(shown)})"


def plan_md(state: RunState) -> str:
    """The compact, human-readable projection of state.json."""
    parts = [_head(state), _steps(state), _evidence(state), _needs(state), _budgets(state)]
    if state.final:
        parts.append(f"## Final answer\n\n{state.final}")
    return "\n\n".join(parts) + "\n"


def _head(state: RunState) -> str:
    why = f" ({state.gate}: {state.reason})" if state.reason else ""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.updated))
    return f"# Run {state.id}\n\nStatus: **{state.status}**{why}\nUpdated: {when}\n\n## Goal\n\n{state.goal.strip()}"


def _steps(state: RunState) -> str:
    lines, current = ["## Plan", ""], state.current()
    for i, step in enumerate(state.plan):
        box = {"done": "x", "failed": "!", "pending": " "}[step.status]
        mark = "  <- current" if i == current and state.status == "running" else ""
        lines.append(f"- [{box}] {i + 1}. {step.description} — `{describe_call(step.tool, step.arguments)}`{mark}")
        if step.note:
            lines.append(f"      {step.note}")
    return "\n".join(lines if state.plan else lines + ["(no plan yet)"])


def _evidence(state: RunState) -> str:
    lines = [f"- read in full: {p} (sha256 {h[:12]})" for p, h in state.reads.items()] or ["- no complete read yet"]
    lines += [f"- check {n} passed on files {h}" for n, h in state.verifications.items()]
    if state.best:
        lines.append(f"- best tested attempt: {state.best.passed}/{state.best.total}")
    return "## Evidence\n\n" + "\n".join(lines)


def _needs(state: RunState) -> str:
    lines = ["- every step done", "- at least one file read in full"]
    lines += [f"- {p} read in full" for p in state.require_read]
    lines += [f"- check {n} passed on the current files" for n in state.config.tools.required_verifications]
    return "## Completion needs\n\n" + "\n".join(lines)


def _budgets(state: RunState) -> str:
    c, limits = state.counters, state.config.limits
    return (f"## Budgets\n\n- iterations {c.iterations}/{limits.max_iterations}, tool calls "
            f"{c.tool_calls}/{limits.max_tool_calls}, tokens {c.tokens_used}/{limits.max_tokens}, "
            f"replans {c.replans}/{limits.max_replans}\n- failures in a row {c.consecutive_failures}/"
            f"{limits.max_consecutive_failures}, parse retries {c.parse_retries}/{limits.max_parse_retries}")
