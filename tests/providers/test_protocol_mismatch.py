"""A server that speaks something else fails at once, in one line; a stream the server could not
finish is retried, whether it was cut or told so in an error event.

Real sockets throughout: a TCP server on 127.0.0.1 that answers with bytes of another protocol
(not HTTP, not SOCKS), the fake OpenAI and Anthropic servers answering in each other's wire
format, and bantam's real command line (cli.main, in this process) with retries that do not wait."""
import socket
import threading
import time

import pytest

from tests.conftest import base_cfg, bantam_here, write_cfg
from tests.fakes import anthropic_server as anth
from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.openai_server import FakeServer, json_reply, sse, text_reply
from tests.providers.test_fail_fast import PROXY_VARS, one_error_line

NINE = "0,0,0,0,0,0,0,0,0"  # the nine Fibonacci retries, without their waits


class Babbler:
    """A TCP server that answers every connection with `reply` as soon as it connects, then
    closes it once the client has sent something (or keeps it `hold` seconds, saying nothing
    more, as an SSH server waits for the client's banner)."""

    def __init__(self, reply: bytes, hold: float = 0.0):
        self.reply, self.hold, self.connections = reply, hold, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.talk, args=(conn,), daemon=True).start()

    def talk(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.sendall(self.reply)
                self.read_request(conn)  # all of it: a close with bytes unread would be a reset
                time.sleep(self.hold)
            except OSError:
                pass

    @staticmethod
    def read_request(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            piece = conn.recv(65536)
            if not piece:
                return
            body += piece

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def direct(home, monkeypatch):
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def babbler():
    made: list[Babbler] = []

    def make(reply: bytes, hold: float = 0.0) -> Babbler:
        made.append(Babbler(reply, hold))
        return made[-1]
    yield make
    for b in made:
        b.close()


@pytest.mark.parametrize("reply", [b"SSH-2.0-OpenSSH_9.6\r\n", b"-ERR unknown command\r\n", b"SSH-2.0-x\r\n\r\n",
                                   b"\x00\x01\x02garbage\xff\r\n\r\n"])
def test_a_port_that_does_not_speak_http_fails_at_once(direct, babbler, reply):
    other = babbler(reply)
    url = f"http://127.0.0.1:{other.port}/v1"
    write_cfg(direct, endpoint=url, model="m", retry_delays=NINE)
    line = one_error_line(bantam_here("-p", "hi", cwd=direct))
    assert f"{url}/chat/completions does not answer as an HTTP server" in line, line
    assert "is the endpoint's port right?" in line
    assert other.connections <= 2  # the request, and a look at what the port says to one


def test_a_port_that_talks_first_and_then_waits_fails_at_the_first_timeout(direct, babbler):
    other = babbler(b"SSH-2.0-OpenSSH_9.6\r\n", hold=30)
    url = f"http://127.0.0.1:{other.port}/v1"
    write_cfg(direct, endpoint=url, model="m", retry_delays=NINE, timeout="1")
    line = one_error_line(bantam_here("-p", "hi", cwd=direct))
    assert "does not answer as an HTTP server (it sent b'SSH-2.0-OpenSSH_9.6\\r\\n')" in line, line


def test_a_socks_proxy_that_answers_garbage_is_one_line_naming_the_proxy(direct, babbler, server):
    proxy = babbler(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    write_cfg(direct, **base_cfg(server, retry_delays=NINE))
    r = bantam_here("-p", "hi", cwd=direct, env={"SOCKS_PROXY": f"socks5://127.0.0.1:{proxy.port}"})
    line = one_error_line(r)
    assert f"the SOCKS proxy socks5://127.0.0.1:{proxy.port} does not answer as a SOCKS proxy" in line
    assert "check SOCKS_PROXY" in line and not server.requests and proxy.connections == 1


def test_a_socks_proxy_named_by_all_proxy_that_answers_garbage_is_one_line_too(direct, babbler, server):
    proxy = babbler(b"\x00garbage")
    write_cfg(direct, **base_cfg(server, retry_delays=NINE))
    line = one_error_line(bantam_here("-p", "hi", cwd=direct, env={"ALL_PROXY": f"socks5://127.0.0.1:{proxy.port}"}))
    assert f"the SOCKS proxy socks5://127.0.0.1:{proxy.port} does not answer as a SOCKS proxy" in line
    assert "check ALL_PROXY" in line and not server.requests


def test_an_anthropic_stream_at_an_openai_endpoint_fails_at_once(direct, server):
    server.add(*[anth.text_reply("hello")] * 3)
    write_cfg(direct, **base_cfg(server, retry_delays=NINE))
    line = one_error_line(bantam_here("-p", "hi", cwd=direct))
    assert f"{server.url}/chat/completions answered, but not as an OpenAI-compatible" in line
    assert "message_start" in line and "check the endpoint and provider=" in line
    assert len(server.chat_requests()) == 1


def test_an_openai_stream_at_an_anthropic_endpoint_fails_at_once(direct):
    with AnthropicServer() as server:
        server.add(*[text_reply("hello")] * 3)
        write_cfg(direct, **base_cfg(server, provider="anthropic", retry_delays=NINE))
        line = one_error_line(bantam_here("-p", "hi", cwd=direct))
        assert f"{server.url}/messages answered, but not as an Anthropic Messages API" in line
        assert "chat.completion.chunk" in line and len(server.messages_requests()) == 1


def test_some_other_json_api_fails_at_once(direct, server):
    server.add(*[json_reply({"status": "ok", "version": "1.2"})] * 3)
    write_cfg(direct, **base_cfg(server, retry_delays=NINE, stream="false"))
    line = one_error_line(bantam_here("-p", "hi", cwd=direct))
    assert "answered, but not as an OpenAI-compatible /chat/completions API" in line and "'status'" in line
    assert len(server.chat_requests()) == 1


@pytest.mark.parametrize("event", [{"error": {"message": "upstream overloaded"}},
                                   {"error": {"message": "upstream overloaded", "type": "server_error"}},
                                   {"error": {"message": "upstream overloaded", "code": 503}}])
def test_an_error_event_in_an_openai_stream_is_retried_like_a_cut_stream(direct, server, event):
    server.add(sse([event], done=False), text_reply("fine now"))
    write_cfg(direct, **base_cfg(server))
    r = bantam_here("-p", "hi", cwd=direct)
    assert r.returncode == 0 and r.stdout == "fine now\n", r.stderr
    assert "[retry 1 in 0s: error in stream: upstream overloaded" in r.stderr
    assert len(server.chat_requests()) == 2


def test_an_untyped_error_event_in_an_anthropic_stream_is_retried(direct):
    with AnthropicServer() as server:
        bare = anth.stream([anth.message_start(), *anth.text_block(0, "Hal")[:2],
                            'data: {"error": {"message": "upstream overloaded"}}\n\n'])
        server.add(bare, anth.text_reply("fine now"))
        write_cfg(direct, **base_cfg(server, provider="anthropic"))
        r = bantam_here("-p", "hi", cwd=direct)
        assert r.returncode == 0 and r.stdout == "fine now\n", r.stderr
        assert "error in stream: upstream overloaded" in r.stderr and len(server.messages_requests()) == 2


@pytest.mark.parametrize("event", [{"error": {"message": "bad field", "type": "invalid_request_error"}},
                                   {"error": {"message": "no such model", "code": 404}}])
def test_an_error_event_that_blames_the_request_is_not_retried(direct, server, event):
    server.add(sse([event], done=False), text_reply("never"))
    write_cfg(direct, **base_cfg(server))
    line = one_error_line(bantam_here("-p", "hi", cwd=direct))
    assert "error in stream:" in line and len(server.chat_requests()) == 1


def test_a_server_restart_is_still_retried(direct, server):
    """A dropped connection (`Server disconnected`) is no protocol mismatch: retried."""
    server.add(sse([], done=False, cut=True), text_reply("back"))
    write_cfg(direct, **base_cfg(server))
    r = bantam_here("-p", "hi", cwd=direct)
    assert r.returncode == 0 and r.stdout == "back\n", r.stderr
    assert isinstance(server, FakeServer) and len(server.chat_requests()) == 2
