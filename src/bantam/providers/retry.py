"""Retries live here and nowhere else: Fibonacci delays, a longer Retry-After wins."""
from __future__ import annotations

import time
from typing import Callable, Sequence, TypeVar

from ..errors import ProviderError
from ..events import OnEvent, Retry

T = TypeVar("T")


def with_retries(call: Callable[[], T], on_event: OnEvent, delays: Sequence[float],
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """Run `call`; on a retryable ProviderError wait and try again, once per delay."""
    for attempt, delay in enumerate(delays, 1):
        try:
            return call()
        except ProviderError as e:
            if not e.retryable:
                raise
            wait = max(delay, e.retry_after or 0.0)
            on_event(Retry(message=str(e), delay=wait, attempt=attempt))
            sleep(wait)
    return call()
