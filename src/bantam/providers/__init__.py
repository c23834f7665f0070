"""Providers: one request in, one assistant message out.

A provider owns its wire format. The loop hands it messages in the OpenAI chat shape and gets
back a `Reply` whose message is in that shape too; text and reasoning stream out as events.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..config import FALLBACK_CONTEXT_WINDOW, Config
from ..errors import ConfigError
from ..events import OnEvent, Usage


WINDOW_WAIT = 4.0  # seconds the context-window lookup may hold up the usage line


@dataclass(slots=True)
class Reply:
    message: dict[str, Any]        # {"role": "assistant", "content": ..., "tool_calls": [...]?}
    usage: Usage | None = None
    finish_reason: str | None = None


class Provider(Protocol):
    model: str

    def complete(self, messages: list[dict], tools: list[dict], on_event: OnEvent) -> Reply: ...

    def list_models(self) -> list[str]: ...

    def context_window(self) -> int | None: ...


def make_provider(cfg: Config) -> Provider:
    if cfg.provider == "openai":
        from .openai import OpenAIProvider
        return OpenAIProvider(cfg)
    if cfg.provider == "anthropic":
        from .anthropic import AnthropicProvider
        return AnthropicProvider(cfg)
    if cfg.provider == "local":
        from .local import LocalProvider
        return LocalProvider(cfg)
    raise ConfigError(f"provider {cfg.provider!r} is not available in this version of bantam "
                      f"(use an OpenAI-compatible endpoint, or set provider=openai)")


def ask(provider: Provider, messages: list[dict], delays: tuple[float, ...], on_event: OnEvent) -> str:
    """One tool-free side request (a summary, a look at an image), retried; its answer text."""
    from .retry import with_retries

    def call() -> str:
        return (provider.complete(messages, [], on_event).message.get("content") or "").strip()
    return with_retries(call, on_event, delays)


def context_window(provider: Provider, cfg: Config) -> int:
    """What the server said (in a refusal, or its model list; remembered per endpoint and model),
    else the config's `context_window`, else 200000."""
    from .. import cache
    url = getattr(provider, "url", None)  # the local provider knows its own window at once
    known = cache.remembered_window(url, provider.model) if url else None
    if known and url:
        if hasattr(provider, "prices"):
            provider.prices = cache.remembered_prices(url, provider.model)
        return known[0] or cfg.context_window or FALLBACK_CONTEXT_WINDOW
    found = provider.context_window()
    if url:  # 0: the server said nothing (or did not answer); not asked again for a while
        cache.remember_window(url, provider.model, found or 0, "discovered", getattr(provider, "prices", None))
    return found or cfg.context_window or FALLBACK_CONTEXT_WINDOW


def context_window_later(provider: Provider, cfg: Config) -> "ModelFacts":
    return ModelFacts(provider, cfg)


class ModelFacts:
    """The context window (and prices) of the model, looked up when first wanted: by then the
    first request is done, for llama-cpp-python's server drops a running stream when a second
    request arrives, so the lookup must not run beside it. A limit the server states later wins.
    Called, it gives the window."""

    def __init__(self, provider: Provider, cfg: Config):
        import threading
        self.provider, self.cfg = provider, cfg
        self.found: list[int] = []
        self.lookup = threading.Thread(target=lambda: self.found.append(context_window(provider, cfg)),
                                       daemon=True)

    def __call__(self) -> int:
        learned = getattr(self.provider, "learned_window", None)
        if learned:
            return learned
        if self.lookup.ident is None:  # started once, when first wanted
            self.lookup.start()
            self.lookup.join(WINDOW_WAIT)  # a server that does not answer delays the usage line a bounded time
        return self.found[0] if self.found else self.cfg.context_window or FALLBACK_CONTEXT_WINDOW

    def cost(self, usage: Usage) -> float | None:
        """What these tokens cost in dollars, when the model list gave prices."""
        self()
        prices = getattr(self.provider, "prices", None)
        if not prices:
            return None
        return usage.prompt_tokens * prices[0] + usage.completion_tokens * prices[1]
