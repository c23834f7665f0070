"""A running command's output in the editor while it runs, not only when it ends.

The command always runs in bantam (its sandbox, its scrubbed environment, its process-group
kill, its bounded output for the model); only what the person sees of it changes:

- `Updates`: the output so far (its last TAIL characters, secrets as ***, no control
  characters) as the call's content, in `tool_call_update`s at most every INTERVAL seconds;
- `Mirror` (the client's `_meta.terminal_output`, Zed's extension that codex-acp uses): the
  editor draws a terminal fed by the pieces bantam sends in `tool_call_update`s (`_meta`
  `terminal_info`, `terminal_output`, `terminal_exit`), with its colours and progress bars;
- `Display` (the client offers the protocol's `terminal`): one of the editor's terminals shows
  it. That terminal runs `cat` on a named pipe bantam writes the output into (secrets as ***),
  so what the editor starts reads a pipe and runs nothing of the model's: a command the editor
  ran itself would have the editor's environment, keys included, and none of bantam's bounds.
  The call's content is that terminal; the editor keeps showing it after bantam releases it.
"""
from __future__ import annotations

import codecs
import os
import select
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from ..envpolicy import StreamRedactor
from ..sanitize import sanitize
from .rpc import RpcError, RpcLink, log

INTERVAL = 0.2          # seconds between two updates of one call's streamed output
TAIL = 16_000           # characters of output an update shows (the last ones)
DISPLAY_LIMIT = 4 << 20  # bytes one command may send to the editor's terminal; the rest is left out
DRAIN = 5.0             # seconds the editor's terminal gets to take the last of the output
TERMINAL_BYTES = 1 << 20  # the terminal's own output bound (terminal/create's outputByteLimit)


class LiveRedactor(StreamRedactor):
    """StreamRedactor for output a person watches: it holds back only an end of a piece that
    may be the start of a secret (and so would show part of it), not always the last bytes
    (which would keep the last line of a slow command unseen until the next one came)."""

    def feed(self, data: bytes) -> bytes:
        seen = super().feed(data) + self.pending  # all of it redacted, but the parent's hold kept back
        held = max((k for secret in self.secrets for k in range(min(len(secret) - 1, len(seen)), 0, -1)
                    if seen.endswith(secret[:k])), default=0)
        self.pending = seen[len(seen) - held:]
        return seen[:len(seen) - held]


