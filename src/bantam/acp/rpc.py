"""JSON-RPC 2.0 over newline-delimited JSON on two file descriptors: ACP's transport.

One thread reads: a request runs in a thread of its own (a prompt may take minutes, and a
`session/cancel` or a permission answer must still be read meanwhile), a notification runs on
the reader, a response wakes the thread that sent the request. Every line written is one JSON
object, written whole under a lock, so threads never interleave inside a line. A line that is
not JSON is answered with a parse error and the connection goes on. When the client closes its
end, every request already read is still answered before `serve` returns (a client may send its
last requests and close at once, then read the answers).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import BantamError

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
RESOURCE_NOT_FOUND = -32002  # ACP: a session id this agent does not know
MAX_MESSAGE = 64 << 20  # bytes in one line; a longer one is dropped unread (a file's text fits)

Handler = Callable[[dict], Any]


class RpcError(BantamError):
    """Raised by a handler: answered as a JSON-RPC error with this code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class Later:
    """A handler's result with work to do once the response is written (a notification about
    a session the client can only know after it has the answer)."""

    def __init__(self, result: Any, then: Callable[[], None]):
        self.result, self.then = result, then


class RpcLink:
    """One JSON-RPC link to the client on two file descriptors: requests both ways, answered by id."""

    def __init__(self, read_fd: int, write_fd: int, max_message: int = MAX_MESSAGE):
        self.reader = os.fdopen(read_fd, "rb")
        self.max_message = max_message
        self.write_fd = write_fd
        self.write_lock = threading.Lock()
        self.pending: dict[int, tuple[threading.Event, list]] = {}
        self.pending_lock = threading.Lock()
        self.next_id = 0
        self.closed = threading.Event()
        self.workers: list[threading.Thread] = []  # the threads of requests read, answered or not

    # --- writing --------------------------------------------------------------------------------

    def send(self, message: dict) -> None:
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self.write_lock:
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.write_fd, view):]
                except BrokenPipeError:  # the client is gone: nothing more to say to it
                    self.closed.set()
                    return

    def notify(self, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: dict, cancel: threading.Event | None = None) -> Any:
        """Ask the client and wait for its answer (KeyboardInterrupt if `cancel` is set first,
        RpcError if it answers with an error or goes away)."""
        done: tuple[threading.Event, list] = (threading.Event(), [])
        with self.pending_lock:
            self.next_id += 1
            ident = self.next_id
            self.pending[ident] = done
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        try:
            while not done[0].wait(0.1):
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt
                if self.closed.is_set():
                    raise RpcError(INTERNAL_ERROR, "the client closed the connection")
        finally:
            with self.pending_lock:
                self.pending.pop(ident, None)
        answer = done[1][0]
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise RpcError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "error")))
        return answer.get("result")

    def answer(self, ident: Any, result: Any = None, error: RpcError | None = None) -> None:
        if error is not None:
            self.send({"jsonrpc": "2.0", "id": ident, "error": {"code": error.code, "message": str(error)}})
        else:
            self.send({"jsonrpc": "2.0", "id": ident, "result": result})

    # --- reading --------------------------------------------------------------------------------

    def serve(self, handlers: dict[str, Handler], notifications: dict[str, Handler]) -> None:
        """Read until the client closes its end."""
        limit = self.max_message
        while line := self.reader.readline(limit):
            if len(line) == limit and not line.endswith(b"\n"):
                while (rest := self.reader.readline(limit)) and not rest.endswith(b"\n"):
                    pass  # the rest of the line is read and dropped, never held
                log(f"a message over {limit} bytes, dropped")
                self.answer(None, error=RpcError(INVALID_REQUEST, f"a message over {limit} bytes was dropped"))
            elif line.strip():
                self.take(line, handlers, notifications)
        self.closed.set()  # from here a question to the client fails at once: nobody can answer it
        for worker in self.workers:
            worker.join()

    def take(self, line: bytes, handlers: dict[str, Handler], notifications: dict[str, Handler]) -> None:
        try:
            message = json.loads(line)
        except ValueError as e:
            log(f"not JSON, ignored: {line[:200]!r}")
            return self.answer(None, error=RpcError(PARSE_ERROR, f"parse error: {e}"))
        if not isinstance(message, dict):
            return self.answer(None, error=RpcError(INVALID_REQUEST, "a message must be a JSON object"))
        if "method" not in message:
            return self.resolve(message)
        method, ident = message["method"], message.get("id")
        raw = message.get("params")
        params: dict = raw if isinstance(raw, dict) else {}
        if ident is None:  # a notification: quick, and it must not wait behind a running prompt
            if method in notifications:
                guarded(lambda: notifications[method](params), method)
            return None
        handler = handlers.get(method)
        if handler is None:
            return self.answer(ident, error=RpcError(METHOD_NOT_FOUND, f"method not found: {method}"))
        worker = threading.Thread(target=self.run, args=(handler, params, ident, method), daemon=True,
                                  name=f"acp {method}")
        self.workers = [w for w in self.workers if w.is_alive()] + [worker]
        worker.start()
        return None

    def run(self, handler: Handler, params: dict, ident: Any, method: str) -> None:
        try:
            result = handler(params)
        except RpcError as e:
            return self.answer(ident, error=e)
        except Exception as e:  # a bug answers this request; the agent goes on serving
            traceback.print_exc(file=sys.stderr)
            return self.answer(ident, error=RpcError(INTERNAL_ERROR, f"{type(e).__name__}: {e}"))
        if isinstance(result, Later):
            self.answer(ident, result.result)
            guarded(result.then, method)
        else:
            self.answer(ident, result)
        return None

    def resolve(self, message: dict) -> None:
        with self.pending_lock:
            waiting = self.pending.get(message.get("id"))  # type: ignore[arg-type]
        if waiting is None:
            log(f"a response to no request of ours: {str(message)[:200]}")
            return
        waiting[1].append(message)
        waiting[0].set()


def guarded(work: Callable[[], Any], what: str) -> None:
    try:
        work()
    except Exception:
        print(f"bantam acp: {what} failed:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)


def log(text: str) -> None:
    print(f"bantam acp: {text}", file=sys.stderr, flush=True)
