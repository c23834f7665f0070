"""Providers: one request in, one assistant message out.

A provider owns its wire format. The loop hands it messages in the OpenAI chat shape and gets
back a `Reply` whose message is in that shape too; text and reasoning stream out as events.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..config import FALLBACK_CONTEXT_WINDOW, Config
from ..errors import ConfigError
from ..events import OnEvent, Usage

if TYPE_CHECKING:
    import httpx


WINDOW_WAIT = 4.0  # seconds the context-window lookup may hold up the usage line
# Set once this process's first model request is on its way: work that may wait (starting MCP
# servers) waits for it, so it does not slow the first request down (the GIL, the two cores).
REQUEST_SENT = threading.Event()


@dataclass(slots=True)
class Reply:
    message: dict[str, Any]        # {"role": "assistant", "content": ..., "tool_calls": [...]?}
    usage: Usage | None = None
    finish_reason: str | None = None
    # The output token limit this answer was generated under, when the request carried one: the
    # loop doubles it for an answer cut at that limit. None: the server's own limit (unknown).
    output_limit: int | None = None


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What one request asks for beyond its messages and tools. Passed with the request, never
    set on the provider: parallel sub-agents share one provider object."""
    output_tokens: int | None = None  # max tokens of this answer; None: the provider's own default
    folder: Path | None = None        # the session's folder (the local model's aids read its names)


DEFAULT_OPTIONS = RequestOptions()


class Provider(Protocol):
    """Everything the core uses of a provider. The members with a body are defaults: a provider
    that subclasses Provider (an in-process scripted one) writes only `model` and `complete`.
    Nothing per request lives on the provider: one object serves parallel sub-agents."""
    model: str
    learned_window: int | None = None  # the context window a refusal stated: wins over every other
    prices: tuple[float, float] | None = None  # dollars per prompt token and per completion token

    @property
    def url(self) -> str | None:
        """The endpoint, under which the model's window and prices are remembered between runs;
        None: nothing to remember (the local model knows its own window at once)."""
        return None

    def complete(self, messages: list[dict], tools: list[dict], on_event: OnEvent,
                 options: RequestOptions = DEFAULT_OPTIONS) -> Reply:
        """One answer. `options.output_tokens`, when set, is this answer's output limit."""
        ...

    def list_models(self) -> list[str]:
        return [self.model]

    def context_window(self) -> int | None:
        """The window, asked of the server (slow: called once, in a thread); None: not known."""
        return None

    def http_client(self) -> "httpx.Client | None":
        """The HTTP client every request goes through (the web view's Stop hooks into it to shut a
        stream in flight); None: the provider makes no HTTP requests."""
        return None


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


def context_window(provider: Provider, cfg: Config) -> int | None:
    """What the server said (in a refusal, or when asked; remembered per endpoint and model), else
    the config's `context_window`; None when nobody says."""
    from .. import cache
    url = provider.url
    known = cache.remembered_window(url, provider.model) if url else None
    if known and url:
        provider.prices = cache.remembered_prices(url, provider.model)
        return known[0] or cfg.context_window
    found = provider.context_window()
    if url:  # 0: the server said nothing (or did not answer); not asked again for a while
        cache.remember_window(url, provider.model, found or 0, "discovered", provider.prices)
    return found or cfg.context_window


def context_window_later(provider: Provider, cfg: Config, wait: float = WINDOW_WAIT) -> "ModelFacts":
    return ModelFacts(provider, cfg, wait)


class ModelFacts:
    """The context window (and prices) of the model, looked up when first wanted: by then the
    first request is done, for llama-cpp-python's server drops a running stream when a second
    request arrives, so the lookup must not run beside it. A limit the server states later wins.
    Called, it gives the window."""

    def __init__(self, provider: Provider, cfg: Config, wait: float = WINDOW_WAIT):
        import threading
        self.provider, self.cfg = provider, cfg
        self.wait = wait  # the longest the lookup may hold up the usage line (a test sets less)
        self.found: list[int | None] = []
        self.lookup = threading.Thread(target=lambda: self.found.append(context_window(provider, cfg)),
                                       daemon=True)

    def __call__(self) -> int:
        """The window to plan by: a large fallback when nobody says (input is refused only when
        it surely cannot fit, and a refusal that states the window teaches it)."""
        return self.stated() or FALLBACK_CONTEXT_WINDOW

    def stated(self) -> int | None:
        """The window as the server or the configuration states it; None: not known (the usage
        line says so rather than show the fallback as if it were the model's)."""
        learned = self.provider.learned_window
        if learned:
            return learned
        if self.lookup.ident is None:  # started once, when first wanted
            self.lookup.start()
            self.lookup.join(self.wait)  # a server that does not answer delays the usage line a bounded time
        return self.found[0] if self.found else self.cfg.context_window

    def cost(self, usage: Usage) -> float | None:
        """What these tokens cost in dollars, when the model list gave prices."""
        self()
        prices = self.provider.prices
        if not prices:
            return None
        return usage.prompt_tokens * prices[0] + usage.completion_tokens * prices[1]
