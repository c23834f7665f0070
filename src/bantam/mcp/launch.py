"""Servers started off the critical path: the SDK is imported, and the hub made, in a thread.

`import mcp` costs most of a second and each server one to four more; a run offers the tools it
knows at once (a running server's, or the list cache.py kept from the server's last start) and
lets this module start the servers meanwhile; a server never seen before offers its tools once
its start has ended. `launch(servers)` returns at once; `connection(key, spec)` is what a tool call
waits for: the hub, then its own server's start (an already running server costs nothing more).
At exit the hub is closed (hub.Hub.close: nothing waits for a server whose tools are cached). An
import still under way is waited for only when a server's tools are not cached yet (its start is
what caches them, for the next run); otherwise it is left: it has started nothing, and makes no hub.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ..providers import REQUEST_SENT
from .servers import ServerSpec

if TYPE_CHECKING:
    from .hub import Connection, Hub

FIRST_REQUEST_WAIT = 2.0  # seconds the start waits for the first model request to go out
_hub: concurrent.futures.Future = concurrent.futures.Future()  # the process's Hub, once the SDK is in
_needed = threading.Event()  # a caller waits for a server: start now
_thread: threading.Thread | None = None
_lock = threading.Lock()
_exiting = False  # set at exit (under _lock): no hub is made from then on
_asked: dict[str, ServerSpec] = {}  # every server launched in this process
T = TypeVar("T")


def launch(servers: dict[str, ServerSpec]) -> concurrent.futures.Future:
    """Start these servers (those not running yet) without waiting; the future gives their
    Connections by key once the hub exists. The first call starts the thread that imports the SDK."""
    _begin()
    _asked.update(servers)
    out: concurrent.futures.Future = concurrent.futures.Future()

    def ensure(ready: concurrent.futures.Future) -> None:  # in the import thread, or here if it is done
        try:
            out.set_result(dict(zip(servers, ready.result().ensure(servers), strict=True)))
        except BaseException as e:  # the SDK failed to import: every waiter gets the reason
            out.set_exception(e)
    _hub.add_done_callback(ensure)
    return out


def connection(key: str, spec: ServerSpec, cancel: threading.Event | None = None) -> tuple[Hub, Connection]:
    """The hub and this server's connection (started, or being started, by the hub)."""
    _needed.set()
    try:
        hub = wait(_hub, cancel)
    except Exception as e:
        from ..errors import ToolError
        raise ToolError(f"MCP server {spec.name} was not started: the mcp package failed to import ({e})") from e
    return hub, hub.ensure({key: spec})[0]


def request(key: str, spec: ServerSpec, send: Callable[[Connection], Coroutine[Any, Any, T]],
            cancel: threading.Event | None = None) -> T:
    """One request to this server (a tool call, a resource read, a prompt): `send(connection)`
    runs on the hub's loop once the server is up; Ctrl+C (or `cancel`) abandons it."""
    hub, c = connection(key, spec, cancel)
    return hub.submit(send(c), cancel=cancel)


def current() -> Hub:
    """The hub, once `launch`'s future is done."""
    return _hub.result()


def running(key: str, spec: ServerSpec) -> Connection | None:
    """This server's connection when it is up in this process already (no wait, no SDK import)."""
    if not _hub.done() or _hub.exception() is not None:
        return None
    c = _hub.result().connections.get(key)
    return c if c is not None and c.spec == spec and c.client is not None else None


def _begin() -> None:
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_make_hub, name="mcp-start", daemon=True)
            _thread.start()
            atexit.register(_finish)


def _make_hub() -> None:
    # the first model request goes out first: importing the SDK beside it would slow it down
    # (one GIL, two cores); a tool call that needs a server (`connection`) starts it at once
    deadline = time.monotonic() + FIRST_REQUEST_WAIT
    while not (_needed.is_set() or REQUEST_SENT.is_set()) and time.monotonic() < deadline:
        _needed.wait(0.02)
    try:
        from .hub import hub
        failure = None
    except BaseException as e:
        failure = e
    with _lock:  # once bantam exits, nothing is started (and nothing says that the import failed)
        if _exiting:
            return
        if failure is None:
            _hub.set_result(hub())
        else:
            _hub.set_exception(failure)


def _finish() -> None:
    """At exit: close the hub, if there is one (see the module's docstring for the import)."""
    global _exiting
    from . import cache
    if _thread is not None and any(cache.load(spec) is None for spec in list(_asked.values())):
        _thread.join()
    with _lock:
        _exiting = True
    if _hub.done() and _hub.exception() is None:
        _hub.result().close()


def wait(future: concurrent.futures.Future, cancel: threading.Event | None = None,
         timeout: float | None = None) -> Any:
    """`future`'s result; Ctrl+C (or `cancel`) abandons the wait, as does `timeout` (TimeoutError).
    The future itself is left alone: others may wait for it too. Someone waits: start now."""
    _needed.set()
    deadline = None if timeout is None else time.monotonic() + timeout
    while not future.done():
        concurrent.futures.wait([future], 0.1)  # short waits, so that `cancel` is seen
        if cancel is not None and cancel.is_set():
            raise KeyboardInterrupt
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError
    return future.result()
