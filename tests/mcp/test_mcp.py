"""MCP: real servers nobody here wrote (mcp-server-time, mcp-server-git from PyPI; the reference
`server-everything` from npm, run with node), misbehaving ones (tests/fakes/mcp_servers.py), a
Streamable HTTP server in this process, and `bantam mcp` driven by the official SDK's client."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, base_cfg, run_bantam, wait_for, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply

pytest.importorskip("mcp")

EVERYTHING = ROOT / "tests" / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
TINY_PNG = "iVBORw0KGgo"  # every PNG's base64 starts so


def py_server(*args: str) -> dict:
    """A stdio server run by this Python; PYTHONPATH passes so that the test's sources are found."""
    return {"command": sys.executable, "args": list(args),
            "env": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}}


TIME = py_server("-m", "mcp_server_time", "--local-timezone", "UTC")


def write_servers(path: Path, servers: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def user_file(home_dir: Path) -> Path:
    return home_dir.parent / "home" / ".config" / "bantam" / "mcp.json"


def offered(request) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


def tool_message(request) -> str:
    return request.body["messages"][-1]["content"]


def started_once(home: Path) -> None:
    """`bantam mcp list` starts every configured server and waits for it, which leaves its tools
    cached: a run after it offers them with its first request (a server never seen before offers
    its tools only once it has started, and the scripted model calls them at once)."""
    r = run_bantam("mcp", "list", cwd=home)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def hub_closed():
    """In-process tests share the process's hub: stop its servers after each test."""
    yield
    from bantam import mcp
    hub_module = sys.modules.get("bantam.mcp.hub")
    if hub_module is not None and hub_module._hub is not None:
        hub_module._hub.close()
    mcp._told.clear()  # each test sees its own notices


# --- a one-shot run with the user's servers ------------------------------------------------

def test_user_server_tools_are_offered_and_called(home):
    write_servers(user_file(home), {"time": TIME})
    args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    started_once(home)
    with FakeServer([tool_reply("time__convert_time", args), text_reply("21:00 in Tokyo")]) as s:
        write_cfg(home, **base_cfg(s))
        r = run_bantam("-p", "noon UTC in Tokyo?", cwd=home)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "21:00 in Tokyo\n"
        first, second = s.chat_requests()
    tools = {t["function"]["name"]: t["function"] for t in first.body["tools"]}
    assert {"shell_exec", "time__get_current_time", "time__convert_time"} <= set(tools)
    assert tools["time__convert_time"]["parameters"]["required"] == ["source_timezone", "time", "target_timezone"]
    assert "[MCP server time]" in tools["time__convert_time"]["description"]
    result = json.loads(tool_message(second))
    assert result["target"]["datetime"].endswith("21:00:00+09:00")
    assert result["time_difference"] == "+9.0h"


def test_an_error_result_reaches_the_model_and_the_run_goes_on(home):
    write_servers(user_file(home), {"time": TIME})
    started_once(home)
    with FakeServer([tool_reply("time__get_current_time", {"timezone": "Mars/Olympus"}),
                     text_reply("no such zone")]) as s:
        write_cfg(home, **base_cfg(s))
        r = run_bantam("-p", "time on Mars?", cwd=home)
        assert r.returncode == 0, r.stderr
        content = tool_message(s.chat_requests()[1])
    assert content.startswith("error:") and "Mars/Olympus" in content


SILENT = "import os, sys, time; open(sys.argv[1], 'w').write('up'); time.sleep(3600)"  # runs, never speaks


def test_a_silent_server_holds_up_neither_the_first_request_nor_the_end_of_the_run(home):
    """A server whose process runs but never answers the handshake: the first request goes out
    without it and with the other server's tools, those tools work, the run ends at the end of
    its turn (not at the start's 30 s timeout), and nothing but the answer and usage is written."""
    marker = home / "silent-up"
    write_servers(user_file(home), {"time": TIME})
    started_once(home)  # the time server's tools are cached; the silent one was never seen
    write_servers(user_file(home), {"time": TIME, "silent": py_server("-c", SILENT, str(marker))})
    with FakeServer([tool_reply("time__get_current_time", {"timezone": "UTC"}), text_reply("done")]) as s:
        write_cfg(home, **base_cfg(s))
        r = run_bantam("-p", "what time is it?", cwd=home)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "done\n"
        first, second = s.chat_requests()
    assert {"time__get_current_time", "shell_exec"} <= set(offered(first))
    assert not any(name.startswith("silent__") for name in offered(first) + offered(second))
    assert '"timezone": "UTC"' in tool_message(second)
    assert marker.exists()  # it did start, and was never answered
    assert "no answer within" not in r.stderr and "never retrieved" not in r.stderr
    assert "Traceback" not in r.stderr and "silent" not in r.stderr, r.stderr
    assert all(wait_gone(pid) for pid in server_pids(marker)), "the silent server outlived the run"


def test_mcp_false_starts_nothing(home):
    write_servers(user_file(home), {"time": TIME})
    with FakeServer([text_reply("ok")]) as s:
        write_cfg(home, **base_cfg(s), mcp="false")
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 0, r.stderr
        assert not any("__" in name for name in offered(s.chat_requests()[0]))


def test_a_bad_mcp_file_is_one_line_naming_it(home):
    user_file(home).parent.mkdir(parents=True)
    user_file(home).write_text('{"mcpServers": {"x": {"args": []}}}')
    r = run_bantam("-p", "hi", cwd=home, env={"LLM_URL": "http://127.0.0.1:9/v1"})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"bantam: {user_file(home)}: mcpServers.x: give either \"command\" (stdio) or \"url\" (Streamable HTTP)"]


def test_no_mcp_file_imports_no_sdk(home):
    code = ("import sys; from bantam.config import load; from bantam.tools import ToolContext, make_toolbox; "
            "make_toolbox(('shell_exec',), ToolContext(load())); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types') or m == 'bantam.mcp.hub'))")
    r = subprocess.run([sys.executable, "-c", code], check=False, cwd=home, capture_output=True, text=True,
                       env={**os.environ, "LLM_URL": "http://127.0.0.1:9/v1"})
    assert r.stdout.strip() == "[]", r.stderr


# --- a project's .mcp.json and trust ---------------------------------------------------------

def git_repo(path: Path) -> Path:
    path.mkdir()
    for cmd in (["git", "init", "-q", "-b", "trunk"], ["git", "config", "user.email", "t@e"],
                ["git", "config", "user.name", "T"]):
        subprocess.run(cmd, cwd=path, check=True)
    (path / "a.txt").write_text("one\n")
    return path


def test_project_servers_start_only_once_trusted(home):
    repo = git_repo(home / "repo")
    write_servers(home / ".mcp.json", {"git": py_server("-m", "mcp_server_git", "--repository", str(repo))})
    with FakeServer([text_reply("ok"), tool_reply("git__git_status", {"repo_path": str(repo)}),
                     text_reply("clean?"), text_reply("ok")]) as s:
        write_cfg(home, **base_cfg(s))
        before = run_bantam("-p", "status?", cwd=home)
        assert before.returncode == 0, before.stderr
        notices = [line for line in before.stderr.splitlines() if ".mcp.json" in line]
        assert len(notices) == 1 and "bantam trust" in notices[0] and "(git)" in notices[0]
        assert not any(n.startswith("git__") for n in offered(s.chat_requests()[0]))

        trusted = run_bantam("mcp", "trust", cwd=home)
        assert trusted.returncode == 0 and "trusted git" in trusted.stdout
        started_once(home)
        after = run_bantam("-p", "status?", cwd=home)
        assert after.returncode == 0, after.stderr
        assert "not trusted" not in after.stderr
        assert "git__git_status" in offered(s.chat_requests()[1])
        assert "On branch trunk" in tool_message(s.chat_requests()[2])
        assert "a.txt" in tool_message(s.chat_requests()[2])

        (home / ".mcp.json").write_text((home / ".mcp.json").read_text() + "\n")  # an edit asks again
        edited = run_bantam("-p", "status?", cwd=home)
        assert "bantam trust" in edited.stderr
        assert not any(n.startswith("git__") for n in offered(s.chat_requests()[3]))


def test_mcp_list_shows_state_and_tools(home):
    write_servers(user_file(home), {"time": TIME, "gone": {"command": "/nonexistent/mcp-server"}})
    write_servers(home / ".mcp.json", {"proj": TIME})
    r = run_bantam("mcp", "list", cwd=home)
    assert r.returncode == 0, r.stderr
    assert "time  [ready]" in r.stdout and "    time__convert_time" in r.stdout
    assert "gone  [failed: could not start: /nonexistent/mcp-server: command not found]" in r.stdout
    assert "proj  [not trusted: run `bantam trust`]" in r.stdout


# --- the npm reference server: text, images, resources ---------------------------------------

@pytest.mark.skipif(not (EVERYTHING.is_file() and shutil.which("node")),
                    reason="npm install --prefix tests/node @modelcontextprotocol/server-everything")
def test_everything_server_text_image_and_resource(home):
    write_servers(user_file(home), {"ev": {"command": "node", "args": [str(EVERYTHING)]}})
    started_once(home)
    with FakeServer([tool_reply("ev__echo", {"message": "hello there"}),
                     tool_reply("ev__get-tiny-image", {}),
                     text_reply("a tiny MCP logo"),  # the side request that looks at the image
                     tool_reply("ev__get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
                     tool_reply("ev__get-env", {}),
                     text_reply("done")]) as s:
        write_cfg(home, **base_cfg(s))
        r = run_bantam("-p", "try the tools", cwd=home, env={"OPENAI_API_KEY": "sk-not-for-servers"})
        assert r.returncode == 0, r.stderr
        requests = s.chat_requests()
    assert tool_message(requests[1]) == "Echo: hello there"
    side = requests[2].body["messages"][0]["content"]
    assert side[1]["image_url"]["url"].startswith("data:image/png;base64," + TINY_PNG)
    assert "[image: image/png] a tiny MCP logo" in tool_message(requests[3])
    assert "\n[resource demo://resource/dynamic/text/2]\nResource 2: This is a plaintext resource" in \
        tool_message(requests[4])
    env = tool_message(requests[5])  # the server's own environment: no key of bantam's
    assert '"PATH"' in env and "OPENAI_API_KEY" not in env and "sk-not-for-servers" not in env


# --- servers that fail: in this process, through the Toolbox the loop uses -------------------

def toolbox(home: Path, servers: dict, **cfg):
    from bantam import session
    write_servers(user_file(home), servers)
    events = []
    front = session.FrontEnd(on_event=events.append, with_model=False, tools=("shell_exec",))
    box = session.build(session.load_config(cfg, home), home, front).toolbox  # the builder adds the MCP tools
    return box, events


def has_tools(box, *names: str) -> None:
    """Wait until the servers' starts have put these tools in the toolbox (servers never seen
    before are not waited for when it is built)."""
    wait_for(lambda: set(names) <= set(box.tools), f"the tools {names}")


def fake(kind: str, pidfile: Path | None = None, **extra) -> dict:
    args = ["-m", "tests.fakes.mcp_servers", kind, *([str(pidfile)] if pidfile else [])]
    return {**py_server(*args), "cwd": str(ROOT), **extra}


def server_pids(marker: Path) -> set[int]:
    """The pids, as this test sees them, of the server processes whose arguments name `marker`
    (the server's own pid file: unique to a test). A server runs in a pid namespace of its own
    (reaper.whole_tree), where the pid it writes is another number; bubblewrap, which starts it,
    names the marker too and is left out."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if str(marker).encode() in argv and not argv[0].endswith(b"bwrap"):
            found.add(int(entry.name))
    return found


def test_without_the_sdk_configured_servers_are_one_notice_not_an_error(home, hub_closed, monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # what `import mcp` does when it is not installed
    box, events = toolbox(home, {"time": TIME})
    assert [e.message for e in events] == [
        ("MCP servers (time) are configured, but the mcp package is not installed, so they were not "
         "started: pip install 'bantam[mcp]'")]
    assert list(box.tools) == ["shell_exec"]


def test_missing_server_is_a_notice_and_the_others_still_work(home, hub_closed):
    box, events = toolbox(home, {"gone": {"command": "/nonexistent/mcp-server"},
                                 "f": fake("tools", home / "pid")})
    has_tools(box, "f__echo")
    wait_for(lambda: events, "the notice")
    assert [e.message for e in events] == [
        "MCP server gone could not start: /nonexistent/mcp-server: command not found"]
    assert box.execute("f__echo", '{"text": "hi"}').content == "echo: hi"


def test_a_crash_mid_call_is_reported_and_the_server_restarts(home, hub_closed):
    pidfile = home / "pid"
    box, _ = toolbox(home, {"f": fake("tools", pidfile)})
    has_tools(box, "f__crash", "f__echo")
    first = server_pids(pidfile)
    out = box.execute("f__crash", "{}")
    assert out.is_error
    assert "MCP server f closed the connection (crashed or exited)" in out.content
    assert "restarted on the next call" in out.content
    assert box.execute("f__echo", '{"text": "again"}').content == "echo: again"
    assert server_pids(pidfile) - first


def test_a_hanging_server_times_out_and_restarts(home, hub_closed):
    pidfile = home / "pid"
    box, _ = toolbox(home, {"f": fake("tools", pidfile, timeout=2)})
    has_tools(box, "f__hang", "f__echo")
    hung = server_pids(pidfile)
    out = box.execute("f__hang", "{}")
    assert out.is_error and "MCP server f no answer within 2s" in out.content
    assert all(wait_gone(pid) for pid in hung), "the hung server was left running"
    assert box.execute("f__echo", '{"text": "back"}').content == "echo: back"


def test_invalid_json_rpc_is_reported_without_waiting_for_the_timeout(home, hub_closed):
    box, _ = toolbox(home, {"g": fake("garbage", timeout=600)})
    has_tools(box, "g__answer")
    started = time.monotonic()
    out = box.execute("g__answer", "{}")
    assert out.is_error and "sent a line that is not JSON-RPC" in out.content
    assert time.monotonic() - started < 300  # long before the 600 s timeout


def test_a_tool_list_change_is_picked_up(home, hub_closed):
    box, _ = toolbox(home, {"f": fake("tools", home / "pid")})
    has_tools(box, "f__grow")
    assert "f__extra" not in box.tools
    assert box.execute("f__grow", "{}").content == "grown"
    deadline = time.monotonic() + 30
    while "f__extra" not in box.tools and time.monotonic() < deadline:
        time.sleep(0.05)
    assert box.execute("f__extra", "{}").content == "extra here"


def test_a_tool_list_change_from_an_older_server_is_picked_up(home, hub_closed):
    box, _ = toolbox(home, {"old": fake("legacy")})
    has_tools(box, "old__grow")
    assert "old__extra" not in box.tools
    assert box.execute("old__grow", "{}").content == "grow done"
    deadline = time.monotonic() + 30
    while "old__extra" not in box.tools and time.monotonic() < deadline:
        time.sleep(0.05)
    assert box.execute("old__extra", "{}").content == "extra done"


def test_streamable_http_server_with_headers(home, hub_closed):
    from tests.fakes.mcp_servers import serve_http
    ready: list = []
    thread = threading.Thread(target=serve_http, args=(ready,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (ready and ready[0][1].started) and time.monotonic() < deadline:
        time.sleep(0.05)
    url, runner = ready[0]
    try:
        box, events = toolbox(home, {"web": {"url": url, "headers": {"X-Token": "t0k"}},
                                     "nokey": {"url": url}})
        has_tools(box, "web__echo")
        wait_for(lambda: events, "the notice")
        assert len(events) == 1 and events[0].message.startswith("MCP server nokey ")
        assert "401" in events[0].message
        assert box.execute("web__echo", '{"text": "over http"}').content == "echo: over http"
    finally:
        runner.should_exit = True
        thread.join(30)


def wait_gone(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_servers_die_with_bantam_even_when_it_is_killed(home):
    pidfile = home / "pid"
    write_servers(user_file(home), {"f": fake("tools", pidfile)})
    started_once(home)
    with FakeServer([tool_reply("f__hang", {}), text_reply("never")]) as s:
        write_cfg(home, **base_cfg(s))
        proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", "hang"], cwd=home,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while len(s.chat_requests()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        running = wait_for(lambda: server_pids(pidfile), "the server's start for the call")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert all(wait_gone(pid) for pid in running), "the MCP server outlived a SIGKILLed bantam"


# --- bantam as an MCP server ------------------------------------------------------------------

def test_bantam_mcp_serves_run_task_with_progress_and_its_tools(home):
    import anyio
    from mcp import Client, StdioServerParameters

    async def session(url: str):
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "bantam", "mcp", "--endpoint", url, "--model", "m"],
            env={"HOME": os.environ["HOME"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, cwd=str(home))
        progress: list = []

        async def on_progress(value, total, message):
            progress.append((value, message))
        async with Client(params, read_timeout_seconds=120) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            shell = await client.call_tool("shell_exec", {"command": "echo direct"})
            task = await client.call_tool("run_task", {"task": "make hello.txt", "checks": ["hello.txt exists"]},
                                          progress_callback=on_progress)
        return names, shell, task, progress

    with FakeServer([tool_reply("write_file", {"path": "hello.txt", "content": "hi\n"}),
                     text_reply("wrote it\nSTATUS: success")]) as s:
        write_cfg(home, **base_cfg(s))
        names, shell, task, progress = anyio.run(session, s.url)
    assert {"run_task", "shell_exec", "write_file"} <= set(names)
    assert shell.content[0].text == "direct\n\n\nexit: 0"
    result = task.structured_content
    assert result["status"] == "success" and result["output"] == "wrote it"
    assert result["steps_taken"] == 2 and result["tool_calls"] == 1 and result["unmet_checks"] == []
    assert progress == [(1.0, "step 1: write_file")]
    assert (home / "hello.txt").read_text() == "hi\n"


def test_run_task_is_a_session_whose_agent_may_delegate(home):
    """run_task's agent is a session as `bantam -p`'s is, not a sub-agent: spawn_agent runs a
    child for it (a sub-agent's would be refused)."""
    from tests.mcp.test_mcp_budget import run_tasks
    with FakeServer([tool_reply("spawn_agent", {"task": "count to two"}), text_reply("one two\nSTATUS: success"),
                     text_reply("counted\nSTATUS: success")]) as s:
        write_cfg(home, **base_cfg(s, tools="shell_exec,spawn_agent"))
        (done,) = run_tasks(home, s.url, {"task": "have someone count"})
        requests = s.chat_requests()
    result = done.structured_content
    assert result["status"] == "success" and result["output"] == "counted" and result["tool_calls"] == 1, result
    child = json.loads([m for m in requests[2].body["messages"] if m["role"] == "tool"][0]["content"])
    assert child["status"] == "success" and child["output"] == "one two", child
    assert requests[1].body["messages"][-1]["content"] == "count to two"


# --- the terminal asks, and /mcp shows --------------------------------------------------------

def test_terminal_asks_before_a_project_server_starts_and_mcp_lists_it(home):
    from tests.test_repl import Term
    write_servers(home / ".mcp.json", {"time": TIME})
    with FakeServer([tool_reply("time__get_current_time", {"timezone": "UTC"}), text_reply("it is now")]) as s:
        write_cfg(home, **base_cfg(s))
        # wide: the line names the file by its full path, which is longer under `pytest -n` (the
        # worker's own temp folder) and would wrap in the middle of the words expected
        term = Term(home, width=250)
        term.child.timeout = 60
        term.expect("wants to start these MCP servers:")
        term.expect("Trust this project's files as they are now? [y/N]")
        term.child.send("y\r")
        for _ in range(240):  # the server starts in the background: /mcp until it says ready
            term.enter("/mcp")
            if term.child.expect([r"time  \[ready\]", r"time  \[(starting|not started)\]"]) == 0:
                break
            time.sleep(0.25)
        term.expect("    time__get_current_time")
        term.enter("what time is it?")
        term.expect("it is now")
        assert term.quit() == 0
        assert '"timezone": "UTC"' in tool_message(s.chat_requests()[1])
    from bantam.mcp.servers import is_trusted
    assert is_trusted(home / ".mcp.json")


def test_ctrl_c_stops_a_hanging_mcp_call_and_the_server_still_answers(home):
    from tests.test_repl import Term
    write_servers(user_file(home), {"f": fake("tools", home / "pid")})
    started_once(home)
    with FakeServer([tool_reply("f__hang", {}), tool_reply("f__echo", {"text": "still here"}),
                     text_reply("it answered")]) as s:
        write_cfg(home, **base_cfg(s))
        term = Term(home)
        term.child.timeout = 60
        term.enter("wait for it")
        term.expect("[tool call: f__hang")
        term.child.sendintr()
        term.expect("interrupted")
        term.enter("try again")
        term.expect("it answered")
        assert term.quit() == 0
        assert tool_message(s.chat_requests()[2]) == "echo: still here"


def test_the_daemon_offers_the_users_mcp_tools(home, hub_closed):
    from bantam.daemon.agent import Agent
    from bantam.daemon.runner import prepare
    from tests.daemon.test_daemon import FAST
    write_servers(user_file(home), {"time": TIME})
    with FakeServer() as s:
        (home / "agent").mkdir()
        (home / "agent" / "config.json").write_text(json.dumps({**FAST, "api_base": s.url}))
        ready = prepare(home / "agent", {})
        agent = Agent(ready.agent, ready.settings, ready.cfg)
    has_tools(agent.toolbox, "BASH", "time__convert_time")
    out = agent.toolbox.execute("time__convert_time", json.dumps(
        {"source_timezone": "UTC", "time": "08:00", "target_timezone": "Asia/Kolkata"}))
    assert json.loads(out.content)["target"]["datetime"].endswith("13:30:00+05:30")


def web_listing(web, nth: int) -> str:
    """The `nth` listing of the time server in the browser view's event log."""
    seen = []

    def listing(event: dict) -> bool:
        if event["type"] == "output" and "time  [" in event["text"]:
            seen.append(event["text"])
        return len(seen) == nth
    web.events_until(listing, timeout=60)
    return seen[-1]


def test_the_browser_view_says_how_to_trust_and_mcp_trust_starts_them(home):
    pytest.importorskip("starlette")
    from tests.web.test_web import WebServer
    write_servers(home / ".mcp.json", {"time": TIME})
    with FakeServer([tool_reply("time__get_current_time", {"timezone": "UTC"}), text_reply("now")]) as s:
        write_cfg(home, **base_cfg(s))
        web = WebServer(home)
        try:
            web.events_until(lambda e: "`/mcp trust` (or `bantam trust`) trusts them" in e.get("message", ""))
            web.send("/mcp trust")
            listed = web_listing(web, 1)  # what trusting prints; the server starts in the background
            for times in range(2, 240):  # then /mcp until it says ready
                if "time  [ready]" in listed:
                    break
                time.sleep(0.25)
                web.send("/mcp")
                listed = web_listing(web, times)
            assert "time  [ready]" in listed and "    time__get_current_time" in listed
            web.idle(60)
            web.send("what time is it?")
            web.idle(60)
        finally:
            web.close()
        assert '"timezone": "UTC"' in tool_message(s.chat_requests()[1])


def test_variables_in_a_server_entry_are_expanded(home, monkeypatch):
    from bantam.config import ConfigError
    from bantam.mcp.servers import read_specs
    monkeypatch.setenv("MY_TOKEN", "tok-1")
    path = write_servers(home / "m.json", {"h": {"url": "http://127.0.0.1:${PORT:-8000}/mcp",
                                                 "headers": {"Authorization": "Bearer ${MY_TOKEN}"}}})
    spec = read_specs(path)["h"]
    assert spec.url == "http://127.0.0.1:8000/mcp" and spec.headers == {"Authorization": "Bearer tok-1"}
    write_servers(path, {"s": {"command": "x", "env": {"KEY": "${NOT_SET_HERE}"}}})
    with pytest.raises(ConfigError) as e:
        read_specs(path)
    assert str(e.value) == (f"{path}: mcpServers.s.env.KEY: ${{NOT_SET_HERE}} is not set "
                            "(give it a default: ${NOT_SET_HERE:-...})")


def test_a_schema_listing_several_types_is_accepted():
    from bantam.tools import check_args
    schema = {"type": "object", "properties": {"when": {"type": ["string", "null"]}, "n": {"type": "integer"}}}
    args = {"when": "now", "n": "3"}
    check_args(schema, args)
    assert args == {"when": "now", "n": 3}


def test_a_cancelled_run_task_stops_the_agents_command(home):
    import anyio
    from mcp import Client, StdioServerParameters
    pidfile = home / "sleeper.pid"

    async def session(url: str) -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "bantam", "mcp", "--endpoint", url, "--model", "m"],
            env={"HOME": os.environ["HOME"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, cwd=str(home))
        async with Client(params, read_timeout_seconds=120) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "run_task", {"task": "sleep a while"})
                with anyio.fail_after(60):
                    while not pidfile.exists() or not pidfile.read_text().strip():
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()  # the client gives up on the request
            assert wait_gone(int(pidfile.read_text()))

    with FakeServer([tool_reply("shell_exec", {"command": f"echo $$ > {pidfile}; exec sleep 600"}),
                     text_reply("never")]) as s:
        write_cfg(home, **base_cfg(s), sandbox="off")  # $$ must be a host pid (in the sandbox it is 2)
        anyio.run(session, s.url)


TITLE, CLEAR, UP_AND_ERASE, CSI_C1 = "\x1b]0;evil\x07", "\x1b[2J", "\x1b[1A\x1b[2K", "\x9b2J"


def _no_escape_reaches(r: subprocess.CompletedProcess) -> None:
    for stream in (r.stdout, r.stderr):
        assert not any(c in stream for c in "\x1b\x07\x9b"), stream


def test_escape_sequences_in_a_projects_mcp_json_are_shown_not_obeyed(home):
    """What a project's .mcp.json would run is what the user reads before trusting it, so escape
    sequences in it (a window title, a screen clear, a cursor moved up over the line before, a
    newline faking a line of its own) must not redraw it: every listing shows them as text."""
    evil = {"command": "python3" + TITLE, "args": ["-c", "pass" + CLEAR, UP_AND_ERASE + "echo harmless",
                                                  "x\n  time: harmless"],
            "env": {"NOTE" + CSI_C1: CLEAR}, "cwd": "." + UP_AND_ERASE}
    time_server = {**TIME, "env": {**TIME["env"], "NOTE" + CLEAR: TITLE}}
    write_servers(home / ".mcp.json", {"evil": evil, "time": time_server})
    listed = run_bantam("mcp", "list", cwd=home)
    trusted = run_bantam("trust", cwd=home)
    store = run_bantam("trust", "list", cwd=home)
    started = run_bantam("mcp", "list", cwd=home, timeout=120)
    for r in (listed, trusted, store, started):
        assert "Traceback" not in r.stderr, r.stderr
        _no_escape_reaches(r)
    for r in (listed, trusted, started):
        assert r"python3\x1b]0;evil\x07 -c pass\x1b[2J \x1b[1A\x1b[2Kecho harmless x\n  time: harmless" in r.stdout
        assert r"env.NOTE\x9b2J=\x1b[2J" in r.stdout and r"env.NOTE\x1b[2J=\x1b]0;evil\x07" in r.stdout
        assert not any(line.startswith("  time: harmless") for line in r.stdout.splitlines()), r.stdout
    assert "time  [ready]" in started.stdout and "    time__get_current_time" in started.stdout
