"""The agentic loop: ask the model, run the tools it calls, repeat until it answers.

    turn = run(provider, messages, toolbox, Limits(), on_event)

`messages` (OpenAI chat shape) is extended in place with complete messages only: a failed or
interrupted step leaves it exactly as it was before that step. (One exception, on purpose: a
request refused for context length compacts the conversation and is sent again.) After every
complete step `checkpoint(messages)` is called, so a front end can persist progress; it may also
rewrite the list in place (the daemon brings in what arrived meanwhile). Everything
the loop has to say goes out through `on_event`; it never prints.

Policy plugs in as guards (`Guard`): each is consulted before every model request (it may stop
the turn by raising) and before every tool call (it may refuse the call: the reason goes back to
the model as the call's result), and told each call's outcome. Without `guards` a turn gets the
defaults: the tool budget and the repeat guard. Controlled runs pass their gates instead.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

from .compact import compact
from .limits import Limits, Turn
from .slots import idle
from .errors import APIError, LimitReached, OutputLimitReached, is_context_overflow
from .events import Notice, OnEvent, Retry, ToolCall, ToolResult, UsageReport, quiet
from .providers import Provider, Reply, RequestOptions
from .providers.retry import with_retries
from .sanitize import loads, sanitize
from .tools import Outcome, Toolbox

REPEAT_LIMIT = 3  # the same call this many times in a row is refused, not run again
REFUSALS_TO_STOP = 3  # repeats refused in one turn before the turn ends
OUTPUT_ATTEMPTS = 3  # at most three generations of an answer cut at the output limit
CUT = ("length", "max_tokens")  # finish reasons of an answer cut at the output limit
Checkpoint = Callable[[list[dict]], None]


@dataclass(slots=True)
class AnswerCut(Notice):
    """A text answer cut at the output limit, kept as it is. Shown as any Notice; its `limit`
    lets a front end mark the answer where it goes (the daemon's chat message, the exit code)."""
    limit: int = 0  # the max_tokens it was cut at; 0: not known


class Guard(Protocol):
    """Policy the loop consults. Exceptions raised here end the turn (the step is undone)."""

    def before_request(self, messages: list[dict]) -> None: ...

    def before_call(self, name: str, arguments: str) -> str | None:
        """None: run it; a reason: refused, not run, the reason is the call's result."""

    def after_call(self, name: str, arguments: str, outcome: Outcome) -> None: ...


def run(provider: Provider, messages: list[dict], toolbox: Toolbox, limits: Limits,
        on_event: OnEvent, checkpoint: Checkpoint | None = None,
        guards: Sequence[Guard] | None = None) -> Turn:
    """Run until the model answers without tool calls; raise LimitReached if a budget runs out."""
    turn = Turn("")
    if toolbox.ctx.run_loop is None:
        toolbox.ctx.run_loop = run  # sub-agents started by these tools run this same loop
    policy = list(default_guards(limits) if guards is None else guards)
    toolbox.start_run()
    try:
        if unanswered(messages):  # a step saved before its calls ran: they run now, unasked
            step(messages.pop(), messages, toolbox, policy, on_event, checkpoint)
        for turn.steps in range(1, limits.max_iterations + 1):
            if toolbox.ctx.cancel.is_set():
                raise KeyboardInterrupt
            for guard in policy:
                guard.before_request(messages)
            schemas = toolbox.schemas()  # each request: a tool list may change (an MCP server started)
            reply = request(provider, messages, schemas, limits, on_event, toolbox.ctx.folder)
            if reply.usage:
                turn.usage.add(reply.usage)
            turn.text = reply.message.get("content") or turn.text
            turn.finish_reason = reply.finish_reason or ""
            calls = reply.message.get("tool_calls")
            if not calls:
                turn.text = _finish(reply, messages, on_event)
                if checkpoint:
                    checkpoint(messages)
                return turn
            step(reply.message, messages, toolbox, policy, on_event, checkpoint)
        for guard in policy:  # a budget that ran out on the last step says so, not the step limit
            guard.before_request(messages)
        raise LimitReached(f"max_al_iterations ({limits.max_iterations}) reached before a final answer", turn)
    except LimitReached as e:
        e.turn = e.turn or turn
        raise
    finally:
        turn.usage.add(toolbox.ctx.children_usage, latest=False)  # sub-agents' tokens count too
        if turn.usage.prompt_tokens or turn.usage.completion_tokens:
            on_event(UsageReport(model=provider.model, usage=turn.usage))


def step(message: dict, messages: list[dict], toolbox: Toolbox, policy: Sequence[Guard],
         on_event: OnEvent, checkpoint: Checkpoint | None) -> None:
    """One assistant message's tool calls run, the message and their results added to `messages`.
    Interrupted, or stopped by a guard, the step never happened in `messages`. A call whose tool
    asks for it (`saved_first`: a durable sub-agent) has its step checkpointed before it runs, so
    a killed run runs that same saved call again (`unanswered`) instead of asking the model anew."""
    calls = message["tool_calls"]
    step_start = len(messages)
    try:
        messages.append(message)
        if checkpoint and any(_saved_first(call, toolbox) for call in calls):
            checkpoint(messages)
        with idle():  # commands and other tools wait: another session computes (slots.py)
            outcomes = run_calls(calls, toolbox, policy, on_event)
        messages.extend({"role": "tool", "tool_call_id": call.get("id", ""), "content": o.content}
                        for call, o in zip(calls, outcomes, strict=True))
    except BaseException:  # interrupted, or a guard stopped the turn: the step never happened
        del messages[step_start:]
        raise
    if checkpoint:
        checkpoint(messages)


def unanswered(messages: list[dict]) -> list[dict]:
    """The tool calls of a last assistant message that has no results yet (a step saved before
    its calls ran, then killed); [] when the conversation does not end so."""
    last = messages[-1] if messages else {}
    return list(last.get("tool_calls") or []) if last.get("role") == "assistant" else []


def _saved_first(call: dict, toolbox: Toolbox) -> bool:
    tool = toolbox.tools.get(_name(call))
    return tool is not None and tool.saved_first(_arguments(call), toolbox.ctx)


def request(provider: Provider, messages: list[dict], schemas: list[dict], limits: Limits,
            on_event: OnEvent, folder: Path | None = None) -> Reply:
    """One answer. An answer cut at a default output limit is asked for again with twice the
    budget, up to `max_tokens_limit` and OUTPUT_ATTEMPTS generations in all; one cut at
    the user's own max_tokens (`limits.fixed_max_tokens`) is not: that limit is their choice.
    A cut tool call is never run: it raises LimitReached; a cut text is kept, and AnswerCut says
    so. The larger budget travels with that one request (RequestOptions), never on the provider,
    which parallel sub-agents share."""
    options = RequestOptions(folder=folder)
    reply = _request(provider, messages, schemas, limits, on_event, options)
    tries = 1
    while tries < OUTPUT_ATTEMPTS:
        if reply.finish_reason not in CUT or limits.fixed_max_tokens:
            break
        used = _budget(reply, options)
        larger = min(2 * used, max(limits.max_tokens_limit, used))  # twice what was asked, no more
        if not used or larger <= used:  # a budget not known cannot be doubled: the cut answer stands
            break
        # A Retry, not a Notice: every front end drops a retried request's partial answer (a pipe
        # never gets it, a terminal erases it), so the answer is never written twice.
        on_event(Retry(message=f"the answer was cut at max_tokens={used}; asking again with "
                               f"max_tokens={larger}", delay=0, attempt=tries))
        options = RequestOptions(output_tokens=larger, folder=folder)
        reply = _request(provider, messages, schemas, limits, on_event, options)
        tries += 1
    if reply.finish_reason in CUT:
        _cut(reply, _budget(reply, options), tries, limits, on_event)
    return reply


def _budget(reply: Reply, options: RequestOptions) -> int:
    """The output limit `reply` was generated under: what the request carried, else its
    completion tokens (the server's own limit, not stated); 0: not known."""
    return reply.output_limit or options.output_tokens or (reply.usage.completion_tokens if reply.usage else 0)


def _cut(reply: Reply, limit: int, tries: int, limits: Limits, on_event: OnEvent) -> None:
    """The answer stays cut: a tool call is not run (LimitReached), a text is kept (AnswerCut).
    Both name the limit the last attempt was cut at (not the most it could have grown to), and
    the knob that would help."""
    at = (f"max_tokens={limit}" if limit else "the output limit") + (f" after {tries} attempts" if tries > 1 else "")
    knob = "max_tokens_limit" if not limits.fixed_max_tokens and limit >= limits.max_tokens_limit else "max_tokens"
    if reply.message.get("tool_calls"):
        raise OutputLimitReached(f"the answer was cut at the output limit ({at}) in the middle of a tool call; "
                           f"not run; raise {knob}")
    on_event(AnswerCut(message=f"answer cut at {at}; raise {knob}", limit=limit))


def _request(provider: Provider, messages: list[dict], schemas: list[dict], limits: Limits,
             on_event: OnEvent, options: RequestOptions) -> Reply:
    """One model request, retried. Two refusals are repaired once: an API's "Invalid assistant
    message" (drop the empty message) and a context overflow (compact, then ask again)."""
    def call() -> Reply:
        return provider.complete(messages, schemas, on_event, options)
    try:
        return with_retries(call, on_event, limits.retry_delays)
    except APIError as e:
        if e.invalid_assistant_message and drop_last_assistant(messages):
            on_event(Notice(message="the API rejected an empty assistant message in the history; "
                                    "dropped it and retrying"))
        elif is_context_overflow(e) and len(messages) > 2:
            on_event(Notice(message=f"the conversation is too long for the model ({e}); compacting"))
            compact(provider, messages, limits.retry_delays, quiet(on_event),
                    str(options.folder or "."))  # the summary quotes the session's AGENTS.md
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
        messages.append({k: v for k, v in reply.message.items() if k != "tool_calls"})
    else:  # an empty assistant message would be rejected by the API on the next turn
        on_event(Notice(message="the model returned an empty answer"))
    return text


def run_calls(calls: list[dict], toolbox: Toolbox, guards: Sequence[Guard],
              on_event: OnEvent) -> list[Outcome]:
    """Run one assistant message's tool calls, each once every guard let it. Consecutive calls of
    a tool marked `parallel` (sub-agents) run at the same time; results are reported in call order."""
    outcomes: list[Outcome | None] = [None] * len(calls)
    batch: list[tuple[int, str, str]] = []
    reported = 0

    def settle() -> None:
        nonlocal batch, reported
        _run_batch(batch, toolbox, outcomes)
        batch = []
        while reported < len(calls) and (outcome := outcomes[reported]) is not None:
            call = calls[reported]
            for guard in guards:
                guard.after_call(_name(call), _arguments(call), outcome)
            on_event(ToolResult(id=call.get("id", ""), name=_name(call), content=outcome.content,
                                is_error=outcome.is_error))
            reported += 1

    for i, call in enumerate(calls):
        name, arguments = _name(call), _arguments(call)
        on_event(ToolCall(id=call.get("id", ""), name=name, arguments=sanitize(arguments)))
        refusal = next((r for guard in guards if (r := guard.before_call(name, arguments)) is not None), None)
        if refusal is not None:
            outcomes[i] = Outcome(f"error: {refusal}", True)
        elif toolbox.parallel(name):
            batch.append((i, name, arguments))
            continue
        else:
            settle()
            outcomes[i] = toolbox.execute(name, arguments)
        settle()
    settle()
    return [o for o in outcomes if o is not None]


def _name(call: dict) -> str:
    return str((call.get("function") or {}).get("name", ""))


def _arguments(call: dict) -> str:
    return str((call.get("function") or {}).get("arguments", ""))


def _run_batch(batch: list[tuple[int, str, str]], toolbox: Toolbox, outcomes: list) -> None:
    if len(batch) <= 1:
        for i, name, arguments in batch:
            outcomes[i] = toolbox.execute(name, arguments)
        return
    def work(i: int, name: str, arguments: str) -> None:
        try:
            outcomes[i] = toolbox.execute(name, arguments)
        except KeyboardInterrupt:  # cancelled with its parent, which re-raises for everyone
            pass
    workers = [threading.Thread(target=work, args=item, daemon=True) for item in batch]
    for w in workers:
        w.start()
    try:
        for w in workers:
            while w.is_alive():
                w.join(0.1)  # short waits, so Ctrl+C is seen at once
    except KeyboardInterrupt:
        toolbox.ctx.cancel.set()  # the children stop at their next step or shell poll
        raise


class WriteGuard:
    """Writes that undo the model's own work are refused: the write just made, made again with
    nothing run between (a splice made twice inserts its text twice: "Hello!Hello!"), or its text
    spliced into the same file again at another offset (appended again and again: Qwen2.5-Coder
    1.5B wrote one line fourteen times, each at the new end), and a write whose content is the
    report of the last write ("wrote 4 bytes to output.txt" written over output.txt, replacing the
    script's output with bantam's words). A model copies the call or the result it just saw; a
    small one does it often (bench/bench_tasks.py: write-greeting, run-script, count-lines)."""

    def __init__(self) -> None:
        self.written: str | None = None  # the last write's arguments, while nothing else has run since
        self.text: tuple[object, object] | None = None  # and its (path, content)
        self.report = ""  # what the last write that succeeded answered

    def before_request(self, messages: list[dict]) -> None:
        pass

    def before_call(self, name: str, arguments: str) -> str | None:
        if name != WRITE_TOOL:
            return None
        if canonical(arguments) == self.written:
            return ("not written again: this exact write was just made, so the file already holds it (a "
                    "splice made twice would insert its text twice); go on with the next step")
        try:
            args = loads(arguments)
            content = args.get("content")
        except (ValueError, AttributeError):
            return None
        splice = args.get("offset") is not None or args.get("del_bytes") is not None
        if splice and (args.get("path"), content) == self.text:
            return ("not written again: this text was just written to this file, and writing it at another "
                    "offset would put it there twice; go on with the next step")
        if self.report and isinstance(content, str) and content.strip() == self.report.strip():
            return (f"not written: this content is the report of your last write ({self.report!r}), not "
                    "text for the file, which already holds what you wrote")
        return None

    def after_call(self, name: str, arguments: str, outcome: Outcome) -> None:
        if outcome.is_error:  # refused or failed: nothing was written
            return
        if name == WRITE_TOOL:
            self.written, self.report = canonical(arguments), outcome.content
            try:
                args = loads(arguments)
                self.text = (args.get("path"), args.get("content"))
            except (ValueError, AttributeError):
                self.text = None
        else:
            self.written = self.text = None  # something ran since: the same write again may be meant


WRITE_TOOL = "write_file"


def canonical(arguments: str) -> str:
    """A call's arguments in one spelling (keys sorted), to tell the same call again."""
    try:
        return json.dumps(loads(arguments), sort_keys=True)  # deep nesting: TooDeep, a ValueError
    except ValueError:
        return arguments


# --- the default guards -------------------------------------------------------------------------

def default_guards(limits: Limits) -> list[Guard]:
    return [ToolBudget(limits.tool_budget), RepeatGuard(), WriteGuard()]


class ToolBudget:
    """At most `budget` tool calls a turn; past it calls are refused and the turn ends."""

    def __init__(self, budget: int) -> None:
        self.budget, self.left = budget, budget

    def before_request(self, messages: list[dict]) -> None:
        if self.left < 0:
            raise LimitReached(f"tool_budget ({self.budget}) ran out before a final answer")

    def before_call(self, name: str, arguments: str) -> str | None:
        self.left -= 1
        return "the tool budget for this turn is used up; not run" if self.left < 0 else None

    def after_call(self, name: str, arguments: str, outcome: Outcome) -> None:
        pass


class RepeatGuard:
    """The same tool with the same arguments REPEAT_LIMIT times in a row is refused; once
    REFUSALS_TO_STOP calls have been refused so, the model is not getting anywhere and the turn
    ends, saying so, instead of running on to the iteration limit (a small model asked for
    `sleep 30` ran `exit` 80 times)."""

    def __init__(self) -> None:
        self.last: tuple[str, str] | None = None
        self.times = 0
        self.refused = 0

    def before_request(self, messages: list[dict]) -> None:
        if self.refused >= REFUSALS_TO_STOP and self.last is not None:
            name, arguments = self.last
            raise LimitReached(f"stopped: the model kept repeating {name} {arguments[:200]} ({self.refused} "
                               "repeats refused), so this turn would not get further")

    def before_call(self, name: str, arguments: str) -> str | None:
        if self.count(name, arguments) < REPEAT_LIMIT:
            return None
        self.refused += 1
        return (f"this exact call was made {REPEAT_LIMIT} times in a row and was not run again; its "
                "result will not change. Try a different approach.")

    def after_call(self, name: str, arguments: str, outcome: Outcome) -> None:
        pass

    def count(self, name: str, arguments: str) -> int:
        key = (name, canonical(arguments))
        self.times = self.times + 1 if key == self.last else 1
        self.last = key
        return self.times
