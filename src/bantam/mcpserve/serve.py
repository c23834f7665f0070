"""`bantam mcp`: bantam as an MCP server over stdio, for another agent or an editor.

Tools served:
- `run_task(task, checks?, max_iter?)`: a bantam session works on the task to completion with the
  configured tools (`max_iter` model requests at most, default max_al_iterations) and returns
  spawn_agent's structured result (status, output, steps_taken, tool_calls, unmet_checks),
  sending a progress notification for each tool call it makes.
- `shell_exec` and `write_file`, run through bantam's Toolbox (the same checks and clipping).

Configuration as usual (`.bantam.cfg` in the directory it starts in). The served agent does not
start MCP servers of its own: a `.mcp.json` naming `bantam mcp` would otherwise start itself.
"""

import json
import logging
import threading
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import Config

INSTRUCTIONS = ("bantam is a small AI agent. run_task hands it a self-contained task; it works in "
                "its own directory with shell and file tools and returns a JSON result.")


def serve(cfg: Config, folder: Path) -> int:
    """Serve the tools and run_task over stdio; every session works in `folder`."""
    import anyio
    from mcp.server.mcpserver import Context, MCPServer

    from mcp.server.mcpserver.exceptions import ToolError as McpToolError

    from .. import session
    from ..errors import ToolError
    from ..events import ToolCall
    from ..limits import Limits
    from ..tools.spawn import instructions, iteration_budget, report

    cfg = cfg.with_values(mcp=False)
    server = MCPServer("bantam", version=__version__, instructions=INSTRUCTIONS)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the SDK logs every request otherwise
    served = tuple(n for n in cfg.tools if n in ("shell_exec", "write_file"))
    tools_only = session.FrontEnd(tools=served, with_model=False, with_mcp=False)  # such clients need no model
    box = session.build(cfg, folder, tools_only).toolbox
    provider_holder: list[Any] = []

    def provider():  # made on the first task, so that tools-only clients need no model
        if not provider_holder:
            from ..providers import make_provider
            provider_holder.append(make_provider(cfg))
        return provider_holder[0]

    @server.tool(description="Hand bantam a self-contained task; it works until done and returns "
                 "JSON: status (success|partial|failure|blocked), output, steps_taken, tool_calls, "
                 "unmet_checks. Progress notifications name each tool call it makes.")
    async def run_task(task: str, ctx: Context, checks: list[str] | None = None,
                       max_iter: int | None = None) -> dict[str, Any]:
        steps = [0]
        cancel = threading.Event()

        def on_event(event: Any) -> None:
            # its own calls: a sub-agent's may come from a thread of its own, which cannot report
            if isinstance(event, ToolCall) and not event.agent:
                steps[0] += 1
                message = f"step {steps[0]}: {event.name}"
                anyio.from_thread.run(ctx.report_progress, steps[0], None, message)

        try:  # the same rule as spawn_agent's: 0 is refused, not taken for the default
            budget = iteration_budget(max_iter, cfg)
        except ToolError as e:
            raise McpToolError(str(e)) from None
        front = session.FrontEnd(on_event=on_event, cancel=cancel, with_mcp=False,
                                 limits=lambda c: Limits.from_config(c, max_iterations=budget))
        agent = session.build(cfg, folder, front, provider())
        messages = [{"role": "system", "content": agent.system + instructions(checks or [])},
                    {"role": "user", "content": task}]

        def work() -> dict[str, Any]:
            return {**report(lambda: agent.run(messages), checks or [], agent.toolbox), "persistence": "ephemeral"}
        try:
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.set()  # the client gave up: the agent stops at its next step
            raise

    def shell_exec(command: str) -> str:
        return _through(box, "shell_exec", {"command": command})

    def write_file(path: str, content: str, offset: int | None = None,
                   del_bytes: int | None = None) -> str:
        args = {"path": path, "content": content, "offset": offset, "del_bytes": del_bytes}
        return _through(box, "write_file", {k: v for k, v in args.items() if v is not None})

    for name, fn in (("shell_exec", shell_exec), ("write_file", write_file)):
        if name in box.tools:
            server.add_tool(fn, name=name, description=box.tools[name].description)
    anyio.run(server.run_stdio_async)
    return 0


def _through(box: Any, name: str, args: dict[str, Any]) -> str:
    """One of bantam's tools, by the same path the agent uses (an error is raised to the client)."""
    from mcp.server.mcpserver.exceptions import ToolError as McpToolError
    outcome = box.execute(name, json.dumps(args))
    if outcome.is_error:
        raise McpToolError(outcome.content)
    return outcome.content