class Updates:
    """The output as the call's text content, throttled."""

    def __init__(self, update: Callable[[dict], None], call_id: str):
        self.update, self.call_id = update, call_id
        self.redactor = LiveRedactor()
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self.sent_at = 0.0
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.closed = False  # the call's last update is out: a late timer sends nothing over it

    def feed(self, data: bytes) -> None:
        with self.lock:
            self.text = (self.text + self.decoder.decode(self.redactor.feed(data)))[-TAIL:]
            wait = self.sent_at + INTERVAL - time.monotonic()
            if wait > 0:  # sent a moment ago: this piece goes with the next update
                if self.timer is None:
                    self.timer = threading.Timer(wait, self.send)
                    self.timer.daemon = True
                    self.timer.start()
                return
        self.send()

    def send(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.timer, self.sent_at, text = None, time.monotonic(), self.text
            self.update({"sessionUpdate": "tool_call_update", "toolCallId": self.call_id, "status": "in_progress",
                         "content": [{"type": "content", "content": {"type": "text", "text": sanitize(text)}}]})

    def close(self) -> list[dict]:
        with self.lock:
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
        return []


class Mirror:
    """The output in a terminal the editor draws from the pieces sent to it (nothing runs there)."""

    def __init__(self, update: Callable[[dict], None], call_id: str, folder: str):
        self.update, self.call_id = update, call_id
        self.redactor = LiveRedactor()
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        update({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "content": self.content(),
                "_meta": {"terminal_info": {"terminal_id": call_id, "cwd": folder}}})

    def content(self) -> list[dict]:
        return [{"type": "terminal", "terminalId": self.call_id}]

    def feed(self, data: bytes) -> None:
        self.send(self.decoder.decode(self.redactor.feed(data)))

    def send(self, text: str) -> None:
        if text:
            self.update({"sessionUpdate": "tool_call_update", "toolCallId": self.call_id,
                         "_meta": {"terminal_output": {"terminal_id": self.call_id, "data": text}}})

    def close(self) -> list[dict]:
        self.send(self.decoder.decode(self.redactor.flush(), final=True))
        return self.content()


def exit_meta(terminal_id: str, result: str) -> dict:
    """`_meta.terminal_exit` for a Mirror's last update: the exit code from the result's last line."""
    last = result.rstrip().rpartition("\n")[2]
    code = int(last[6:]) if last.startswith("exit: ") and last[6:].lstrip("-").isdigit() else None
    return {"terminal_exit": {"terminal_id": terminal_id, "exit_code": code, "signal": None}}


class Display:
    """The output in one of the editor's terminals, fed through a named pipe."""

    def __init__(self, conn: RpcLink, session_id: str, call_id: str, update: Callable[[dict], None],
                 cancel: threading.Event):
        self.conn, self.session_id, self.cancel = conn, session_id, cancel
        self.redactor = LiveRedactor()
        self.folder = tempfile.mkdtemp(prefix="bantam-acp-")  # 0700: only this user reaches the pipe
        self.pipe = os.path.join(self.folder, "output")
        os.mkfifo(self.pipe, 0o600)
        # read and write: opening never blocks, whether or not the editor's `cat` has opened it yet
        self.fd = os.open(self.pipe, os.O_RDWR | os.O_NONBLOCK)
        self.pending, self.sent = b"", 0
        self.terminal = self.request("terminal/create", {"command": "cat", "args": [self.pipe],
                                                         "outputByteLimit": TERMINAL_BYTES})["terminalId"]
        update({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress",
                "content": self.content()})

    def request(self, method: str, params: dict) -> Any:
        return self.conn.request(method, {"sessionId": self.session_id, **params}, cancel=self.cancel) or {}

    def content(self) -> list[dict]:
        return [{"type": "terminal", "terminalId": self.terminal}]

    def feed(self, data: bytes) -> None:
        self.write(self.redactor.feed(data))

    def write(self, data: bytes) -> None:
        """As much as the pipe takes now; the rest waits for the next piece (or close)."""
        room = DISPLAY_LIMIT - self.sent - len(self.pending)
        self.pending += data[:max(room, 0)]
        while self.pending:
            try:
                written = os.write(self.fd, self.pending)
            except BlockingIOError:  # the terminal reads slower than the command writes
                return
            self.pending, self.sent = self.pending[written:], self.sent + written

    def close(self) -> list[dict]:
        """Send what is left, let `cat` end, release the terminal (the editor goes on showing it)."""
        try:
            self.write(self.redactor.flush())
            deadline = time.monotonic() + DRAIN
            while self.pending and time.monotonic() < deadline and not self.cancel.is_set():
                select.select([], [self.fd], [], 0.1)
                self.write(b"")
            os.close(self.fd)  # the last writer: `cat` reads what is in the pipe, then ends
            self.wait_and_release()
        finally:
            os.unlink(self.pipe)
            os.rmdir(self.folder)
        return self.content()

    def wait_and_release(self) -> None:
        done = threading.Event()
        timer = threading.Timer(DRAIN, done.set)  # a terminal that does not end is released anyway
        timer.daemon = True
        timer.start()
        try:
            self.conn.request("terminal/wait_for_exit", {"sessionId": self.session_id, "terminalId": self.terminal},
                              cancel=done)
        except (RpcError, KeyboardInterrupt) as e:
            log(f"terminal {self.terminal}: {e or 'did not end'}")
        finally:
            timer.cancel()
        try:
            self.request("terminal/release", {"terminalId": self.terminal})
        except RpcError as e:
            log(f"terminal {self.terminal} was not released: {e}")
