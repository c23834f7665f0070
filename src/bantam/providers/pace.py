"""One pace per endpoint in this process: every session that talks to it waits on the same clock.

    pace = pace_for(url)
    pace.wait()                  # before a request: after a 429's backoff, within the rate limits
                                 # (--rpm N: one request every 60/N s, not N at once)
    pace.hold(seconds)           # a 429 (or 529) said "not before": every session waits, not one
    pace.spent(tokens)           # after a response: counts toward tokens_per_minute
    tell_holds(callback)         # an agent process passes each hold it meets on to its batch

Many sessions against one API (a batch, a worker, an editor's sessions) would otherwise each meet
a rate limit alone and retry on their own clocks: N retry storms where the server asked for one
pause. A hold is shared by everyone waiting for that endpoint; `limit(rpm, tpm)` (a batch's
--rpm/--tpm) keeps requests and tokens within a minute's budget before the server has to refuse.
A batch whose sessions run in agent processes (batch/agent.py) shares its holds across them: each
agent tells the batch of a hold it met (`tell_holds`), and the batch passes it on to the others.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

from ..slots import idle

WINDOW = 60.0  # seconds: what "per minute" counts over


class Pace:
    """An endpoint's clock. Its lock is taken only where there is something to count or wait
    for: under the GIL, a lock that every request of a batch's 256 sessions passes through is a
    convoy (a thread woken holding it waits for the interpreter while the others queue)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, url: str = "") -> None:
        self.clock, self.url = clock, url
        self.lock = threading.Lock()
        self.not_before = 0.0
        self.rpm = self.tpm = 0  # 0: no limit
        self.requests: deque[float] = deque()
        self.tokens: deque[tuple[float, int]] = deque()

    def hold(self, seconds: float, *, passed_on: bool = False) -> None:
        """No request to this endpoint before `seconds` from now (a later hold wins). A hold
        this process met itself (not `passed_on` from another) is told to `tell_holds`' callback."""
        with self.lock:
            self.not_before = max(self.not_before, self.clock() + seconds)
        tell = _tell[0]
        if tell is not None and not passed_on:
            tell(self.url, seconds)

    def limit(self, rpm: int = 0, tpm: int = 0) -> None:
        with self.lock:
            self.rpm, self.tpm = max(0, rpm), max(0, tpm)

    def spent(self, tokens: int) -> None:
        if self.tpm and tokens > 0:
            with self.lock:
                self.tokens.append((self.clock(), tokens))

    def wait(self) -> None:
        """Block until a request may start, then count it; returns early when the process stops
        the waits under way (`release_all`): the request's own stop check then ends it."""
        if not (self.rpm or self.tpm) and self.not_before <= self.clock():
            return  # nothing to count or wait for: no lock (every request of every session is here)
        released = _releases[0]
        while _releases[0] == released:
            with self.lock:
                delay = self._delay()
                if delay <= 0:
                    if self.rpm:
                        self.requests.append(self.clock())
                    return
            with idle(), _release:
                if _releases[0] == released:
                    _release.wait(min(delay, 1.0))

    def _delay(self) -> float:
        now = self.clock()
        delay = self.not_before - now
        while self.requests and self.requests[0] <= now - WINDOW:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW:
            self.tokens.popleft()
        if self.rpm and self.requests:  # spread over the minute, one every 60/rpm s: a burst of
            # rpm requests at once is what servers that count per second (or per 10 s) refuse
            delay = max(delay, self.requests[-1] + WINDOW / self.rpm - now)
        if self.rpm and len(self.requests) >= self.rpm:
            delay = max(delay, self.requests[0] + WINDOW - now)
        if self.tpm and sum(n for _, n in self.tokens) >= self.tpm:
            delay = max(delay, self.tokens[0][0] + WINDOW - now)
        return delay


# release_all: how many times it ran (a wait ends when this changes), and what wakes the waits.
# A count, not a flag left set: a batch that stopped releases the waits of its time, not those
# of a batch (or any session) that comes after it in the same process.
_releases = [0]
_release = threading.Condition()
_paces: dict[str, Pace] = {}
_limits = [0, 0]  # requests, tokens per minute for every endpoint (a batch's --rpm/--tpm)
_lock = threading.Lock()
_tell: list[Callable[[str, float], None] | None] = [None]  # tell_holds


def pace_for(url: str) -> Pace:
    """The one Pace of an endpoint in this process."""
    pace = _paces.get(url)  # once made, found without the lock: see Pace.wait
    if pace is not None:
        return pace
    with _lock:
        if url not in _paces:
            _paces[url] = Pace(url=url)
            _paces[url].limit(*_limits)
        return _paces[url]


def limit_all(rpm: int = 0, tpm: int = 0) -> None:
    """Rate limits for every endpoint this process talks to: the known ones and those met later."""
    with _lock:
        _limits[:] = [rpm, tpm]
        paces = list(_paces.values())
    for pace in paces:
        pace.limit(rpm, tpm)


def tell_holds(callback: Callable[[str, float], None] | None) -> None:
    """Call `callback(url, seconds)` for every hold this process meets (an agent process tells
    its batch, which passes it on to its other agents: one pause for all of them)."""
    _tell[0] = callback


def release_all() -> None:
    """Every wait under way in this process returns now (a batch that stops); later ones wait as usual."""
    with _release:
        _releases[0] += 1
        _release.notify_all()
