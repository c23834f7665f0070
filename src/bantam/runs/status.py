"""What `bantam status RUN` (and the terminal's /status) shows: progress, budgets, counters,
parser recoveries and what completion still needs."""
from __future__ import annotations

from typing import Any

from .gates import GateContext, unmet
from .planning import describe_call
from .state import RunState
from .store import RunDir
from .tools import Workspace


def workspace_of(store: RunDir, state: RunState) -> Workspace:
    tools = state.config.tools
    return Workspace(store.workspace, tuple(tools.write_paths), dict(tools.commands))


def shown_status(store: RunDir, state: RunState) -> str:
    """"running" only while a process works on it: a run left running by a killed process, its
    lock free, is "interrupted" (resume continues it)."""
    return "interrupted" if state.status == "running" and not store.in_use() else state.status


def summary(store: RunDir, state: RunState) -> dict[str, Any]:
    """The status as data (`bantam status --json`)."""
    missing = unmet(GateContext(state, state.config, workspace_of(store, state)))
    limits = state.config.limits
    return {
        "id": state.id, "path": str(store.path), "goal": state.goal, "status": shown_status(store, state),
        "gate": state.gate, "reason": state.reason, "scripted": bool(state.scripted), "model": state.model,
        "phase": state.phase, "steps": [s.model_dump() for s in state.plan],
        "counters": state.counters.model_dump(), "limits": limits.model_dump(),
        "reads": sorted(state.reads), "verifications": state.verifications,
        "best": state.best.model_dump() if state.best else None,
        "complete": state.status == "completed", "unmet": missing, "final": state.final,
        "goal_changed": store.goal_changed(state),
        "in_flight": {"inference": bool(state.inference), "answer": bool(state.pending_answer),
                      "call": describe_call(state.pending_call.tool, state.pending_call.arguments)
                      if state.pending_call else None},
    }


def text(store: RunDir, state: RunState) -> str:
    c, limits = state.counters, state.config.limits
    done = sum(s.status == "done" for s in state.plan)
    model = f"SCRIPTED ({state.scripted})" if state.scripted else \
        state.model.get("label") or f"{state.model.get('model')} via {state.model.get('provider')}"
    status = shown_status(store, state) + (f" ({state.gate}: {state.reason})" if state.reason else "")
    lines = [f"run {state.id}  ({store.path})", f"goal: {first_line(state.goal)}", f"status: {status}",
             f"model: {model}", f"plan: {done}/{len(state.plan)} steps done" + ("" if state.plan else " (no plan yet)")]
    lines += [f"  [{ {'done': 'x', 'failed': '!', 'pending': ' '}[s.status] }] {i}. {s.description}: "
              f"{describe_call(s.tool, s.arguments)}" for i, s in enumerate(state.plan, 1)]
    lines += [
        f"iterations: {c.iterations}/{limits.max_iterations}   model calls: {c.model_calls}   "
        f"tool calls: {c.tool_calls}/{limits.max_tool_calls}",
        f"tokens: {c.tokens_used}/{limits.max_tokens} (prompt {c.prompt_tokens}, completion "
        f"{c.completion_tokens}, lost reservations {c.lost_reservations})",
        f"replans: {c.replans}/{limits.max_replans}   failures in a row: {c.consecutive_failures}/"
        f"{limits.max_consecutive_failures}   tool failures: {c.tool_failures}   gate rejections: {c.gate_rejections}",
        f"parser: {c.parse_failures} unusable answers ({c.parse_retries} in a row, "
        f"{limits.max_parse_retries} retries allowed), parser_recoveries: {c.parser_recoveries}",
        f"evidence: read in full: {', '.join(sorted(state.reads)) or 'nothing'}"
        + (f"; checks passed: {', '.join(state.verifications)}" if state.verifications else "")
        + (f"; best tested attempt {state.best.passed}/{state.best.total}" if state.best else ""),
    ]
    missing = unmet(GateContext(state, state.config, workspace_of(store, state)))
    lines.append("completion: " + ("met" if not missing else "; ".join(missing)))
    if state.pending_call:
        lines.append(f"in flight: {describe_call(state.pending_call.tool, state.pending_call.arguments)} "
                     "(no result saved)")
    if state.final:
        lines.append(f"final answer: {state.final}")
    if store.goal_changed(state):
        lines.append(GOAL_CHANGED.format(goal=store.path / "goal.md"))
    return "\n".join(lines)


GOAL_CHANGED = ("goal changed: {goal} was edited after the run started; the run keeps the goal shown "
                "above, resume refuses it: start a new run for the new goal")


def first_line(text: str, limit: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def outcome_line(store: RunDir, state: RunState) -> str:
    """One line for the end of `bantam run` / `bantam resume`."""
    c = state.counters
    numbers = (f"{c.iterations} iterations, {c.model_calls} model calls, {c.tool_calls} tool calls, "
               f"{c.tokens_used} tokens, {c.replans} replans")
    if state.status == "completed":
        return f"run {state.id} completed ({numbers}); {store.path}"
    hint = ""
    if state.status in ("blocked", "failed"):
        hint = f"; continue with: bantam resume {state.id} --retry-blocked"
    elif state.status == "paused":
        hint = f"; continue with: bantam resume {state.id}"
    return f"run {state.id} {state.status}: {state.gate}: {state.reason} ({numbers}){hint}"
