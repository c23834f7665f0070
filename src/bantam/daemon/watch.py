"""Waking on file changes made by other processes.

The daemon's own threads wake the loop directly when they write. For everyone else (the
operator's shell, a subconscious writing a trigger, a file copied into mail_inbox/) one thread
watches the agent directory, triggers/ and mail_inbox/ through inotify, with `watchfiles` (a
Rust watcher, well kept, used by uvicorn; chosen over polling so a change is seen within
WATCH_STEP_MS instead of a poll interval: about 100 ms from another process's append to the
agent's answer, against about 700 ms when polling every second). The watcher wakes every
WATCH_STEP_MS to look for a stop request; the whole idle daemon, watcher included, used 20 ms of
CPU in a minute (0.03% of one core; bench/bench_daemon.py, bench/RESULTS.md).
Without watchfiles, or with "watch": "poll", the loop polls messages.jsonl every poll_s and the
channel threads rely on their own ticks.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

WATCH_STEP_MS = 200   # the watcher's rhythm: latency after a change, and its idle wake-ups
DEBOUNCE_MS = 400     # changes within this window are reported together


def available() -> bool:
    import importlib.util
    return importlib.util.find_spec("watchfiles") is not None


def start(routes: dict[Path, Callable[[], None]], stop: threading.Event,
          on_error: Callable[[str], None]) -> bool:
    """Watch each directory in `routes`, calling its function when something in it changes;
    False when inotify is unavailable (then the caller polls)."""
    if not available():
        return False
    thread = threading.Thread(target=_watch, args=(routes, stop, on_error), daemon=True, name="watch")
    thread.start()
    return True


def _watch(routes: dict[Path, Callable[[], None]], stop: threading.Event,
           on_error: Callable[[str], None]) -> None:
    from watchfiles import watch
    folders = {str(path.resolve()): wake for path, wake in routes.items()}
    try:
        for changes in watch(*folders, watch_filter=None, stop_event=stop, recursive=False,
                             step=WATCH_STEP_MS, debounce=DEBOUNCE_MS, rust_timeout=0,
                             raise_interrupt=False):
            for folder in {str(Path(p).parent) for _, p in changes}:
                if folder in folders:
                    folders[folder]()
    except Exception as e:  # a watcher that dies leaves the ticks and polling to do the work
        on_error(f"file watching stopped: {type(e).__name__}: {e}")
