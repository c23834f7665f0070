"""Stopping a provider's requests from another thread (providers/cancel.py): a request whose
model has not answered yet, not even its headers, is woken by the stop, not by its timeout. A
real socket server that accepts and never answers; a real httpx client."""
import socket
import threading

import pytest

from bantam.config import Config
from bantam.providers.cancel import Stopper
from bantam.providers.http import make_client

pytestmark = pytest.mark.quick


class Silent:
    """Accepts connections and reads requests, never answers (a model thinking for ever)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/v1/chat/completions"
        self.received = threading.Event()
        self.closed = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            while data := conn.recv(65536):
                if b"\r\n\r\n" in data:
                    self.received.set()
            self.closed.set()  # the client shut its side


def test_a_stop_wakes_a_request_still_waiting_for_its_headers():
    server = Silent()
    client = make_client(Config(timeout=600), plain=server.url)  # its own timeout would take 10 minutes
    stopper = Stopper()

    class Provider:
        def http_client(self):
            return client
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            client.post(server.url, json={"model": "m", "messages": []})
        except BaseException as e:  # the stop: KeyboardInterrupt, or the network error of a shut socket
            outcome.append(e)
    stopper.watch(Provider())
    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    assert server.received.wait(60), "the request never reached the server"
    stopper.set()
    asker.join(60)
    assert not asker.is_alive(), "the request still waits for its headers after the stop"
    assert outcome and server.closed.wait(60)
