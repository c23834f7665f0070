"""Run slots: at most N sessions of this process compute at once; the rest wait for the model, a
command or a pause, or for a slot.

    slots = Slots(2)               # a batch's or a worker's sessions share one
    with slots.held():             # around a session's whole run, in its own thread
        ...
        with idle():               # where it waits: the model, its tools, a backoff
            ...

Under the GIL, hundreds of threads that all want the interpreter hand it over at every system
call: the one that made the call must wait for it again, behind the others, and every handover
is a context switch. A batch of 256 sessions spent more of its CPU on that than on its work (11
ms a task against 6.5 ms with a slot; 255 context switches a task against 29), and its tasks
waited for the interpreter for longer than for the model. With slots, only a few threads compete
while the rest sleep on a slot or a socket. `idle()` outside a held slot (every session that is
not a batch's, a tool's own threads) is a thread-local lookup and nothing more.
"""
from __future__ import annotations

import queue
import threading
from contextlib import contextmanager
from typing import Iterator, TypeVar

T = TypeVar("T")
_holding = threading.local()  # .slots: the Slots this thread holds one of, while it computes


class Slots:
    """N tokens in a SimpleQueue: taking and returning one are single C calls that never hold
    a lock while Python runs (a threading.Semaphore's own lock would be the next convoy)."""

    def __init__(self, count: int) -> None:
        self.tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(max(1, count)):
            self.tokens.put(None)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Take a slot for this thread's session, give it back at the end (the outermost
        `held` counts: a nested one, a sub-agent's, takes no second slot)."""
        if getattr(_holding, "slots", None) is not None:
            yield
            return
        self.tokens.get()
        _holding.slots = self
        try:
            yield
        finally:
            if _holding.slots is self:
                _holding.slots = None
                self.tokens.put(None)


class idle:
    """While this thread waits, its slot (if it holds one) is free for another session."""

    def __enter__(self) -> None:
        self.slots = getattr(_holding, "slots", None)
        if self.slots is not None:
            _holding.slots = None
            self.slots.tokens.put(None)

    def __exit__(self, *exc: object) -> None:
        if self.slots is not None:
            self.slots.tokens.get()
            _holding.slots = self.slots


def arriving(chunks: Iterator[T]) -> Iterator[T]:
    """`chunks` (a response body as it comes), idle while each one is awaited."""
    while True:
        with idle():
            chunk = next(chunks, None)
        if chunk is None:
            return
        yield chunk
