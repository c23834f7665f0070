"""A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions wire format from a script.

Each POST to /chat/completions (or Anthropic's /messages: see anthropic_server.py) takes the next
scripted Response; the bytes go out exactly as the script says (chunked SSE, CRLF or LF, comments,
cut connections, stalls), so bantam's real client and parser are what is tested. Every request
is recorded, with the client's port.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)  # body pieces, each flushed on its own
    chunked: bool = True     # Transfer-Encoding: chunked, else Content-Length
    cut: bool = False        # drop the connection before the body is complete
    delay: float = 0.0       # seconds to wait before each piece


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    port: int
    raw: bytes = b""  # the body exactly as it came, for byte-level comparisons (prompt caching)

    def open_prefix(self) -> bytes:
        """The raw body up to the `]` that closes its messages array: what the next request of
        the same conversation should repeat byte for byte if it only adds to the history (the
        options after the messages, such as `"stream":true}`, are the request's closing)."""
        keys = list(self.body) if isinstance(self.body, dict) else []
        after = keys[keys.index("messages") + 1:] if "messages" in keys else []
        end = self.raw.rindex(b'],"' + after[0].encode() + b'":') if after else len(self.raw) - 2
        return self.raw[:end]


def chunk(content: str | None = None, *, reasoning: str | None = None,
          reasoning_field: str = "reasoning_content", tool_calls: list | None = None,
          finish: str | None = None, usage: dict | None = None, no_choices: bool = False) -> dict:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta[reasoning_field] = reasoning
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    obj: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test-model",
                           "choices": [] if no_choices else
                           [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return obj


def usage(prompt: int = 10, completion: int = 5, cached: int | None = None) -> dict:
    u: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


def sse(events: list[Any], *, done: bool = True, space: bool = True, crlf: bool = False,
        comments: tuple[str, ...] = (), split: int = 0, **kw: Any) -> Response:
    """Events are dicts (sent as JSON) or raw strings; `split` re-chops the bytes into N-byte pieces."""
    nl = "\r\n" if crlf else "\n"
    pieces = [f"{c}{nl}{nl}" for c in comments]
    for event in events:
        if isinstance(event, str) and event.startswith(":"):  # a comment line, sent as it is
            pieces.append(f"{event}{nl}")
            continue
        data = event if isinstance(event, str) else json.dumps(event)
        pieces.append(f"data:{' ' if space else ''}{data}{nl}{nl}")
    if done:
        pieces.append(f"data:{' ' if space else ''}[DONE]{nl}{nl}")
    raw = [p.encode() for p in pieces]
    if split:
        joined = b"".join(raw)
        raw = [joined[i:i + split] for i in range(0, len(joined), split)]
    return Response(headers={"Content-Type": "text/event-stream"}, chunks=raw, **kw)


def text_reply(text: str, u: dict | None = None, pieces: int = 3) -> Response:
    """A streamed text answer in a few deltas, then finish_reason, then a usage-only chunk."""
    step = max(1, len(text) // pieces)
    events = [chunk(text[i:i + step]) for i in range(0, len(text), step)]
    events.append(chunk(finish="stop"))
    events.append(chunk(usage=u or usage(), no_choices=True))
    return sse(events)


def tool_reply(name: str, args: Any, call_id: str = "call_1", u: dict | None = None,
               fragments: int = 3) -> Response:
    """A streamed tool call whose arguments arrive in several fragments."""
    text = args if isinstance(args, str) else json.dumps(args)
    step = max(1, len(text) // fragments)
    events = [chunk(tool_calls=[{"index": 0, "id": call_id, "type": "function",
                                 "function": {"name": name, "arguments": ""}}])]
    events += [chunk(tool_calls=[{"index": 0, "function": {"arguments": text[i:i + step]}}])
               for i in range(0, len(text), step)]
    events.append(chunk(finish="tool_calls"))
    events.append(chunk(usage=u or usage(), no_choices=True))
    return sse(events)


def json_reply(obj: Any, status: int = 200, headers: dict | None = None) -> Response:
    return Response(status=status, headers={"Content-Type": "application/json", **(headers or {})},
                    chunks=[json.dumps(obj).encode()], chunked=False)


def completion(content: str | None = None, tool_calls: list | None = None,
               reasoning: str | None = None, u: dict | None = None) -> dict:
    """A whole non-streaming chat.completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning:
        message["reasoning_content"] = reasoning
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": u or usage()}


class FakeServer:
    def __init__(self, script: list[Response] | None = None, models: list[dict] | None = None,
                 props: dict | None = None, show: dict | None = None, slots: list | None = None):
        self.script = list(script or [])
        self.models = models if models is not None else [{"id": "test-model", "object": "model"}]
        self.props, self.show, self.slots = props, show, slots  # llama.cpp's /props and /slots, Ollama's /api/show
        self.gateway_path = ""  # a POST here is answered too: a gateway at a path of its own
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()  # open client connections, for go_down
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def add(self, *responses: Response) -> None:
        with self.lock:
            self.script.extend(responses)

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def next_response(self, body: Any = None) -> Response:
        """The next scripted response; a subclass may choose by the request `body` instead."""
        with self.lock:
            if self.script:
                return self.script.pop(0)
        return json_reply({"error": {"message": "fake server: script exhausted"}}, status=500)

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def go_down(self) -> None:
        """Stop listening and drop every open connection: new ones are refused, as from a
        server that is down."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def come_back(self) -> None:
        """Listen again on the same port."""
        port = self.httpd.server_address[1]
        self.httpd = _QuietServer(("127.0.0.1", port), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-response (a cancelled or timed-out test) is not news."""
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse can be checked
        disable_nagle_algorithm = True  # each SSE piece leaves at once, as from a real server

        def log_message(self, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            with server.lock:
                server.connections.add(self.connection)

        def finish(self) -> None:
            with server.lock:
                server.connections.discard(self.connection)
            try:
                super().finish()
            except OSError:  # dropped by go_down
                pass

        def _record(self) -> Any:
            size = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(size) if size else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            server.requests.append(Recorded(self.command, self.path,
                                            {k.lower(): v for k, v in self.headers.items()},
                                            body, self.client_address[1], raw))
            return body

        def do_GET(self) -> None:
            self._record()
            if self.path.split("?")[0].endswith("/models"):
                self._send(json_reply({"object": "list", "data": server.models}))
            elif self.path == "/props" and server.props is not None:
                self._send(json_reply(server.props))
            elif self.path == "/slots" and server.slots is not None:
                self._send(json_reply(server.slots))
            else:
                self._send(json_reply({"error": {"message": "not found"}}, status=404))

        def do_POST(self) -> None:
            body = self._record()
            if self.path.endswith(("/chat/completions", "/messages", "/responses")) or \
                    (server.gateway_path and self.path == server.gateway_path):  # OpenAI, Anthropic, Responses
                self._send(server.next_response(body))
            elif self.path == "/api/show" and server.show is not None:
                self._send(json_reply(server.show))
            else:
                self._send(json_reply({"error": {"message": "not found"}}, status=404))

        def _send(self, r: Response) -> None:
            self.send_response(r.status)
            for k, v in r.headers.items():
                self.send_header(k, v)
            if r.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(sum(map(len, r.chunks))))
            self.end_headers()
            try:
                for piece in r.chunks:
                    if r.delay:
                        time.sleep(r.delay)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if r.chunked else piece)
                    self.wfile.flush()
                if r.cut:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if r.chunked:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler
