"""Issue 13, the browser view: a foreign Host is refused before anything else, links to hidden or
configuration files are not served, the printed token works once, web_password has a minimum
length. A real `bantam web` process and real HTTP requests."""
import os

import httpx
import pytest

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.web.test_web import WebServer

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


@pytest.fixture
def web(home, server):
    write_cfg(home, "model.cfg", **base_cfg(server, api_key="sk-web-secret-key-123"))
    w = WebServer(home)
    yield w
    w.close()


def test_a_foreign_host_is_refused_even_with_the_token(web):
    port = web.base.rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "127.0.0.1:1"):
        r = web.client.get("/api/state", headers={"Host": host})
        assert r.status_code == 403 and "unknown Host" in r.text, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert web.client.get("/api/state", headers={"Host": host}).status_code == 200, host


def test_links_to_hidden_and_config_files_are_not_served(web):
    ws = web.workspace
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[remote]\n url = https://x:ghp_gittoken12345@github.com/a/b\n")
    os.symlink("model.cfg", ws / "cfg.txt")
    os.symlink(".git", ws / "g")
    key = web.client.get("/api/state").json()["view_key"]
    raw = httpx.get(f"{web.base}/raw/{key}/cfg.txt")
    assert raw.status_code == 403 and "sk-web-secret-key-123" not in raw.text
    assert httpx.get(f"{web.base}/raw/{key}/g/config").status_code == 403
    view = web.client.get("/api/view", params={"path": "g/config"})
    assert view.status_code == 403 and "ghp_gittoken12345" not in view.text
    assert web.client.get("/api/view", params={"path": "cfg.txt"}).json()["raw"] is False


def test_the_printed_token_is_exchanged_once(web):
    first = httpx.Client(base_url=web.base, timeout=10)
    assert first.get(f"/?token={web.token}").status_code == 303
    assert first.get("/api/state").status_code == 200  # the cookie works
    later = httpx.Client(base_url=web.base, timeout=10)  # someone with the browser history
    assert later.get(f"/?token={web.token}").status_code == 401
    assert later.post("/login", data={"password": web.token}).status_code == 401
    assert later.get("/api/state", headers={"Authorization": f"Bearer {web.token}"}).status_code == 401


def test_a_short_web_password_is_refused(home, server):
    write_cfg(home, **base_cfg(server, web_password="hunter2"))
    r = run_bantam("web", "--port", "0", cwd=home)
    assert r.returncode == 2 and "web_password: use at least 12 characters" in r.stderr


def test_the_page_never_shows_a_known_secret(web, server):
    from tests.fakes.openai_server import text_reply, tool_reply
    server.add(tool_reply("shell_exec", {"command": "cat model.cfg"}), text_reply("shown"))
    web.send("show me the config")
    web.events_until(lambda e: e.get("type") == "tool_result")
    web.idle()
    events = web.events_until(lambda e: "shown" in str(e.get("text", "")))  # the whole log, replayed
    text = str(events)
    assert "sk-web-secret-key-123" not in text
    results = [e for e in events if e.get("type") == "tool_result"]
    assert results and "api_key=***" in str(results[0])
