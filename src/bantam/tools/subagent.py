"""run_subagent: hand a task to a child agent with a fresh context."""
from __future__ import annotations

from typing import Any

from ..errors import ToolError
from ..events import Event, OnEvent, Usage, UsageReport
from ..limits import Limits, Turn
from . import Tool, ToolContext, Toolbox, make_toolbox

CHILD_NOTE = "\n\nImportant: this is a child agent"


class RunSubagent(Tool):
    name = "run_subagent"
    description = "Give a self-contained task to a child agent with a fresh context; returns its answer."
    parameters = {"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        check_can_delegate(ctx)
        child_ctx = ctx.child(ctx.on_event, f"sub-agent {next(ctx.spawn_numbers) + 1}")
        messages = child_messages(ctx, args["prompt"])
        box = make_toolbox(ctx.cfg.tools, child_ctx)
        return run_child(ctx, messages, box, Limits.from_config(ctx.cfg), child_ctx.on_event).text


def check_can_delegate(ctx: ToolContext) -> None:
    """Children cannot start agents of their own (and nothing can without a model)."""
    if ctx.depth > 0 or ctx.provider is None:
        raise ToolError("a child agent cannot start another agent")
    if ctx.run_loop is None:  # the tool was called outside loop.run, which hands itself down
        raise ToolError("a sub-agent can be started only from an agent's turn")


def run_child(ctx: ToolContext, messages: list[dict], box: Toolbox, limits: Limits, on_event: OnEvent,
              checkpoint: Any = None) -> Turn:
    """A child's turn in the loop the parent runs in. What it spent counts in the parent's usage
    however the turn ends (an answer, a budget, a model failure, Ctrl+C): the loop reports a
    turn's usage as the turn ends, whichever way, and that report is what is counted."""
    assert ctx.provider is not None and ctx.run_loop is not None  # check_can_delegate saw both
    spent = Usage()

    def counting(event: Event) -> None:
        if isinstance(event, UsageReport):
            spent.add(event.usage, latest=False)
        on_event(event)
    try:
        return ctx.run_loop(ctx.provider, messages, box, limits, counting, checkpoint)
    finally:
        ctx.add_child_usage(spent)


def child_messages(ctx: ToolContext, task: str, instructions: str = "") -> list[dict]:
    """A child's whole context: the parent's system prompt marked as a child's, and the task."""
    return [{"role": "system", "content": ctx.system_prompt + CHILD_NOTE + instructions},
            {"role": "user", "content": task}]
