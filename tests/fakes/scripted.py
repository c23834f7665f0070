"""A model double in process: bantam's Provider protocol, answering from a script.

    provider = ScriptedProvider(tool("shell_exec", {"command": "echo hi"}), text("It printed hi."))
    loop.run(provider, messages, make_toolbox(...), Limits(...), events.append)
    provider.requests[1].messages   # what the model was sent the second time

Each request takes the next step of the script: a `Step` (an answer: text, reasoning, tool calls,
usage, finish reason) or an exception, raised as a real provider raises it (`ProviderError` for a
dropped connection, `APIError` with a status for a refusal). The answer streams out as a real
provider streams it (`RequestStarted`, then `Reasoning` and `Text` deltas), and every request is
recorded whole (messages, tools, options), copied at the time it was made.

What goes over a wire (SSE framing, headers, status codes, cut streams, Retry-After parsing) is
not here: tests of that use the real providers against tests/fakes' servers. This double stands in
for the model, not for any of bantam's functions: the loop, tools, guards and sessions under test
run for real. (Like mini-swe-agent's DeterministicModel, llm's MockModel, httpx's MockTransport.)
"""
from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass
from typing import Any

from bantam.events import OnEvent, Reasoning, RequestStarted, Text, Usage
from bantam.providers import DEFAULT_OPTIONS, Provider, Reply, RequestOptions


@dataclass(frozen=True)
class Step:
    """One scripted answer. `chunks` splits the text into that many Text deltas (a real stream
    sends many), so a renderer or collector that joins deltas is exercised too."""
    content: str | None = None
    tool_calls: tuple[dict, ...] = ()
    reasoning: str = ""
    usage: Usage | None = None
    finish_reason: str | None = "stop"
    chunks: int = 1

    def play(self, on_event: OnEvent, output_limit: int | None) -> Reply:
        if self.reasoning:
            on_event(Reasoning(text=self.reasoning))
        for piece in _pieces(self.content or "", self.chunks):
            on_event(Text(text=piece))
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = copy.deepcopy(list(self.tool_calls))
        usage = copy.copy(self.usage) if self.usage else None  # the loop adds to it; the script stays
        return Reply(message, usage, self.finish_reason, output_limit)


@dataclass(frozen=True)
class Request:
    """What the model was asked: a deep copy of the messages and tools, and the request's options."""
    messages: list[dict]
    tools: list[dict]
    options: RequestOptions

    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


class ScriptedProvider(Provider):
    """Replays `script` (Steps and exceptions), one per request, in order; thread-safe, as
    parallel sub-agents share one provider. A request past the end of the script fails the test
    (AssertionError, which no retry swallows). Override `next_step` to route requests (for
    example each sub-agent to its own replies). It subclasses the Provider protocol, so it has
    exactly what the core may use of a provider, the protocol's defaults included.

    `output_limit` is the output budget a request carries when the loop sets none (a configured
    max_tokens); each reply reports the budget it was generated under, as the HTTP providers do."""

    def __init__(self, *script: Step | BaseException, model: str = "scripted-model",
                 window: int | None = None, models: tuple[str, ...] = ("scripted-model",),
                 output_limit: int | None = None):
        self.script: list[Step | BaseException] = list(script)
        self.model = model
        self.output_limit = output_limit
        self.window = window  # what context_window() says (None: the server's model list is silent)
        self.models = models
        self.requests: list[Request] = []
        self.lock = threading.Lock()

    def add(self, *steps: Step | BaseException) -> None:
        with self.lock:
            self.script.extend(steps)

    def complete(self, messages: list[dict], tools: list[dict], on_event: OnEvent,
                 options: RequestOptions = DEFAULT_OPTIONS) -> Reply:
        with self.lock:
            self.requests.append(Request(copy.deepcopy(messages), copy.deepcopy(tools), options))
        on_event(RequestStarted(model=self.model))
        step = self.next_step(messages)
        if isinstance(step, BaseException):
            raise step
        return step.play(on_event, options.output_tokens or self.output_limit)

    def next_step(self, messages: list[dict]) -> Step | BaseException:
        with self.lock:
            if not self.script:
                raise AssertionError(f"the script has no reply left for request {len(self.requests)}: "
                                     f"{json.dumps(messages[-1:], default=str)[:300]}")
            return self.script.pop(0)

    def list_models(self) -> list[str]:
        return list(self.models)

    def context_window(self) -> int | None:
        return self.window


# --- steps --------------------------------------------------------------------------------------

def text(content: str, usage: Usage | None = None, *, reasoning: str = "", finish: str | None = "stop",
         chunks: int = 1) -> Step:
    """A plain answer."""
    return Step(content, (), reasoning, usage, finish, chunks)


def call(name: str, arguments: dict | str, call_id: str = "call_1") -> dict:
    """One tool call in the OpenAI chat shape; `arguments` as a dict, or as the raw text a model
    sent (invalid JSON included)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def tool(name: str, arguments: dict | str, call_id: str = "call_1", usage: Usage | None = None,
         *, content: str | None = None, finish: str | None = "tool_calls") -> Step:
    """An answer that calls one tool."""
    return calls(call(name, arguments, call_id), usage=usage, content=content, finish=finish)


def calls(*tool_calls: dict, usage: Usage | None = None, content: str | None = None,
          finish: str | None = "tool_calls") -> Step:
    """An answer that calls several tools at once (`call(...)` each)."""
    return Step(content, tuple(tool_calls), "", usage, finish)


def usage(prompt: int, completion: int, cached: int | None = None) -> Usage:
    """One request's counts, as a provider reports them."""
    return Usage(prompt, completion, cached, prompt)


def _pieces(content: str, chunks: int) -> list[str]:
    if not content:
        return []
    size = -(-len(content) // max(1, chunks))
    return [content[i:i + size] for i in range(0, len(content), size)]


# --- a whole one-shot session in process ----------------------------------------------------------

def one_shot(folder, provider: Provider | None, prompt: str = "go", **flags: str) -> tuple[Any, list]:
    """`bantam -p PROMPT` in `folder`, in process, on `provider` (None: the real provider the
    configuration names, for a test of what goes over the wire): the configuration loaded as the
    command line loads it (the folder's .bantam.cfg when trusted, the user's file, the environment,
    `flags` as --set), then the one-shot front end's own `answer`, which builds the session through
    bantam.session. Left out: the process, argument parsing and rendering (exit codes, stdout and
    stderr stay with the tests that start bantam). Returns (the turn or None, the events)."""
    from pathlib import Path

    from bantam import oneshot, session
    from bantam.providers import make_provider
    events: list = []
    cfg = session.load_config(flags, Path(folder))
    model = provider if provider is not None else make_provider(cfg)
    return oneshot.answer(cfg, model, prompt, events.append, folder=Path(folder)), events


def tool_results(provider: ScriptedProvider) -> list[str]:
    """Every tool result the model was sent, in order of first sending, across all its requests
    (a sub-agent's conversation is a request of its own), each once."""
    found: dict[tuple, str] = {}
    for request in provider.requests:
        for m in request.messages:
            if m.get("role") == "tool":
                found.setdefault((m.get("tool_call_id"), str(m.get("content"))), str(m.get("content")))
    return list(found.values())
