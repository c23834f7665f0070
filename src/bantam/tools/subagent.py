"""run_subagent: hand a task to a child agent with a fresh context (seed 000)."""
from __future__ import annotations

from typing import Any

from ..events import quiet
from ..errors import ToolError
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
        from ..loop import Limits, run
        if ctx.depth > 0 or ctx.provider is None:
            raise ToolError("a child agent cannot start another agent")
        child_ctx = ctx.child(quiet(ctx.on_event))  # its answer comes back as the result
        messages = [{"role": "system", "content": ctx.system_prompt + CHILD_NOTE},
                    {"role": "user", "content": args["prompt"]}]
        box = make_toolbox(ctx.cfg.tools, child_ctx)
        return run(ctx.provider, messages, box, Limits.from_config(ctx.cfg), child_ctx.on_event).text

