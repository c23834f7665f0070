"""`--json`: one JSON object per line on stdout; the last one is `done`."""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import IO, Any, Callable

from ..events import Done, Event, Notice, RequestStarted, Retry, Usage, UsageReport
from ..sanitize import terminal_safe


class JsonRenderer:
    def __init__(self, out: IO[str], err: IO[str], context_window: Callable[[], int]):
        self.out, self.err = out, err
        self.context_window = context_window

    def __call__(self, event: Event) -> None:
        if isinstance(event, RequestStarted):
            return
        if isinstance(event, Notice):  # not part of the JSON contract; people read these, on a terminal
            self.err.write(terminal_safe(f"[{event.agent + ': ' if event.agent else ''}{event.message}]") + "\n")
            return
        if isinstance(event, Retry):
            obj: dict[str, Any] = {"type": "error", "message": event.message, "fatal": False,
                                   "retry_in": event.delay, "attempt": event.attempt}
            if event.agent:
                obj["agent"] = event.agent
        elif isinstance(event, UsageReport):
            obj = {"type": "usage", "model": event.model, **self._usage(event.usage)}
        elif isinstance(event, Done):
            obj = {"type": "done", "text": event.text, "usage": self._usage(event.usage)}
        else:
            obj = event.to_json()
            if obj["type"] == "error":
                obj["fatal"] = True
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()

    def reset(self) -> None:
        """Nothing is half-drawn: every line is written whole."""

    def _usage(self, usage: Usage) -> dict[str, Any]:
        cost = getattr(self.context_window, "cost", lambda usage: None)(usage)
        return {**asdict(usage), "context_window": self.context_window(),
                **({"cost": round(cost, 6)} if cost is not None else {})}
