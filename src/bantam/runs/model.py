"""The model behind a run: any bantam provider, or scripted answers replayed from a file.

A run never relies on native tool calling: the model answers in text and the parser reads it.
With provider=local and `[model] grammar = true` (the default), the answer is additionally
constrained by a JSON-schema grammar through the local provider's tool grammar; the result is
turned back into the same JSON text, so the parser and the gates see nothing special.

Scripted answers (`--scripted FILE`) are a JSON list of strings, or a text file in which a line
`=====8<=====` separates the answers. They are replayed in order, one per model call; which ones
were used is saved in the run, so a resumed run goes on with the next one.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config import FALLBACK_CONTEXT_WINDOW, Config
from ..errors import ConfigError, ProviderError, Refused
from ..fsutil import CONFIG_LIMIT, read_named
from ..events import OnEvent, quiet
from ..providers import context_window, make_provider
from ..providers.retry import with_retries
from .context import Request, estimate
from .settings import Model as ModelSettings
from .tools import TOOLS, Workspace

SCRIPT_SEPARATOR = "=====8<====="
DESCRIPTION_CHARS = 80  # grammar bounds on free text: small models ramble
NAMES_IN_GRAMMAR = 50  # files (and folders) a grammar offers as paths
WALK_ENTRIES = 5000  # entries looked at to find them
ANSWER_CHARS = 300


@dataclass
class ModelReply:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


class RunModel(Protocol):
    label: str           # what status shows: the model name, or "scripted: FILE"
    max_tokens: int      # the output limit of one answer

    def window(self) -> int: ...

    def answer(self, request: Request, on_event: OnEvent) -> ModelReply: ...


class ScriptedModel:
    def __init__(self, path: str, used: int, settings: ModelSettings):
        self.path, self.used = path, used
        self.answers = read_script(path)
        self.label = f"scripted: {path}"
        self.max_tokens = settings.max_output_tokens
        self.context_window = settings.context_window or 200_000

    def window(self) -> int:
        return self.context_window

    def answer(self, request: Request, on_event: OnEvent) -> ModelReply:
        if self.used >= len(self.answers):
            raise ProviderError(f"the scripted answers in {self.path} are used up "
                                f"({len(self.answers)} answers)", retryable=False)
        text = self.answers[self.used]
        self.used += 1
        return ModelReply(text, "stop", request.prompt_tokens, estimate(len(text)))


def read_script(path: str) -> list[str]:
    try:
        text = read_named(path, CONFIG_LIMIT).decode("utf-8")
    except Refused as e:
        raise ConfigError(f"--scripted: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--scripted: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if text.lstrip().startswith("["):
        try:
            answers = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"--scripted: {path} is not a JSON list of strings ({e})") from None
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise ConfigError(f"--scripted: {path} must be a JSON list of strings")
        return answers
    return [part.strip("\n") for part in text.split(f"\n{SCRIPT_SEPARATOR}\n")]


class ProviderModel:
    def __init__(self, cfg: Config, settings: ModelSettings, workspace: Workspace):
        forward = {**cfg.forward, "max_tokens": settings.max_output_tokens}
        if settings.seed is not None:
            forward["seed"] = settings.seed
        self.grammar = cfg.provider == "local" and settings.grammar
        aids = cfg.local_aids
        if self.grammar:
            forward["tool_choice"] = "required"  # the local provider then emits only the call
            # The run's grammar holds each argument to the workspace itself (call_schema), stricter
            # than the chat aids' command and path patterns, which would replace it: so no aids.
            aids = "off"
        self.cfg = cfg.with_values(forward=forward, local_aids=aids)
        self.provider = make_provider(self.cfg)
        self.settings, self.workspace = settings, workspace
        self.label = self.provider.model + (" (local)" if cfg.provider == "local" else "")
        self.max_tokens = settings.max_output_tokens

    def window(self) -> int:
        return self.settings.context_window or context_window(self.provider, self.cfg) or FALLBACK_CONTEXT_WINDOW

    def answer(self, request: Request, on_event: OnEvent) -> ModelReply:
        constrained = self.grammar and request.kinds and request.purpose != "write"
        tools = grammar_tools(request, self.workspace) if constrained else []

        def call() -> ModelReply:
            try:
                reply = self.provider.complete(request.messages, tools, quiet(on_event))
            except ValueError as e:  # the grammar-bound call did not parse (cut off, or odd bytes)
                return ModelReply(f"(a tool call that is not valid JSON: {e})", None, request.prompt_tokens,
                             self.max_tokens)
            text = from_call(reply.message)  # a server may answer with a call though none was offered
            usage = reply.usage
            return ModelReply(text, reply.finish_reason, usage.prompt_tokens if usage else request.prompt_tokens,
                         usage.completion_tokens if usage else estimate(len(text)))
        return with_retries(call, on_event, self.cfg.retry_delays)


def from_call(message: dict) -> str:
    """A tool call back into the proposal JSON the parser expects: a grammar-bound one, or a
    native call a server sent unasked (a "plan" call that holds an action rather than steps is
    left to the parser's plan-call recovery). The answer's text when it holds no call."""
    calls = message.get("tool_calls") or []
    if not calls:
        return message.get("content") or ""
    name = calls[0]["function"]["name"]
    args = json.loads(calls[0]["function"]["arguments"] or "{}")
    if name == "plan" and isinstance(args, dict) and isinstance(args.get("steps"), list):
        return json.dumps({"plan": args["steps"]})
    if name == "final" and isinstance(args, dict) and "answer" in args:
        return json.dumps({"final": args["answer"]})
    return json.dumps({"tool": name, "arguments": args})


def grammar_tools(request: Request, ws: Workspace) -> list[dict]:
    """Tool schemas whose grammar admits exactly the proposals this request expects."""
    planning = "plan" in request.kinds
    walked = {"read_file", "list_files"} & set(request.tools)
    names = workspace_names(ws.root) if walked else ([], [])  # one walk serves both tools
    calls = {name: call_schema(name, ws, names, planning) for name in request.tools}
    if planning:
        step = {"anyOf": [{"type": "object", "required": ["description", "tool", "arguments"], "properties": {
            "description": plain_text(DESCRIPTION_CHARS),
            "tool": {"const": name}, "arguments": schema}} for name, schema in calls.items()]}
        steps = {"type": "array", "minItems": 1, "maxItems": 6, "items": step}
        return [_tool("plan", {"type": "object", "required": ["steps"], "properties": {"steps": steps}})]
    tools = [_tool(name, schema) for name, schema in calls.items()]
    if "final" in request.kinds and request.purpose == "final":
        tools.append(_tool("final", {"type": "object", "required": ["answer"],
                                     "properties": {"answer": plain_text(ANSWER_CHARS)}}))
    return tools


def call_schema(name: str, ws: Workspace, names: tuple[list[str], list[str]],
                planning: bool = False) -> dict[str, Any]:
    """Each path or command argument is an enum of what the gates would accept: a free string let
    a small model propose `/example.txt` or `examples/example.txt` until the run blocked. A plan
    may read a file an earlier step writes; an action reads only what exists. `names`: the
    workspace's files and folders (workspace_names)."""
    if name == "shell":
        return _object({"command": {"enum": sorted(ws.commands)}})
    if name == "write_file":
        return _object({"path": {"enum": list(ws.write_paths)}})
    files, folders = names
    if name == "read_file":
        choices = sorted(set(files) | set(ws.write_paths if planning else ()))
        return _object({"path": {"enum": choices} if choices else plain_text(100)})
    return _object({"path": {"enum": [".", *folders]}})


def workspace_names(root: Path, limit: int = NAMES_IN_GRAMMAR) -> tuple[list[str], list[str]]:
    """Up to `limit` regular files and folders of the workspace, shallowest first, as relative
    paths; symlinks and hidden names are left out (the paths gate refuses links that leave the
    workspace). Bounded: a huge workspace costs at most WALK_ENTRIES entries per request."""
    files: list[str] = []
    folders: list[str] = []
    queue, seen = [root], 0
    while queue and seen < WALK_ENTRIES:
        folder = queue.pop(0)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if entry.name.startswith(".") or entry.is_symlink():
                continue
            rel = Path(entry.path).relative_to(root).as_posix()
            if entry.is_dir(follow_symlinks=False):
                folders.append(rel)
                queue.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                files.append(rel)
    return files[:limit], folders[:limit]


def plain_text(limit: int) -> dict[str, Any]:
    """A short one-line string: the stock JSON grammar lets raw control characters into strings
    (invalid JSON), and an unbounded string lets a small model ramble to the output limit."""
    return {"type": "string", "pattern": f"^[^\"\\\\\\x00-\\x1f]{{1,{limit}}}$"}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": list(properties), "properties": properties}


SUMMARIES = {"plan": "the plan: a list of steps, each one tool call that moves toward the goal",
             "final": "the final answer to the goal, in one sentence, from the results shown"}


def _tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    summary = TOOLS[name].description if name in TOOLS else SUMMARIES[name]
    return {"type": "function", "function": {"name": name, "description": summary, "parameters": parameters}}
