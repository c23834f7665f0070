"""spawn_agent: a sub-agent with a fresh, isolated context and a structured result.

The child runs the same loop with its own tool budget and cannot delegate. It ends its answer
with `STATUS:` and `UNMET:` lines, which become the JSON result's `status` and `unmet_checks`.
In a `--thread` run a durable child saves each step and its result, so a killed run resumes it:
the parent's call is saved before the child starts and run again, as saved, on resume (loop.step,
loop.unanswered), so the child is found by that call, never by the model wording the task again.
"""
from __future__ import annotations

import json
import re
import threading
from typing import Any, Callable

from ..errors import LimitReached, ProviderError, ToolError
from ..events import Event, OnEvent
from ..limits import Limits, Turn
from . import Tool, ToolContext, Toolbox, make_toolbox
from .subagent import check_can_delegate, child_messages, run_child

STATUSES = ("success", "partial", "failure", "blocked")
REPORT = """

When you finish, end your answer with one line `STATUS: success` (the task is done{checked}),
`STATUS: partial` (some of it is done), `STATUS: failure` (it could not be done) or
`STATUS: blocked` (you lack something you need: say what)."""
CHECKS = """
Before you report success, verify each of these checks by testing it, not by assumption. Put
each check you could not meet on its own line as `UNMET: <check>`.
Checks:
{items}"""
_events_lock = threading.Lock()  # sub-agents run side by side; their traces must not interleave


class SpawnAgent(Tool):
    name = "spawn_agent"
    parallel = True  # several calls in one assistant message run at the same time
    description = ("Delegate a self-contained subtask to a sub-agent with a fresh, isolated context "
                   "and the same tools. Returns JSON: status (success|partial|failure|blocked), "
                   "output, steps_taken, unmet_checks. Several calls in one message run in parallel.")
    parameters = {
        "type": "object", "required": ["task"],
        "properties": {
            "task": {"type": "string", "description": "the complete subtask; the child sees nothing else"},
            "checks": {"type": "array", "items": {"type": "string"},
                       "description": "requirements the result must satisfy, verified by the child"},
            "persistence": {"type": "string", "enum": ["ephemeral", "durable"],
                            "description": "durable: resumes after a restart (in a --thread run)"},
            "max_iter": {"type": "integer", "description": "the child's iteration budget"},
        },
    }

    def saved_first(self, arguments: str, ctx: ToolContext) -> bool:
        """A durable child of a thread: the parent's step that calls it is saved before the child
        starts (loop.step), so a killed run runs this same saved call again, whose task and checks
        find the child's saved progress, whatever the model would word the task as when asked anew."""
        try:
            args = json.loads(arguments)
        except ValueError:
            return False
        return isinstance(args, dict) and args.get("persistence") == "durable" and ctx.front.durable is not None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        check_can_delegate(ctx)
        number = next(ctx.spawn_numbers)
        if number >= ctx.cfg.max_fanout:
            raise ToolError(f"the fan-out cap of {ctx.cfg.max_fanout} sub-agents for this run is reached; "
                            "do the rest yourself or combine subtasks")
        checks = [str(c) for c in args.get("checks") or []]
        persistence = args.get("persistence") or "ephemeral"
        if persistence not in ("ephemeral", "durable"):
            raise ToolError(f"persistence must be ephemeral or durable, got {persistence!r}")
        result = spawn(ctx, args["task"], checks, persistence, iteration_budget(args.get("max_iter"), ctx.cfg),
                       f"agent {number + 1}")
        return json.dumps(result, ensure_ascii=False)


def iteration_budget(max_iter: Any, cfg: Any) -> int:
    """A child's step budget as asked for (`max_iter`, by spawn_agent's model or run_task's client),
    or the configured one when none is. 0 is not "the default" and not "no limit": refused, as
    is anything but a whole number, since the caller meant something else."""
    if max_iter is None:
        return int(cfg.max_al_iterations)
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ToolError(f"max_iter must be a whole number of at least 1, got {max_iter!r}")
    return max_iter


def spawn(ctx: ToolContext, task: str, checks: list[str], persistence: str, max_iter: int,
          label: str = "agent") -> dict:
    durable = ctx.front.durable if persistence == "durable" else None
    note = "durable needs a --thread run; this sub-agent ran ephemeral" \
        if persistence == "durable" and durable is None else ""
    key = durable.key(task, checks) if durable else ""
    finished = durable.result(key) if durable else None
    if finished is not None:
        return finished  # finished before the run was killed
    progress = durable.progress(key) if durable else None
    messages = (progress.read() if progress else []) or child_messages(ctx, task, instructions(checks))
    child = ctx.child(_serialized(ctx.on_event), label)
    box = make_toolbox(ctx.cfg.tools, child)
    limits = Limits.from_config(ctx.cfg, max_iterations=max_iter)  # the parent's limits, its own step count
    resumed = len(messages) > 2
    sync = progress.sync if progress else None
    result = report(lambda: run_child(ctx, messages, box, limits, child.on_event, sync), checks, box)
    result["persistence"] = "durable" if durable else "ephemeral"
    if note:
        result["note"] = note
    if durable:
        result["resumed"] = resumed
        durable.finish(key, result)
    return result


def report(turn: Callable[[], Turn], checks: list[str], box: Toolbox) -> dict[str, Any]:
    """The structured result of an agent's turn on a task (spawn_agent's, and `bantam mcp`'s
    run_task's): its STATUS and UNMET lines read, a budget that ran out a partial result, a model
    that failed a failure; `box` is the toolbox the turn ran with, whose calls are counted."""
    try:
        done = turn()
        status, output, unmet = read_report(done.text, checks)
        steps = done.steps
    except LimitReached as e:
        status, output, unmet = "partial", f"stopped: {e}. Last output: {getattr(e.turn, 'text', '')}", checks
        steps = getattr(e.turn, "steps", 0)
    except ProviderError as e:
        status, output, unmet, steps = "failure", f"the model failed: {e}", checks, 0
    return {"status": status, "output": output, "steps_taken": steps, "tool_calls": box.used, "unmet_checks": unmet}


def instructions(checks: list[str]) -> str:
    if not checks:
        return REPORT.format(checked="")
    items = "\n".join(f"- {c}" for c in checks)
    return REPORT.format(checked=" and every check is met") + CHECKS.format(items=items)


def read_report(text: str, checks: list[str]) -> tuple[str, str, list[str]]:
    """(status, output without the report lines, unmet checks) from the child's final answer."""
    status, unmet, kept = "", [], []
    for line in text.splitlines():
        head, _, rest = line.strip().strip("*_`").partition(":")
        word = re.findall(r"^[\W_]*([a-z]*)", rest.lower())[0]  # "**failure**.", "blocked - I need ..."
        if head.strip("*_` ").upper() == "STATUS" and word in STATUSES:
            status = word
            reason = rest.strip(" *_`")[len(word):].strip(" *_`-—:.")  # what a blocked child lacks
            if reason:
                kept.append(reason)
        elif head.upper() == "UNMET" and rest.strip():
            unmet.append(rest.strip())
        else:
            kept.append(line)
    if not status:  # no report: checks cannot be taken as verified
        status, unmet = ("partial", unmet or checks) if checks else ("success", unmet)
    elif status == "success" and unmet:
        status = "partial"
    return status, "\n".join(kept).strip(), unmet


def _serialized(on_event: OnEvent) -> OnEvent:
    def forward(event: Event) -> None:
        with _events_lock:
            on_event(event)
    return forward
