"""The agentic loop (seed 000's `AL`): ask the model, run the tools it calls, repeat until it answers.

    turn = run(provider, messages, toolbox, Limits(), on_event)

`messages` (OpenAI chat shape) is extended in place with complete messages only: a failed or
interrupted step leaves it exactly as it was before that step. (One exception, on purpose: a
request refused for context length compacts the conversation and is sent again.) Everything the loop has to say
goes out through `on_event`; it never prints.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .config import FIBONACCI_DELAYS, Config
from .errors import APIError, LimitReached
from .compact import compact, is_context_overflow
from .events import Notice, OnEvent, ToolCall, ToolResult, Usage, UsageReport, quiet
from .providers import Provider, Reply
from .providers.retry import with_retries
from .sanitize import sanitize
from .tools import Outcome, Toolbox

REPEAT_LIMIT = 3  # the same call this many times in a row is refused, not run again


@dataclass(frozen=True)
class Limits:
    max_iterations: int = 1000  # model requests per turn
    tool_budget: int = 200      # tool calls per turn
    retry_delays: tuple[float, ...] = FIBONACCI_DELAYS

    @classmethod
    def from_config(cls, cfg: Config) -> "Limits":
        return cls(cfg.max_al_iterations, cfg.tool_budget, cfg.retry_delays)


@dataclass
class Turn:
    text: str                   # the final answer
    usage: Usage = field(default_factory=Usage)


def run(provider: Provider, messages: list[dict], toolbox: Toolbox, limits: Limits,
        on_event: OnEvent) -> Turn:
    """Run until the model answers without tool calls; raise LimitReached if a budget runs out."""
    usage = Usage()
    schemas = toolbox.schemas()
    repeats = RepeatGuard()
    budget_left = limits.tool_budget
    try:
        for _ in range(limits.max_iterations):
            reply = request(provider, messages, schemas, limits, on_event)
            if reply.usage:
                usage.add(reply.usage)
            calls = reply.message.get("tool_calls")
            if not calls:
                return Turn(_finish(reply, messages, on_event), usage)
            step_start = len(messages)
            try:
                messages.append(reply.message)
                for call in calls:
                    budget_left -= 1
                    outcome = _run_call(call, toolbox, repeats, budget_left, on_event)
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                                     "content": outcome.content})
                if budget_left < 0:
                    raise LimitReached(f"tool_budget ({limits.tool_budget}) ran out before a final answer")
            except KeyboardInterrupt:
                del messages[step_start:]
                raise
        raise LimitReached(f"max_al_iterations ({limits.max_iterations}) reached before a final answer")
    finally:
        if usage.prompt_tokens or usage.completion_tokens:
            on_event(UsageReport(model=provider.model, usage=usage))


def request(provider: Provider, messages: list[dict], schemas: list[dict], limits: Limits,
            on_event: OnEvent) -> Reply:
    """One model request, retried. Two refusals are repaired once: the seed's "Invalid assistant
    message" (drop the empty message) and a context overflow (compact, then ask again)."""
    def call() -> Reply:
        return provider.complete(messages, schemas, on_event)
    try:
        return with_retries(call, on_event, limits.retry_delays)
    except APIError as e:
        if e.invalid_assistant_message and drop_last_assistant(messages):
            on_event(Notice(message="the API rejected an empty assistant message in the history; "
                                    "dropped it and retrying"))
        elif is_context_overflow(e) and len(messages) > 2:
            on_event(Notice(message=f"the conversation is too long for the model ({e}); compacting"))
            compact(provider, messages, limits.retry_delays, quiet(on_event))
        else:
            raise
        return with_retries(call, on_event, limits.retry_delays)


def drop_last_assistant(messages: list[dict]) -> bool:
    """Remove the last assistant message and the tool results that answer it."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            end = i + 1
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
            del messages[i:end]
            return True
    return False


def _finish(reply: Reply, messages: list[dict], on_event: OnEvent) -> str:
    text = reply.message.get("content") or ""
    if text:
        messages.append({"role": "assistant", "content": text})
    else:  # an empty assistant message would be rejected by the API on the next turn
        on_event(Notice(message="the model returned an empty answer"))
    return text


def _run_call(call: dict, toolbox: Toolbox, repeats: "RepeatGuard", budget_left: int,
              on_event: OnEvent) -> Outcome:
    function = call.get("function") or {}
    name, arguments = str(function.get("name", "")), str(function.get("arguments", ""))
    on_event(ToolCall(id=call.get("id", ""), name=name, arguments=sanitize(arguments)))
    if budget_left < 0:
        outcome = Outcome("error: the tool budget for this turn is used up; not run", True)
    elif repeats.count(name, arguments) >= REPEAT_LIMIT:
        outcome = Outcome(f"error: this exact call was made {REPEAT_LIMIT} times in a row and was "
                          "not run again; its result will not change. Try a different approach.", True)
    else:
        outcome = toolbox.execute(name, arguments)
    on_event(ToolResult(id=call.get("id", ""), name=name, content=outcome.content,
                        is_error=outcome.is_error))
    return outcome


class RepeatGuard:
    """Counts how many times in a row the same tool was called with the same arguments."""

    def __init__(self) -> None:
        self.last: tuple[str, str] | None = None
        self.times = 0

    def count(self, name: str, arguments: str) -> int:
        try:
            arguments = json.dumps(json.loads(arguments), sort_keys=True)
        except ValueError:
            pass
        key = (name, arguments)
        self.times = self.times + 1 if key == self.last else 1
        self.last = key
        return self.times
