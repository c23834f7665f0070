"""run_subagent: hand a task to a child agent with a fresh context (seed 000)."""
from __future__ import annotations

from typing import Any

from ..errors import ToolError
from ..limits import Limits
from . import ToolContext, make_toolbox

CHILD_NOTE = "\n\nImportant: this is a child agent"


class RunSubagent:
    name = "run_subagent"
    description = ("Delegate a self-contained task to a child agent with a fresh context and the "
                   "same tools. Returns the child's final answer. Children cannot delegate further.")
    parameters = {"type": "object", "required": ["prompt"],
                  "properties": {"prompt": {"type": "string",
                                            "description": "the complete task for the child"}}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        check_can_delegate(ctx)
        child_ctx = ctx.child(ctx.on_event, f"sub-agent {next(ctx.spawn_numbers) + 1}")
        messages = child_messages(ctx, args["prompt"])
        box = make_toolbox(ctx.cfg.tools, child_ctx)
        assert ctx.provider is not None and ctx.run_loop is not None  # check_can_delegate saw both
        turn = ctx.run_loop(ctx.provider, messages, box, Limits.from_config(ctx.cfg), child_ctx.on_event)
        ctx.add_child_usage(turn.usage)
        return turn.text



def check_can_delegate(ctx: ToolContext) -> None:
    """Children cannot start agents of their own (and nothing can without a model)."""
    if ctx.depth > 0 or ctx.provider is None:
        raise ToolError("a child agent cannot start another agent")
    if ctx.run_loop is None:  # the tool was called outside loop.run, which hands itself down
        raise ToolError("a sub-agent can be started only from an agent's turn")


def child_messages(ctx: ToolContext, task: str, instructions: str = "") -> list[dict]:
    """A child's whole context: the parent's system prompt marked as a child's, and the task."""
    return [{"role": "system", "content": ctx.system_prompt + CHILD_NOTE + instructions},
            {"role": "user", "content": task}]
