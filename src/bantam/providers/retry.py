"""Retries live here and nowhere else: Fibonacci delays, a longer Retry-After wins.

What is worth a retry is decided where an error is made (providers/http.py classifies each
failure): `retryable=False` fails at once (a refused key, a 404, a server on this machine that is
not running, a host name that does not exist); an `Unreachable` error may carry a small cap
(`retries`) where the cause may pass soon but will not last 90 seconds; the rest (429, 5xx,
timeouts, dropped connections) is tried once per delay.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence, TypeVar

from ..errors import ProviderError, Unreachable
from ..events import OnEvent, Retry
from ..slots import idle

T = TypeVar("T")


def with_retries(call: Callable[[], T], on_event: OnEvent, delays: Sequence[float],
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """Run `call`; on a retryable ProviderError wait and try again, once per delay (at most
    `retries` times for an Unreachable endpoint)."""
    for attempt, delay in enumerate(delays, 1):
        try:
            return call()
        except ProviderError as e:
            if not worth_retrying(e, attempt):
                raise
            wait = max(delay, e.retry_after or 0.0)
            on_event(Retry(message=str(e), delay=wait, attempt=attempt))
            with idle():
                sleep(wait)
    return call()


def worth_retrying(error: ProviderError, attempt: int) -> bool:
    """Whether retry number `attempt` (1 is the first) of this failure may help."""
    if isinstance(error, Unreachable):
        return attempt <= error.retries
    return error.retryable
