"""`bantam web` over HTTP: the token, confinement, cross-origin refusals, Stop, commands, sessions.

Each test starts the real `bantam web` command in a subprocess against a real local model server
(tests/fakes/openai_server.py) and talks to it with httpx. The browser tests are in
test_web_browser.py and use the `WebServer` helper from here.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import httpx
import pytest

from bantam import transcripts
from bantam.transcripts import project_id
from tests.conftest import base_cfg, write_cfg
from tests.fakes.openai_server import chunk, sse, text_reply, usage

pytest.importorskip("starlette", reason="bantam web needs the web extra: pip install -e '.[web,test]'")
pytest.importorskip("uvicorn", reason="bantam web needs the web extra: pip install -e '.[web,test]'")


class WebServer:
    """`bantam web --port 0` in a subprocess; the link it prints tells the port and the token."""

    def __init__(self, workspace: Path, *args: str, cwd: Path | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "bantam", "web", "--port", "0", *args],
                                     cwd=cwd or workspace, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.workspace = workspace
        line = self._first_line(30)
        assert line.startswith("bantam web: http://127.0.0.1:"), line
        self.link = line.split(": ", 1)[1].strip()
        self.base, _, self.token = self.link.partition("/?token=")
        self.base = self.base.rstrip("/")
        self.client = httpx.Client(base_url=self.base, timeout=20,
                                   headers={"Authorization": f"Bearer {self.token}"})

    def _first_line(self, timeout: float) -> str:
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                self.close()
                pytest.fail("bantam web printed no link")
        line = self.proc.stdout.readline()
        if not line:
            pytest.fail(f"bantam web exited: {self.proc.wait()} {self.proc.stderr.read()}")
        return line

    def send(self, text: str) -> httpx.Response:
        return self.client.post("/api/input", json={"text": text})

    def events_until(self, done: Callable[[dict], bool], timeout: float = 20) -> list[dict]:
        """Read the event stream (the replayed log, then live events) until `done(event)`."""
        seen: list[dict] = []
        deadline = time.monotonic() + timeout
        with self.client.stream("GET", "/api/events", timeout=httpx.Timeout(timeout)) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if done(seen[-1]):
                        return seen
                if time.monotonic() > deadline:
                    break
        pytest.fail(f"no such event within {timeout}s; saw {seen[-10:]}")

    def idle(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.client.get("/api/state").json()["busy"]:
            assert time.monotonic() < deadline, "still busy"
            time.sleep(0.05)

    def close(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read()


@pytest.fixture
def web(home, server):
    write_cfg(home, **base_cfg(server, api_key="sk-secret-key-123"))
    w = WebServer(home)
    yield w
    w.close()


def saved_messages(workspace: Path) -> list[dict]:
    path = Path(os.environ["HOME"], ".bantam", "sessions", f"{project_id(workspace)}.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()][1:]  # after the head record


def test_every_route_refuses_a_request_without_the_token(web):
    (web.workspace / "a.txt").write_text("hi")
    bare = httpx.Client(base_url=web.base, timeout=10)
    for path in ("/", "/api/state", "/api/files", "/api/sessions", "/api/view?path=a.txt", "/api/turn?seq=1", "/api/events",
                 "/?token=wrong"):
        assert bare.get(path).status_code == 401, path
    assert bare.post("/api/input", json={"text": "!touch pwned"}).status_code == 401
    assert bare.post("/api/stop", json={}).status_code == 401
    wrong = httpx.Client(base_url=web.base, timeout=10, headers={"Authorization": "Bearer nope"})
    assert wrong.get("/api/state").status_code == 401
    assert "enter its token" in bare.get("/").text  # the sign-in page, not the app
    assert bare.get("/raw/not-the-key/a.txt").status_code == 404

    signed = bare.get(f"/?token={web.token}")  # the printed link: a cookie, then `/` without the token
    assert signed.status_code == 303 and signed.headers["location"] == "/"
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = bare.get("/")  # the cookie alone is enough now
    assert page.status_code == 200 and "<title>bantam</title>" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert web.token not in page.text
    login = httpx.post(f"{web.base}/login", data={"password": web.token})
    assert login.status_code == 401  # the token was exchanged once: spent (test_trust_web.py)
    assert not (web.workspace / "pwned").exists()


def test_paths_outside_the_workspace_are_refused(web, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "x.txt").write_text("not yours either")
    ws = web.workspace
    (ws / "inside.txt").write_text("hello")
    (ws / "sub").mkdir()
    (ws / "sub" / "page.html").write_text("<p>ok</p>")
    (ws / "link.txt").symlink_to(outside)
    (ws / "linkdir").symlink_to(tmp_path / "outdir")
    (ws / "model.cfg").write_text("api_key=sk-secret-key-123\n")
    key = web.client.get("/api/state").json()["view_key"]

    listed = [f["path"] for f in web.client.get("/api/files").json()]
    assert listed == ["inside.txt", "model.cfg", "sub/page.html"]  # no symlinks out, nothing hidden
    assert web.client.get("/api/view?path=inside.txt").json()["kind"] == "text"
    for path, status in (("../outside.txt", 403), ("/etc/passwd", 403), ("link.txt", 403),
                         ("linkdir/x.txt", 403), ("sub/../../outside.txt", 403), (".bantam.cfg", 403),
                         ("missing.txt", 404), ("sub", 404)):
        assert web.client.get("/api/view", params={"path": path}).status_code == status, path
    raw = httpx.Client(base_url=web.base, timeout=10)  # the viewer's route: its key, no cookie
    page = raw.get(f"/raw/{key}/sub/page.html")
    assert page.status_code == 200 and page.text == "<p>ok</p>"
    assert page.headers["content-security-policy"].startswith("sandbox allow-scripts")
    for path in ("link.txt", "..%2Foutside.txt", "%2E%2E/outside.txt", "sub/%2e%2e/%2e%2e/outside.txt",
                 ".bantam.cfg", "model.cfg", "linkdir/x.txt"):
        response = raw.get(f"/raw/{key}/{path}")
        assert response.status_code in (403, 404) and "not yours" not in response.text, path
    shown = web.client.get("/api/view?path=model.cfg").json()["html"]
    assert "sk-secret-key-123" not in shown and "***" in shown


def test_posts_from_another_origin_are_refused(web, server):
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
        response = web.client.post("/api/input", json={"text": "!touch pwned"}, headers=headers)
        assert response.status_code == 403, headers
    as_form = web.client.post("/api/input", content=b'{"text": "!touch pwned"}', headers={"Content-Type": "text/plain"})
    assert as_form.status_code == 415  # a body another page could send without asking first
    same = web.client.post("/api/input", json={"text": "!echo fine"}, headers={"Origin": web.base})
    assert same.status_code == 200
    web.idle()
    assert not (web.workspace / "pwned").exists() and server.chat_requests() == []


def test_stop_ends_a_request_that_is_still_waiting_for_the_model(web, server):
    server.add(sse([chunk("too late")], delay=30))  # the model sends nothing for 30 s
    assert web.send("hello?").json() == {"status": "started"}
    web.events_until(lambda e: e["type"] == "request")
    assert web.send("another").status_code == 409  # one input at a time
    started = time.monotonic()
    assert web.client.post("/api/stop", json={}).json() == {"stopping": True}
    web.idle(10)
    assert time.monotonic() - started < 5
    assert [m["role"] for m in saved_messages(web.workspace)] == ["user", "assistant"]  # closed as unanswered
    events = web.events_until(lambda e: e.get("message") == "interrupted")
    assert not any(e["type"] == "text" for e in events)


def test_stop_mid_stream_keeps_no_partial_message(web, server):
    words = [chunk(f"w{i} ") for i in range(60)]
    server.add(sse(words + [chunk(finish="stop"), chunk(usage=usage(), no_choices=True)], delay=0.1),
               text_reply("second answer"))
    web.send("count slowly")
    web.events_until(lambda e: e["type"] == "text" and "w3" in e["text"])
    web.client.post("/api/stop", json={})
    web.idle()
    assert [m["role"] for m in saved_messages(web.workspace)] == ["user", "assistant"]  # closed as unanswered
    events = web.events_until(lambda e: e.get("message") == "interrupted")
    assert {"type": "discard"} in events
    web.send("and now?")
    web.idle()
    assert [m.get("content") for m in saved_messages(web.workspace)] == \
        ["count slowly", "[no answer: the user interrupted this request]", "and now?", "second answer"]


def test_stop_pauses_a_controlled_run_and_resume_finishes_it(web, server):
    (web.workspace / "ws").mkdir()
    (web.workspace / "ws" / "a.txt").write_text("alpha\n")
    plan = json.dumps({"plan": [{"description": "Read a.txt", "tool": "read_file", "arguments": {"path": "a.txt"}}]})
    read_a = '{"tool": "read_file", "arguments": {"path": "a.txt"}}'
    # the second answer arrives a piece a second: Stop is pressed while the model is still answering
    server.add(text_reply(plan), sse([chunk(read_a), chunk(finish="stop")], delay=1.0), text_reply('{"final": "done"}'))
    assert web.send("/run --workspace ws --require-read a.txt read a").json() == {"status": "started"}
    web.events_until(lambda e: e["type"] == "tool_result" and e.get("name") == "plan")
    assert web.client.post("/api/stop", json={}).json() == {"stopping": True}
    web.idle()
    run = next((web.workspace / "runs").iterdir())
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "paused" and state["pending_answer"]["text"] == read_a
    assert not (run / "observations.jsonl").exists()  # the proposed read did not run
    assert web.send("/resume").json() == {"status": "started"}
    web.idle()
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "completed" and state["final"] == "done"
    assert state["counters"]["model_calls"] == 3 and len(server.chat_requests()) == 3  # the answer was kept


def test_sessions_are_listed_and_resumed(web, server):
    transcripts.save("earlier", [{"role": "system", "content": "s"}, {"role": "user", "content": "old question"},
                              {"role": "assistant", "content": "old answer"}], summary="an older chat")
    rows = web.client.get("/api/sessions").json()
    assert [(r["id"], r["summary"], r["count"]) for r in rows] == [("earlier", "an older chat", 2)]
    web.send("/help")
    web.idle()
    web.send("/load earl")  # what the page's Resume button sends
    web.idle()
    events = web.events_until(lambda e: e["type"] == "busy" and not e["busy"])
    # after /load the page restarts from the loaded conversation, then shows the /load itself
    reset = [e for e in events if e["type"] == "reset"][-1]
    assert [i.get("text") or i.get("message") for i in reset["items"] if i["type"] != "done"] == \
        ["old question", "old answer", "/load earl", "loaded earlier: 2 messages"]
    assert saved_messages(web.workspace)[0]["content"] == "old question"
    assert not any(e["type"] == "output" for e in events)  # /help's output came before the reset
    server.add(text_reply("continued"))
    web.send("go on")
    web.idle()
    assert server.chat_requests()[0].body["messages"][1]["content"] == "old question"


def test_help_and_shell_output_reach_the_page(web):
    web.send("/help")
    web.idle()
    web.send("!echo from-the-shell; exit 3")
    web.idle()
    events = web.events_until(lambda e: e.get("message") == "exit: 3")
    outputs = [e["text"] for e in events if e["type"] == "output"]
    assert "/run GOAL" in outputs[0] and outputs[1] == "from-the-shell"


def test_the_compaction_question_is_answered_from_the_page(home, server):
    write_cfg(home, **base_cfg(server, context_window=100))
    server.models = [{"id": "test-model"}]
    server.add(text_reply("a long answer", usage(90, 5)))
    web = WebServer(home)
    try:
        web.send("fill the context")
        asked = web.events_until(lambda e: e["type"] == "ask" and e["question"])[-1]
        assert asked["question"].startswith("Context usage is at 90.0%")
        assert web.send("n").json() == {"status": "answered"}
        web.idle()
        assert len(server.chat_requests()) == 1  # declined: no compaction request
    finally:
        web.close()


def test_password_from_the_config_is_used_and_never_sent_to_the_model(home, server):
    write_cfg(home, **base_cfg(server, web_password="correct horse"))
    server.add(text_reply("hi"))
    web = WebServer(home)
    try:
        assert web.link.endswith("/") and "token" not in web.link
        assert httpx.get(f"{web.base}/api/state", headers={"Authorization": "Bearer correct horse"}).status_code == 200
        assert httpx.post(f"{web.base}/login", data={"password": "wrong"}).status_code == 401
        web.client.headers["Authorization"] = "Bearer correct horse"
        web.send("hello")
        web.idle()
        assert "web_password" not in json.dumps(server.chat_requests()[0].body)
        web.send("/cfg")
        web.idle()
        assert "correct horse" not in json.dumps(web.events_until(lambda e: e["type"] == "busy" and not e["busy"]))
    finally:
        web.close()


def test_workspace_option_and_bad_usage(home, server, tmp_path):
    write_cfg(home, **base_cfg(server))  # in the launch directory; the new workspace has none
    server.add(text_reply("from the launch directory's endpoint"))
    web = WebServer(home / "game", "--workspace", "game", cwd=home)
    try:
        assert web.client.get("/api/state").json()["workspace"] == str((home / "game").resolve())
        web.send("!pwd")
        web.idle()
        events = web.events_until(lambda e: e.get("message") == "exit: 0")
        assert str((home / "game").resolve()) in [e["text"] for e in events if e["type"] == "output"]
        web.send("hello")
        web.idle()
        assert len(server.chat_requests()) == 1
    finally:
        web.close()
    bad = subprocess.run([sys.executable, "-m", "bantam", "web", "--set", "temperature=hot"], cwd=home,
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "temperature" in bad.stderr and "Traceback" not in bad.stderr
