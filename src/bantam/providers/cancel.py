"""Stop a provider's requests that are under way, from another thread.

    stop = Stopper()
    stop.watch(provider)      # its HTTP client now reports each request and response
    ...
    stop.set()                # every request in flight wakes at once; new ones are refused

Signals reach only the main thread, so a turn running elsewhere (an editor's prompt, a batch
task, the browser's) is stopped by a flag its loop and shell commands check between steps
(ToolContext.cancel) and by this: the socket of each response in flight is shut, which wakes a
read blocked on it (close() would not), and a request or response that starts after the stop
raises KeyboardInterrupt there, as Ctrl+C would. A request still waiting for the response's
headers (a model thinking before it streams) has no response yet: the socket of every connection
the watched clients opened is shut too, learned as each is made through httpcore's `trace`
extension (a pooled connection shut this way is found closed and replaced by the next request).
httpx event hooks and request extensions are public API; a provider without an HTTP client (the
local model) meets the flag at its next token instead.
"""
from __future__ import annotations

import socket
import threading
import weakref
from collections import deque
from typing import Any


class Stopper:
    """A stop flag that also shuts the network streams of the watched providers' responses."""

    def __init__(self, event: threading.Event | None = None, keep: int = 1024) -> None:
        self.event = event or threading.Event()
        self.streams: deque[Any] = deque(maxlen=keep)  # the latest responses' streams (old ones are closed)
        self.connections: weakref.WeakSet[Any] = weakref.WeakSet()  # the clients' open connections
        self.lock = threading.Lock()

    def is_set(self) -> bool:
        return self.event.is_set()

    def watch(self, provider: Any) -> None:
        """Hook the provider's HTTP client (once per provider and stopper)."""
        client = provider.http_client() if provider is not None else None
        if client is None or not hasattr(client, "event_hooks"):
            return
        hooks = client.event_hooks
        if any(getattr(h, "__self__", None) is self for h in hooks["response"]):
            return
        client.event_hooks = {**hooks, "request": [*hooks["request"], self._request],
                              "response": [*hooks["response"], self._response]}

    def set(self) -> None:
        """Stop: the flag first, so a response arriving meanwhile meets it; then every socket."""
        self.event.set()
        with self.lock:
            streams = [*self.streams, *self.connections]
        for stream in streams:
            shut(stream)

    def clear(self) -> None:
        """Ready for the next turn: the flag down, the streams of earlier responses forgotten
        (their connections may be pooled for reuse: shutting them later would break them)."""
        self.event.clear()
        with self.lock:
            self.streams.clear()

    def _request(self, request: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        request.extensions["trace"] = self._trace

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace: keep each connection's stream as it is made (a stop meanwhile shuts it)."""
        if event.endswith((".connect_tcp.complete", ".connect_unix_socket.complete")):
            stream = info.get("return_value")
            if stream is not None:
                with self.lock:
                    self.connections.add(stream)
                if self.event.is_set():
                    shut(stream)

    def _response(self, response: Any) -> None:
        with self.lock:
            self.streams.append(response.extensions.get("network_stream"))
        if self.event.is_set():
            raise KeyboardInterrupt


def shut(stream: Any) -> None:
    """Shut a response's socket for reading and writing; an already closed one is left alone."""
    sock = stream.get_extra_info("socket") if stream is not None else None
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
