"""TLS to the model's endpoint: verified against the CAs httpx trusts (SSL_CERT_FILE included),
with one TLS context per process shared by every provider (a batch makes one per worker thread)."""
import ssl
import subprocess

import pytest

from tests.conftest import run_bantam
from tests.fakes.openai_server import FakeServer, text_reply


@pytest.fixture
def certificate(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                           "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True)
    if made.returncode:
        pytest.skip(f"openssl could not make a certificate: {made.stderr[-200:]!r}")
    return key, cert


class TlsServer(FakeServer):
    def __init__(self, key, cert, *args, **kwargs):
        super().__init__(*args, **kwargs)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)

    @property
    def url(self) -> str:
        return super().url.replace("http://", "https://")


def test_an_https_endpoint_is_verified_against_the_trusted_cas(home, certificate):
    key, cert = certificate
    with TlsServer(key, cert) as server:
        server.add(text_reply("over TLS"))
        trusted = run_bantam("-p", "hi", "--endpoint", server.url, "--model", "m", "--set", "retry_delays=0",
                             cwd=home, env={"SSL_CERT_FILE": str(cert)})
        unknown = run_bantam("-p", "hi", "--endpoint", server.url, "--model", "m", "--set", "retry_delays=0",
                             cwd=home, env={"SSL_CERT_FILE": ""})
    assert trusted.returncode == 0 and "over TLS" in trusted.stdout, trusted.stderr
    assert unknown.returncode != 0 and "certificate" in unknown.stderr.lower()
    assert len(server.chat_requests()) == 1  # the unverified server never got the request


def test_every_provider_in_a_process_shares_one_tls_context():
    from bantam.providers.http import tls_context
    assert tls_context() is tls_context()
    assert tls_context().verify_mode == ssl.CERT_REQUIRED and tls_context().check_hostname


def test_a_client_for_a_plain_http_endpoint_trusts_no_ca_so_tls_through_it_fails_closed(certificate):
    # a local server at http://... spares loading the CAs; should anything ever speak TLS through
    # that client, no certificate passes, even one SSL_CERT_FILE would trust
    import httpx

    from bantam.config import Config
    from bantam.providers.http import make_client
    key, cert = certificate
    with TlsServer(key, cert) as server:
        plain = make_client(Config(), plain="http://127.0.0.1:9/v1/chat/completions")
        with pytest.raises(httpx.ConnectError, match="(?i)certificate"):
            plain.get(server.url + "/models")


def test_an_https_proxy_keeps_the_trusted_cas_for_a_plain_http_endpoint(monkeypatch):
    from bantam.config import Config
    from bantam.providers.http import make_client, tls_context
    monkeypatch.setenv("HTTP_PROXY", "https://proxy.example:3128")
    client = make_client(Config(), plain="http://127.0.0.1:9/v1/chat/completions")
    assert client._transport._pool._ssl_context is tls_context()  # noqa: SLF001 (the context httpx was given)
