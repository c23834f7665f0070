"""Tools declare what they are: every tool subclasses `bantam.tools.Tool`, so the core asks each the
same questions (parallel, raw arguments, its schema here, saved first) and a tool that says nothing
gets the defaults. A tool that forgot to subclass would be probed for attributes again, or crash."""
from __future__ import annotations

import ast
import json
import time
from pathlib import Path
from typing import Any

import pytest

from bantam import loop
from bantam.config import Config
from bantam.toolnames import REGISTRY
from bantam.tools import Tool, ToolContext, Toolbox, core_tool
from tests.fakes.scripted import ScriptedProvider, calls, call, text

pytestmark = pytest.mark.quick

SRC = Path(__file__).resolve().parents[2] / "src" / "bantam"


def test_every_registered_tool_subclasses_tool() -> None:
    for name in REGISTRY:
        assert Tool in type(core_tool(name)).__mro__, name


def test_every_class_with_a_tools_run_method_subclasses_tool() -> None:
    """Any class in the package whose `run(self, args, ctx)` makes it a tool names Tool as a base
    (directly or through a base that does), so no tool reaches a Toolbox undeclared."""
    classes: dict[str, ast.ClassDef] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[f"{path.relative_to(SRC)}:{node.name}"] = node
    by_name = {key.split(":")[1]: node for key, node in classes.items()}

    def declares(node: ast.ClassDef, seen: int = 0) -> bool:
        bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
        return "Tool" in bases or any(b in by_name and seen < 5 and declares(by_name[b], seen + 1) for b in bases)

    tools = [key for key, node in classes.items() if _tool_methods(node)]
    assert len(tools) >= 10, tools  # the scan finds the tools it should
    assert [key for key in tools if not declares(classes[key]) and key != "tools/__init__.py:Tool"] == []


def _tool_methods(node: ast.ClassDef) -> list[ast.FunctionDef]:
    """The class's methods that take a tool call's context, when its `run(self, args, ctx)` makes it a tool."""
    methods = [f for f in node.body if isinstance(f, ast.FunctionDef)]
    if not any(f.name == "run" and [a.arg for a in f.args.args][:3] == ["self", "args", "ctx"] for f in methods):
        return []
    return [f for f in methods if "ctx" in [a.arg for a in f.args.args]]


def test_every_tool_takes_its_context_as_a_tool_context() -> None:
    """A tool's `ctx` is a ToolContext, never Any and never optional: mypy then checks each use of
    it, and a field that leaves ToolContext (for the front end's part, ctx.front) breaks no tool unseen."""
    loose = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for f in _tool_methods(node):
                    given = next(a.annotation for a in f.args.args if a.arg == "ctx")
                    if given is None or ast.unparse(given).strip("'\"") != "ToolContext":
                        loose.append(f"{path.relative_to(SRC)}:{node.name}.{f.name}")
    assert loose == []


def test_a_tool_context_holds_what_every_call_needs() -> None:
    """What only one front end uses (an editor's buffers, the daemon's fence, a run's workspace,
    a thread's durable agents, ...) is the front end's part, `ctx.front`, not a field of its own."""
    from dataclasses import fields
    assert [f.name for f in fields(ToolContext)] == [
        "cfg", "provider", "system_prompt", "on_event", "depth", "cancel", "spawn_numbers", "children_usage",
        "approvals", "folder", "run_loop", "tmp", "front"]


class Slow(Tool):
    """Says nothing but its name, description, schema and run: it takes every default."""
    name, description = "slow", "sleeps, then reports when it ran"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, str]] = []

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        start = time.monotonic()
        time.sleep(0.2)
        self.spans.append((start, time.monotonic(), args.get("text", "")))
        return "ok"


def test_a_tool_that_declares_nothing_takes_the_defaults(tmp_path: Path) -> None:
    slow = Slow()
    box = Toolbox({"slow": slow}, ToolContext(Config(), folder=tmp_path))
    # Two calls in one message: not parallel by default, so they run one after the other, in order.
    provider = ScriptedProvider(calls(call("slow", {"text": "a\u200bb"}, "c1"), call("slow", {"text": "c"}, "c2")),
                                text("done"))
    messages: list[dict] = [{"role": "user", "content": "go"}]
    turn = loop.run(provider, messages, box, loop.Limits(), lambda e: None)
    assert turn.text == "done"
    (a_start, a_end, a_text), (b_start, _, b_text) = slow.spans
    assert b_start >= a_end and (a_text, b_text) == ("ab", "c")  # not raw: the zero-width space is gone
    assert provider.requests[0].tools[0]["function"]["parameters"] == Slow.parameters
    assert not box.parallel("slow") and not slow.saved_first(json.dumps({}), box.ctx)
