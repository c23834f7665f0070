"""Simple agent work offline: the evaluation set in bench/local_eval/tasks.jsonl, run on a local model.

Each task is what a user tries first with no key and no network: list files, read a number from a
file, count lines, run a command and report its exit code, write a file with given content. A task
runs in a fresh temporary directory holding its files, through bantam's own loop, tools and system
prompt, greedy (temperature 0, seed 1), with at most 4 model requests and 3 tool calls. It passes
when every expected string is in the final answer as a whole word (or the file holds the content).
Every tool call is also checked against its tool's JSON schema.

Used by bench/bench_local.py (the table in bench/RESULTS.md) and tests/providers/test_local_eval.py.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bantam import loop
from bantam.config import Config
from bantam.errors import LimitReached, ProviderError
from bantam.events import Event, ToolCall
from bantam.prompt import system_prompt
from bantam.providers.aids import Profile
from bantam.providers.local import LocalProvider
from bantam.tools import ToolContext, make_toolbox

TASKS = Path(__file__).resolve().parent / "local_eval" / "tasks.jsonl"
LIMITS = loop.Limits(max_iterations=4, tool_budget=3, retry_delays=())


def tasks() -> list[dict]:
    return [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]


def valid(arguments: str, schema: dict) -> bool:
    """Do the arguments parse as a JSON object with every required key, each of its declared type?"""
    try:
        args = json.loads(arguments)
    except ValueError:
        return False
    if not isinstance(args, dict):
        return False
    types = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}
    properties = schema.get("properties", {})
    if any(key not in args for key in schema.get("required", [])):
        return False
    return all(key in properties and isinstance(value, types.get(properties[key].get("type"), object))
               for key, value in args.items())


def passed(task: dict, answer: str, directory: Path) -> bool:
    if "file" in task:
        try:
            return (directory / task["file"]).read_text().strip() == task["content"]
        except (OSError, UnicodeDecodeError):
            return False
    return all(re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", answer) for word in task["expect"])


def run_task(task: dict, cfg: Config, provider: LocalProvider) -> dict[str, Any]:
    start, here = time.perf_counter(), os.getcwd()
    calls: list[ToolCall] = []

    def on_event(event: Event) -> None:
        if isinstance(event, ToolCall):
            calls.append(event)

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name, content in task["files"].items():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / name).write_text(content)
        os.chdir(directory)
        try:
            system = system_prompt(cfg, directory)
            toolbox = make_toolbox(cfg.tools, ToolContext(cfg, provider, system, folder=directory))
            schemas = {s["function"]["name"]: s["function"]["parameters"] for s in toolbox.schemas()}
            messages = [{"role": "system", "content": system}, {"role": "user", "content": task["prompt"]}]
            try:
                turn = loop.run(provider, messages, toolbox, LIMITS, on_event)
                answer, usage, error = turn.text, turn.usage, ""
            except (LimitReached, ProviderError) as e:
                turn = getattr(e, "turn", None)
                answer, usage, error = getattr(turn, "text", ""), getattr(turn, "usage", None), str(e)
            ok = passed(task, answer, directory)
        finally:
            os.chdir(here)
    return {"id": task["id"], "kind": task["kind"], "ok": ok, "answer": answer, "error": error,
            "trace": [f"{c.name}({c.arguments})" for c in calls], "calls": len(calls),
            "valid_calls": sum(c.name in schemas and valid(c.arguments, schemas[c.name]) for c in calls),
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": usage.completion_tokens if usage else 0,
            "seconds": time.perf_counter() - start}


def evaluate(values: dict[str, Any] | None = None, selected: Iterable[dict] | None = None,
             profile: Profile | None = None) -> list[dict]:
    """Run the set (or `selected` tasks) with the embedded default's settings plus `values`, and
    `profile`'s aids instead of local_aids's when given."""
    cfg = Config(provider="local", temperature=0.0, forward={"seed": 1, "max_tokens": 160}).with_values(**(values or {}))
    provider = LocalProvider(cfg, profile)
    return [run_task(task, cfg, provider) for task in (selected if selected is not None else tasks())]
