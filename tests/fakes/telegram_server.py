"""A real HTTP server on 127.0.0.1 speaking the part of Telegram's Bot API the daemon uses.

    with FakeTelegram(token="123:abc") as tg:
        tg.push_text(chat_id=42, text="hello")        # an update for getUpdates
        ...  # bantam daemon with telegram_api_base=tg.url
        tg.wait_sent(1)                               # what the bot sent: sendMessage, send<Media>

getUpdates long-polls as the real API does (waits up to `timeout` seconds for an update, honours
`offset`); sendMessage and sendDocument/sendPhoto/... (multipart) are recorded; getFile and the
file download URL serve files registered with `add_file`. A wrong token gets 401 like the real one.
With `drop_sends` set, every send* request loses its connection before it is recorded (an outage).
"""
from __future__ import annotations

import email.parser
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.openai_server import _QuietServer  # a client that hangs up is not news


@dataclass
class Sent:
    method: str
    params: dict[str, Any]
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # field -> (filename, data)


class FakeTelegram:
    def __init__(self, token: str = "123456:TEST-token"):
        self.token = token
        self.updates: list[dict] = []
        self.sent: list[Sent] = []
        self.files: dict[str, bytes] = {}   # file_path -> bytes
        self.polls = 0
        self.drop_sends = False  # True: every send* request loses its connection, unanswered
        self.refuse_text = ""    # a sendMessage whose text contains this gets 400 Bad Request
        self.cond = threading.Condition()
        self.next_update = 1
        self.next_message = 100
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def push(self, message: dict) -> int:
        """Queue an update carrying `message` (chat, text, ... as the Bot API shapes them)."""
        with self.cond:
            update = {"update_id": self.next_update,
                      "message": {"message_id": self.next_message, "date": int(time.time()), **message}}
            self.next_update += 1
            self.next_message += 1
            self.updates.append(update)
            self.cond.notify_all()
            return update["message"]["message_id"]

    def push_text(self, chat_id: int, text: str, thread_id: int | None = None,
                  sender: str = "operator") -> int:
        message: dict[str, Any] = {"chat": {"id": chat_id, "type": "private"}, "text": text,
                                   "from": {"id": 7, "is_bot": False, "first_name": sender}}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
        return self.push(message)

    def add_file(self, file_id: str, path: str, data: bytes) -> None:
        self.files[path] = data
        self.files[f"id:{file_id}"] = path.encode()

    def wait_sent(self, count: int, timeout: float = 10.0) -> list[Sent]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.sent) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} sends, got {len(self.sent)}: {self.sent}")
                self.cond.wait(left)
            return list(self.sent)

    def texts(self) -> list[str]:
        return [s.params.get("text", "") for s in self.sent if s.method == "sendMessage"]

    # --- the API ---------------------------------------------------------------------------

    def get_updates(self, params: dict) -> list[dict]:
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self.cond:
            self.polls += 1
            while True:
                found = [u for u in self.updates if u["update_id"] >= offset]
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return found
                self.cond.wait(min(left, 0.5))

    def record(self, method: str, params: dict, files: dict) -> dict:
        with self.cond:
            self.sent.append(Sent(method, params, files))
            self.cond.notify_all()
            self.next_message += 1
            return {"message_id": self.next_message, "chat": {"id": params.get("chat_id")},
                    "date": int(time.time())}

    def __enter__(self) -> "FakeTelegram":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.cond:
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()


def parse_multipart(content_type: str, body: bytes) -> tuple[dict, dict]:
    message = email.parser.BytesParser().parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    params, files = {}, {}
    for part in message.get_payload():
        name = part.get_param("name", header="content-disposition")
        filename = part.get_filename()
        data = part.get_payload(decode=True) or b""
        if filename:
            files[name] = (filename, data)
        else:
            params[name] = data.decode()
    return params, files


def _handler(server: FakeTelegram) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            prefix = f"/file/bot{server.token}/"
            data = server.files.get(self.path[len(prefix):]) if self.path.startswith(prefix) else None
            if data is None:
                return self._reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})
            self._send(200, data, "application/octet-stream")

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(size) if size else b""
            _, bot, method = self.path.split("/", 2)
            if bot != f"bot{server.token}":
                return self._reply(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
            if server.drop_sends and method.startswith("send"):  # an outage: nothing arrives
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            kind = self.headers.get("Content-Type", "")
            if kind.startswith("multipart/"):
                params, files = parse_multipart(kind, raw)
            else:
                params, files = (json.loads(raw) if raw else {}), {}
            if server.refuse_text and server.refuse_text in str(params.get("text", "")):
                return self._reply(400, {"ok": False, "error_code": 400,
                                         "description": "Bad Request: can't parse entities"})
            self._reply(200, {"ok": True, "result": self._call(method, params, files)})

        def _call(self, method: str, params: dict, files: dict) -> Any:
            if method == "getUpdates":
                return server.get_updates(params)
            if method == "getFile":
                path = server.files.get(f"id:{params.get('file_id')}", b"").decode()
                return {"file_id": params.get("file_id"), "file_path": path}
            return server.record(method, params, files)

        def _reply(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json")

        def _send(self, status: int, data: bytes, kind: str) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler
