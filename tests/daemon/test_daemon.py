"""`bantam daemon` as a user runs it: real daemon processes, a real model server and a real
Telegram Bot API server on 127.0.0.1 (tests/fakes), real files, real shells."""
import fcntl
import getpass
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
import threading

import pytest

from bantam.daemon.bus import MessageFile
from bantam.daemon.stash import SUMMARY_PROMPT
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.conftest import wait_for  # noqa: F401 (test_daemon_bus and others import it from here)

# every interval short, so that a test waits for milliseconds, not the seed's minutes
FAST = {"model": "test-model", "retry_delays": [0], "trigger_tick": 0.2, "inbox_tick": 0.2,
        "heartbeat_s": 0, "tool_timeout": 5, "telegram_poll_s": 1, "poll_s": 0.1, "life_tail": 8}
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
       b"\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84"
       b"\x00\x00\x00\x00IEND\xaeB`\x82")


class ModelServer(FakeServer):
    """The model, by rules: `on(needle, *replies)` answers a request whose newest conversation
    message contains `needle` with the next of `replies`; anything else gets "ok". Requests for
    a stash summary get SUMMARY."""

    SUMMARY = "SUMMARY of the moved lines"

    def __init__(self):
        super().__init__()
        self.rules: list[tuple[str, list]] = []

    def on(self, needle, *replies):
        self.rules.append((needle, list(replies)))

    def next_response(self, body=None):
        messages = body["messages"]
        if SUMMARY_PROMPT in str(messages[0].get("content")):
            return text_reply(self.SUMMARY)
        newest = str(messages[-2].get("content")) if len(messages) > 2 else ""
        with self.lock:
            for needle, replies in self.rules:
                if needle in newest and replies:
                    return replies.pop(0)
        return text_reply("ok")

    def seen(self, needle):
        """Requests whose newest conversation message contains `needle`."""
        return [r for r in self.chat_requests() if needle in str(r.body["messages"][-2].get("content"))]


class Daemon:
    """`bantam daemon ARGS` in its own process, output kept in a file next to the test's home."""

    def __init__(self, cwd: Path, *args: str, env: dict | None = None):
        self.out = cwd.parent / f"daemon-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", *args], cwd=cwd,
                                     stdin=subprocess.DEVNULL, stdout=open(self.out, "w"),
                                     stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(15)

    def output(self) -> str:
        return self.out.read_text()


@pytest.fixture
def model():
    with ModelServer() as s:
        yield s


@pytest.fixture
def daemons(home):
    started = []

    def start(*args, env=None):
        d = Daemon(home, *args, env=env)
        started.append(d)
        return d
    yield start
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def configure(agent: Path, model, **extra) -> Path:
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "config.json").write_text(json.dumps({**FAST, "api_base": model.url, **extra}))
    return agent




def messages(agent: Path) -> list[dict]:
    """Read as any outside reader should: under a shared lock, so never mid-rewrite; and where a
    killed rewrite left its journal, the journal is the conversation (the file may be torn until
    the next writer finishes the copy: reading it was a JSONDecodeError seen under load)."""
    with open(agent / "messages.jsonl", "rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        try:
            data = (agent / ".messages.jsonl.journal").read_bytes()
        except FileNotFoundError:
            data = f.read()
        return [json.loads(line) for line in data.splitlines()]


def contents(agent: Path, role: str | None = None) -> list[str]:
    return [str(m.get("content")) for m in messages(agent) if role in (None, m["role"])]


def life(agent: Path) -> str:
    return (agent / "LIFE.md").read_text()


def started(agent: Path) -> bool:
    return (agent / "LIFE.md").exists() and " start: " in life(agent)


def watch_looked(trigger: Path) -> bool:
    """A watch trigger fires on a change after its first look, which records the hash it saw:
    a test changes the watched file only once this is true."""
    return trigger.is_file() and "hash" in json.loads(trigger.read_text())


def answered(agent: Path, text: str):
    return lambda: any(text in c for c in contents(agent, "assistant"))


# --- first start and validation ---------------------------------------------------------------

def test_first_start_creates_the_agent_and_asks_for_a_key(home):
    user = Path(os.environ["HOME"], ".config", "bantam", "config")  # a remote endpoint, no key
    user.parent.mkdir(parents=True)
    user.write_text("endpoint=https://api.example.com/v1\nmodel=remote-model\n")
    r = subprocess.run([sys.executable, "-m", "bantam", "daemon"], cwd=home, capture_output=True,
                       text=True, timeout=30, env={**os.environ, "ATTOBOT_API_KEY": ""})
    assert r.returncode == 2, r.stderr
    assert "new agent in agent" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f'bantam: {home}/agent/config.json: no API key: set ATTOBOT_API_KEY in the environment or '
        '"api_key" in this file (a model server on localhost needs none)')
    agent = home / "agent"
    for name in ("SOUL.md", "MEMORY.md", "LIFE.md", "messages.jsonl", "config.json"):
        assert (agent / name).is_file(), name
    for name in ("memory", "triggers", "trigger-queue", "mail_inbox/processed", "inbound", "bg",
                 "tools", "blobs"):
        assert (agent / name).is_dir(), name
    assert "model" not in json.loads((agent / "config.json").read_text())  # the user's configuration decides
    assert (agent / "config.json").stat().st_mode & 0o777 == 0o600
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("config,message", [
    ("{not json", "not valid JSON"),
    ('{"temperature": "hot"}', "temperature: expected a number, got 'hot'"),
    ('{"telegram_token": "x"}', "telegram_chat_id is required when telegram_token is set"),
    ('{"colour": "blue"}', "unknown key 'colour'"),
    ('{"opt": ["tools/nope"]}', "opt: no tools/nope.py"),
    ('{"provider": "mine"}', "provider: 'mine' is neither built in"),
    ('{"model": ""}', "model: empty; name a model"),  # absent is the user's model; empty is no model
])
def test_bad_configuration_is_one_clear_line(home, model, config, message):
    agent = configure(home / "agent", model)
    text = json.dumps({**FAST, "api_base": model.url})
    (agent / "config.json").write_text(config if config.startswith("{not") else
                                       text[:-1] + ", " + config[1:])
    r = subprocess.run([sys.executable, "-m", "bantam", "daemon"], cwd=home, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr
    assert str(agent / "config.json") in r.stderr


def test_one_daemon_per_directory(home, model, daemons):
    agent = configure(home / "agent", model)
    first = daemons()
    wait_for(lambda: started(agent), "the first daemon")
    r = subprocess.run([sys.executable, "-m", "bantam", "daemon", "agent"], cwd=home,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert f"is in use by another bantam daemon (pid {first.proc.pid})" in r.stderr
    first.proc.send_signal(signal.SIGINT)  # Ctrl+C stops it as cleanly as SIGTERM
    assert first.proc.wait(15) == 0
    assert " stop: " in life(agent) and "Traceback" not in first.output()


def test_the_start_message_is_in_before_life_says_start(home, model, daemons):
    """LIFE.md's "start" line is what an operator's script (and every test here) waits for before
    it writes: a message written then must come after the daemon's own [start] message, or it is
    no longer the newest and a turn answers the start instead (seen in CI under load). Holding
    the conversation's lock stops the daemon at its first write; until that is let go, LIFE.md
    must not say start."""
    agent = configure(home / "agent", model)
    (agent / "messages.jsonl").touch()
    with open(agent / "messages.jsonl", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        d = daemons()
        inode = os.fstat(held.fileno()).st_ino
        wait_for(lambda: lock_waiters(inode, d.proc.pid), "the daemon waiting for the lock")
        assert not started(agent), "LIFE.md said start before the start message was written"
    wait_for(lambda: started(agent), "start")
    assert [c for c in contents(agent) if "[start] bantam daemon started" in c]


def lock_waiters(inode: int, pid: int) -> list[str]:
    """Lines of /proc/locks for `pid` blocked ("->") on a lock of the file with this inode."""
    return [line for line in Path("/proc/locks").read_text().splitlines()
            if "->" in line and f" {pid} " in line and line.split()[-3].endswith(f":{inode}")]


# --- channels in: mail, telegram ------------------------------------------------------------

def test_mail_is_delivered_once_answered_and_logged(home, model, daemons):
    agent = configure(home / "agent", model)
    model.on("[mail from", text_reply("Read it: the report is due Friday."))
    d = daemons()
    wait_for(lambda: started(agent), "start")
    (agent / "mail_inbox" / "report.txt").write_text("The report is due Friday.\n")
    wait_for(answered(agent, "due Friday"), "the reply to the mail")
    mails = [c for c in contents(agent, "user") if c.startswith("[mail from")]
    assert mails == [f"[mail from {getpass.getuser()}] report.txt\nThe report is due Friday.\n"]
    assert not (agent / "mail_inbox" / "report.txt").exists()
    assert (agent / "mail_inbox" / "processed" / "report.txt").read_text() == "The report is due Friday.\n"
    log = life(agent)
    assert "mail: delivered report.txt" in log and "reply: Read it: the report is due Friday." in log
    assert d.stop() == 0
    again = daemons()  # a restart delivers nothing twice
    wait_for(lambda: life(agent).count(" start: ") == 2, "the restart")
    time.sleep(0.5)
    assert again.stop() == 0
    assert sum(c.startswith("[mail from") for c in contents(agent, "user")) == 1


def test_telegram_message_answered_and_foreign_chats_ignored(home, model, daemons):
    with FakeTelegram() as tg:
        agent = configure(home / "agent", model, telegram_token=tg.token, telegram_chat_id=42,
                          telegram_thread_id="7", telegram_api_base=tg.url)
        model.on("[telegram", text_reply("Hello, operator."))
        daemons()
        wait_for(lambda: started(agent), "start")
        tg.push_text(chat_id=999, text="a stranger writes")
        tg.push_text(chat_id=42, thread_id=8, text="another topic")
        own = tg.push_text(chat_id=42, thread_id=7, text="hello bot")
        sent = tg.wait_sent(1)
        assert sent[0].method == "sendMessage"
        assert sent[0].params == {"chat_id": "42", "message_thread_id": "7", "text": "Hello, operator."}
        users = contents(agent, "user")
        assert f"[telegram {own}] hello bot" in users
        assert not any("stranger" in c or "another topic" in c for c in users)
        log = life(agent)
        assert "ignored a message from chat 999" in log and "topic 8 of chat 42" in log
        # the cursor is saved after the update is handed on, so the reply may come first
        offset = agent / "tg_poll.offset"
        wait_for(lambda: offset.is_file() and offset.read_text() == "4\n", "the cursor past the last update")
        time.sleep(0.5)
        assert len(tg.sent) == 1  # the reply to the start banner was muted
        tg.add_file("F1", "documents/file_1.txt", b"quarterly numbers")
        doc = tg.push({"chat": {"id": 42}, "message_thread_id": 7, "caption": "see attached",
                       "document": {"file_id": "F1", "file_name": "q3.txt"}})
        tg.wait_sent(2)
        assert f"[telegram {doc}] see attached\n[file received: agent/inbound/{doc}-q3.txt]" in contents(agent, "user")
        assert (agent / "inbound" / f"{doc}-q3.txt").read_bytes() == b"quarterly numbers"


def test_send_attachment_and_images_for_a_multimodal_model(home, model, daemons):
    with FakeTelegram() as tg:
        agent = configure(home / "agent", model, telegram_token=tg.token, telegram_chat_id="42",
                          telegram_api_base=tg.url, multimodal_support=True)
        (home / "chart.png").write_bytes(PNG)
        model.on("[telegram", tool_reply("SEND_ATTACHMENT", {"path": "chart.png", "caption": "the chart"}))
        model.on("sent chart.png", tool_reply("READ_FILE", {"path": "chart.png"}, call_id="call_2"))
        model.on("[image chart.png]", tool_reply("SEND_ATTACHMENT", {"caption": "only words"}, call_id="call_3"))
        model.on("missing required argument 'path'", text_reply("Sent you the chart."))
        daemons()
        wait_for(lambda: started(agent), "start")
        tg.push_text(chat_id=42, text="send me the chart")
        sent = tg.wait_sent(2)
        assert sent[0].method == "sendPhoto" and sent[0].params == {"chat_id": "42", "caption": "the chart"}
        assert sent[0].files["photo"] == ("chart.png", PNG)
        assert sent[1].params["text"] == "Sent you the chart."
        image = next(m for m in messages(agent) if isinstance(m["content"], list))
        assert image["role"] == "user" and image["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
        tool_results = [m["content"] for m in messages(agent) if m["role"] == "tool"]
        assert tool_results[1].startswith("[image chart.png: image/png, ")
        assert tool_results[2] == "error: missing required argument 'path'"  # no text-only sends
        # the image message came right after its tool-call block and went to the model
        assert any(isinstance(m["content"], list) for m in model.seen("[image chart.png]")[0].body["messages"])


# --- triggers -----------------------------------------------------------------------------

def test_each_trigger_kind_fires_and_reschedules(home, model, daemons):
    agent = configure(home / "agent", model)
    (home / "watched.txt").write_text("version 1\n")
    now = time.time()
    specs = {"once": {"next": now - 1, "message": "one-shot says hi"},
             "every": {"next": now - 1, "repeat_s": 1, "message": "repeating tick"},
             "cron": {"cron": "* * * * * *", "message": "cron tick"},
             "computed": {"cmd": "echo computed-$((6*7)); echo noise >&2", "repeat_s": 60},
             "silent": {"cmd": "true", "repeat_s": 60},
             "watcher": {"watch": "watched.txt", "repeat_s": 30, "message": "watched.txt changed"}}
    (agent / "triggers").mkdir(parents=True)
    for name, spec in specs.items():
        (agent / "triggers" / f"{name}.json").write_text(json.dumps(spec))
    d = daemons()
    wait_for(lambda: model.seen("[trigger computed] computed-42"), "the cmd trigger")
    wait_for(lambda: watch_looked(agent / "triggers" / "watcher.json"), "the watch baseline")
    (home / "watched.txt").write_text("version 2\n")
    for text in ("[trigger once] one-shot says hi", "[trigger every] repeating tick",
                 "[trigger cron] cron tick", "[trigger watcher] watched.txt changed"):
        wait_for(lambda: model.seen(text), text)
    wait_for(lambda: len(model.seen("[trigger every] repeating tick")) >= 2, "a second repeat")
    assert d.stop() == 0
    assert not (agent / "triggers" / "once.json").exists()
    after = {p.stem: json.loads(p.read_text()) for p in (agent / "triggers").glob("*.json")}
    assert after["every"]["next"] > now + 1 and after["cron"]["next"] > now
    assert now + 50 < after["computed"]["next"] < time.time() + 61
    assert after["watcher"]["last"] > now
    assert not model.seen("[trigger silent]") and "noise" not in json.dumps(messages(agent))
    # one at a time: no request ever carried two trigger messages, because each idle pair was
    # collapsed before the next one landed
    for r in model.chat_requests():
        assert sum("[trigger " in str(m.get("content")) for m in r.body["messages"]) <= 1
    assert sum("[trigger " in c for c in contents(agent, "user")) <= 1


def test_heartbeat_backs_off_while_idle_and_resets_on_activity(home, model, daemons):
    agent = configure(home / "agent", model, heartbeat_s=0.3, heartbeat_max_s=1.2, trigger_tick=0.1)
    daemons()
    beat = agent / "triggers" / "heartbeat.json"
    wait_for(lambda: beat.exists() and json.loads(beat.read_text())["repeat_s"] == 1.2, "the back-off", 20)
    (agent / "mail_inbox" / "news.txt").write_text("something happened")
    wait_for(lambda: json.loads(beat.read_text())["repeat_s"] == 0.3, "the reset", 20)
    assert model.seen("[trigger heartbeat]")


def test_subconscious_triggers_are_surfaced_and_directives_stash(home, model, daemons):
    with FakeTelegram() as tg:
        agent = configure(home / "agent", model, telegram_token=tg.token, telegram_chat_id="42",
                          telegram_api_base=tg.url)
        history = [{"role": "user", "content": f"old question {i}"} if i % 2 == 0 else
                   {"role": "assistant", "content": f"old answer {i}"} for i in range(8)]
        (agent / "messages.jsonl").write_text("".join(json.dumps(m) + "\n" for m in history))
        (agent / "triggers").mkdir()
        (agent / "triggers" / "subconscious-prune-1.json").write_text(
            json.dumps({"next": 0, "message": "STASH_MESSAGE: 3 6"}))
        daemons()
        sent = tg.wait_sent(1)
        assert sent[0].params["text"] == "[subconscious-prune-1] STASH_MESSAGE: 3 6"
        wait_for(lambda: any("[stash " in c for c in contents(agent, "user")), "the stash")
        now = contents(agent)
        assert now[:3] == ["old question 0", "old answer 1", next(c for c in now if "[stash " in c)]
        assert "lines 3-6 (4 messages)" in now[2] and ModelServer.SUMMARY in now[2]
        assert "old question 6" in now and "old question 2" not in now
        digest = now[2].split("[stash ", 1)[1].split("]")[0]
        stashed = [json.loads(x) for x in (agent / "blobs" / digest).read_text().splitlines()]
        assert stashed == history[2:6]
        assert not any("STASH_MESSAGE" in c for c in contents(agent, "user"))


# --- background work, clipping, stashing ------------------------------------------------------

def test_slow_tool_is_backgrounded_and_its_result_delivered(home, model, daemons):
    agent = configure(home / "agent", model, tool_timeout=0.5, watch="poll")  # no inotify here
    model.on("run the slow job", tool_reply("BASH", {"command": "sleep 1.5; echo slow-job-done"}))
    model.on("[bg ", text_reply("The slow job finished."))
    daemons()
    wait_for(lambda: started(agent), "start")
    MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "run the slow job"})
    # every call has its record from the start (so an interrupted one is known); this one goes on
    # in the background past tool_timeout, and its record then says so, with the pid
    record = wait_for(lambda: [r for p in (agent / "bg").glob("*.json")
                               if (r := json.loads(p.read_text())).get("background")], "bg json")[0]
    assert record["tool"] == "BASH" and record["tc"] == "call_1"
    assert Path(f"/proc/{record['pid']}").exists()
    wait_for(answered(agent, "The slow job finished."), "the completion")
    results = [m["content"] for m in messages(agent) if m["role"] == "tool"]
    assert results == [f"[backgrounded bg/{record['id']} (pid {record['pid']}); kill the pid to stop it]"]
    done = [c for c in contents(agent, "user") if "[bg " in c]
    assert done == [f"<system-message>[bg {record['id']} done, tc:call_1] slow-job-done\n\n\nexit: 0"
                    "</system-message>"]
    assert not list((agent / "bg").glob("*.json"))
    assert f"bg: {record['id']} BASH backgrounded" in life(agent)


def test_long_output_is_clipped_and_an_overfull_context_stashed(home, model, daemons):
    agent = configure(home / "agent", model, tool_output_limit=400, context_tokens=6000, life_tail=3)
    # 40 old messages (16 000 characters) with a tool-call block across the middle half's start
    history = [{"role": "user", "content": f"old {i} " + "x" * 400} if i % 2 == 0 else
               {"role": "assistant", "content": f"old {i} " + "y" * 400} for i in range(40)]
    history[9] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "BASH", "arguments": "{}"}}]}
    history[10] = {"role": "tool", "tool_call_id": "t1", "content": "old tool result"}
    (agent / "messages.jsonl").write_text("".join(json.dumps(m) + "\n" for m in history))
    model.on("count to 3000", tool_reply("BASH", {"command": "seq 1 3000"}))
    daemons()
    stash = wait_for(lambda: [c for c in contents(agent, "user") if "[stash " in c], "the stash")[0]
    digest = stash.split("[stash ", 1)[1].split("]")[0]
    moved = [json.loads(x) for x in (agent / "blobs" / digest).read_text().splitlines()]
    assert moved == history[11:30]  # the middle half, snapped past the block's tool result
    assert ModelServer.SUMMARY in stash and "lines 12-30 (19 messages)" in stash
    now = messages(agent)
    assert now[:11] == history[:11] and now[12:22] == history[30:]  # the block stayed whole
    MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "count to 3000"})
    result = wait_for(lambda: [m["content"] for m in messages(agent) if m["role"] == "tool"
                               and "chars truncated" in m["content"]], "the clipped result")[0]
    blob = result.split("[stash ", 1)[1].split("]")[0]
    full = (agent / "blobs" / blob).read_text()
    expected = "".join(f"{i}\n" for i in range(1, 3001)) + "\n\nexit: 0"
    assert full == expected and len(result) < 600
    assert result.startswith("1\n2\n3\n") and result.endswith("2999\n3000\n\n\nexit: 0")
    model.on("READ_FILE me", tool_reply("READ_FILE", {"path": f"agent/blobs/{blob}", "offset": 2999,
                                                       "limit": 2}, call_id="call_r"))
    MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "READ_FILE me"})
    back = wait_for(lambda: [m["content"] for m in messages(agent)
                             if m["role"] == "tool" and m.get("tool_call_id") == "call_r"], "the read")[0]
    assert back.startswith("  2999\t2999\n  3000\t3000\n[lines 2999-3000 of ")


# --- web --------------------------------------------------------------------------------------

class _Pages(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, body: str):
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send("<html><head><title>Tide tables</title><script>var x=1;</script></head><body>"
                   "<h2>High water</h2><p>At <b>06:12</b>, see <a href='/more'>more</a>.</p></body></html>")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send('<div class="result"><a class="result__a" href="//duckduckgo.com/l/?uddg='
                   'https%3A%2F%2Fexample.org%2Ftides&rut=x">Tides <b>today</b></a>'
                   '<a class="result__snippet">High and low water times.</a></div>')


def test_web_fetch_and_search_against_a_local_server(home, model, daemons):
    pages = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{pages.server_address[1]}"
    try:
        agent = configure(home / "agent", model, search_url=f"{base}/search")
        model.on("look up tides", tool_reply("SEARCH", {"query": "tides"}, call_id="s1"))
        model.on("Tides today", tool_reply("WEB_FETCH", {"url": f"{base}/page"}, call_id="f1"))
        daemons()
        wait_for(lambda: started(agent), "start")
        MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "look up tides"})
        results = wait_for(lambda: len([m for m in messages(agent) if m["role"] == "tool"]) == 2
                           and [m["content"] for m in messages(agent) if m["role"] == "tool"], "the tools")
    finally:
        pages.shutdown()
    assert results[0] == "1. Tides today\n   https://example.org/tides\n   High and low water times."
    assert results[1].startswith(f"{base}/page (HTTP 200)\n\n# Tide tables\n\n## High water\n\n")
    assert "At **06:12**, see [more](/more)." in results[1] and "var x" not in results[1]
