"""Renderers turn loop events into what a person or a program reads."""
from __future__ import annotations

import os
from dataclasses import fields, replace
from typing import IO, Callable, Protocol

from ..config import Config
from ..events import Event, OnEvent, Usage


class Renderer(Protocol):
    """An on_event that a front end can also reset after an interrupt (half-drawn state gone)."""

    def __call__(self, event: Event) -> None: ...

    def reset(self) -> None: ...


def usage_line(model: str, usage: Usage, window: int | None, cost: float | None = None,
               session_cost: float | None = None) -> str:
    """`[model: 1420 prompt (1000 cached, 420 uncached) + 85 completion | context: 1420/200000 (0.7%)]`
    (Anthropic's cache writes as `(1000 cached, 300 written to cache, 120 uncached)`), then
    `| cost: $0.0021 (session $0.0100)` when the model list gave prices. A turn of several
    requests says so, `4100 prompt sent in 3 requests`: prompt tokens add up over the requests,
    while the context is the latest request's size alone. `window` 0: not known to this front end
    (a controlled run), no context part; None: the model's window is not known, `context: 1420/?
    (window unknown)`."""
    model = shown_model(model)
    about = "~" if usage.estimated else ""  # bantam's estimate: the server reported no usage
    prompt = f"{about}{usage.prompt_tokens} prompt"
    if usage.requests > 1:
        prompt += f" sent in {usage.requests} requests"
    if usage.cached_tokens is not None:  # Anthropic's cache writes too: billed above the uncached rest
        written = usage.cache_write_tokens or 0
        rest = usage.prompt_tokens - usage.cached_tokens - written
        prompt += f" ({usage.cached_tokens} cached, {f'{written} written to cache, ' if written else ''}{rest} uncached)"
    spent = ""
    if cost is not None:
        spent = f" | cost: {about}${cost:.4f}"
        if session_cost is not None and session_cost > cost:
            spent += f" (session {about}${session_cost:.4f})"
    if window == 0:  # not known to this front end (a controlled run)
        return f"[{model}: {prompt} + {about}{usage.completion_tokens} completion{spent}]"
    if window is None:
        return (f"[{model}: {prompt} + {about}{usage.completion_tokens} completion | "
                f"context: {about}{usage.context_tokens}/? (window unknown){spent}]")
    share = 100 * usage.context_tokens / window
    return (f"[{model}: {prompt} + {about}{usage.completion_tokens} completion | "
            f"context: {about}{usage.context_tokens}/{window} ({share:.1f}%){spent}]")


def stated_window(window: Callable[[], int]) -> int | None:
    """The window a front end's lookup states (a ModelFacts says when it is only the fallback)."""
    return getattr(window, "stated", window)()


def shown_model(model: str) -> str:
    """A model named by its GGUF file (llama-cpp-python's server lists the path it loaded) is shown
    by the file's name without folder and `.gguf`: the path can fill the line."""
    if model.lower().endswith(".gguf"):
        return model.replace("\\", "/").rsplit("/", 1)[-1][:-len(".gguf")]
    return model


def use_color(cfg: Config, stream: IO[str]) -> bool:
    if cfg.color != "auto":
        return cfg.color == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("BANTAM_NO_COLOR"):
        return False
    return stream.isatty()


def make_renderer(cfg: Config, json_lines: bool, out: IO[str], err: IO[str],
                  context_window: Callable[[], int]) -> Renderer:
    if json_lines:
        from .jsonl import JsonRenderer
        return redacting(JsonRenderer(out, err, context_window))
    from .text import TextRenderer
    terminal = out.isatty()
    return redacting(TextRenderer(out, err, use_color(cfg, err), context_window, status=err.isatty(),
                                  markdown=terminal, live=terminal))


class redacting:
    """A renderer whose events have each known secret value in their text fields as ***;
    everything else (reset, ...) is the wrapped renderer's."""

    def __init__(self, inner: OnEvent):
        self.inner = inner

    def __call__(self, event: Event) -> None:
        from ..envpolicy import redact
        changes = {}
        for f in fields(event):
            value = getattr(event, f.name)
            if isinstance(value, str) and value and (text := redact(value)) != value:
                changes[f.name] = text
        self.inner(replace(event, **changes) if changes else event)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: object) -> None:
        # state set from outside (the terminal's session cost) belongs to the wrapped renderer
        if name == "inner":
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)
