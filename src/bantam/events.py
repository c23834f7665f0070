"""What the loop and the providers report while they work.

Front ends pass an `on_event` callable; renderers turn events into terminal text or JSON lines.
The loop itself never prints.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, ClassVar


@dataclass(slots=True)
class Usage:
    """Token counts; `cached_tokens` is None when the server does not report a breakdown."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    context_tokens: int = 0  # prompt size of the latest request: how full the context is now
    estimated: bool = False  # counted by bantam (the server reported none): shown with `~`
    requests: int = 0        # requests summed here (0: one request's own counts)
    cache_write_tokens: int | None = None  # of the prompt, written to the cache (Anthropic's own count)

    def add(self, other: "Usage", *, latest: bool = True) -> None:
        """Add another request's counts (or a sum of them); `latest=False` (a sub-agent's tokens)
        leaves how full this conversation's context is alone."""
        self.estimated = self.estimated or other.estimated
        self.requests += other.requests or int(latest and bool(other.prompt_tokens or other.completion_tokens))
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        if other.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + other.cached_tokens
        if other.cache_write_tokens is not None:
            self.cache_write_tokens = (self.cache_write_tokens or 0) + other.cache_write_tokens
        if other.prompt_tokens and latest:
            self.context_tokens = other.prompt_tokens


@dataclass(slots=True)
class Event:
    type: ClassVar[str] = "event"

    def to_json(self) -> dict[str, Any]:
        fields = asdict(self)
        if not fields.get("agent", True):  # the agent the user talks to is not labelled
            del fields["agent"]
        return {"type": self.type, **fields}


@dataclass(slots=True)
class RequestStarted(Event):
    """A request to the model is in flight (the terminal shows `...requesting...`)."""
    type: ClassVar[str] = "request"
    model: str = ""


@dataclass(slots=True)
class Preparing(RequestStarted):
    """The request is under way but its model is not ready to answer yet (a local model loading,
    its prompt being read): the terminal shows `...{what}...` in place until the next event.
    A RequestStarted, so every consumer that handles one (JSON drops it, a stop request acts on
    it) treats this alike."""
    what: str = ""


@dataclass(slots=True)
class Reasoning(Event):
    type: ClassVar[str] = "reasoning"
    text: str = ""


@dataclass(slots=True)
class Text(Event):
    type: ClassVar[str] = "text"
    text: str = ""


@dataclass(slots=True)
class ToolCall(Event):
    type: ClassVar[str] = "tool_call"
    id: str = ""
    name: str = ""
    arguments: str = ""
    agent: str = ""  # which sub-agent made the call ("agent 2"); "" for the main agent


@dataclass(slots=True)
class ToolResult(Event):
    type: ClassVar[str] = "tool_result"
    id: str = ""
    name: str = ""
    content: str = ""
    is_error: bool = False
    agent: str = ""


@dataclass(slots=True)
class UsageReport(Event):
    type: ClassVar[str] = "usage"
    model: str = ""
    usage: Usage = field(default_factory=Usage)


@dataclass(slots=True)
class Retry(Event):
    """A request failed and will be sent again after `delay` seconds."""
    type: ClassVar[str] = "retry"
    message: str = ""
    delay: float = 0.0
    attempt: int = 1
    agent: str = ""


@dataclass(slots=True)
class Notice(Event):
    type: ClassVar[str] = "notice"
    message: str = ""
    agent: str = ""


@dataclass(slots=True)
class Error(Event):
    type: ClassVar[str] = "error"
    message: str = ""


@dataclass(slots=True)
class Done(Event):
    type: ClassVar[str] = "done"
    text: str = ""
    usage: Usage = field(default_factory=Usage)


OnEvent = Callable[[Event], None]


def ignore(event: Event) -> None:
    """An on_event that drops everything."""


def without(on_event: OnEvent, *kinds: type[Event]) -> OnEvent:
    """An on_event that passes on everything but events of these kinds."""
    def forward(event: Event) -> None:
        if not isinstance(event, kinds):
            on_event(event)
    return forward


def labelled(on_event: OnEvent, agent: str) -> OnEvent:
    """For a sub-agent: its events carry its name, so its trace can be told from its siblings'."""
    def forward(event: Event) -> None:
        on_event(replace(event, agent=agent) if hasattr(event, "agent") else event)  # type: ignore[call-arg]
    return forward


def quiet(on_event: OnEvent) -> OnEvent:
    """For side requests (a child agent, a summary): traces and retries, but no answer text."""
    return without(on_event, Text, Reasoning, UsageReport, Done, RequestStarted)
