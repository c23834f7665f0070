"""`bantam acp` driven as a real subprocess by a client nobody here wrote: the client side of the
`agent-client-protocol` SDK (ClientSideConnection via spawn_agent_process), against the fake
model server. Two tests speak raw lines instead, because what they check (a malformed line,
every byte on stdout) is below what an SDK lets one write or see."""
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import process_gone
from tests.fakes.openai_server import FakeServer, chunk, sse, text_reply, tool_reply, usage

acp = pytest.importorskip("acp")
from acp import RequestError, spawn_agent_process, text_block  # noqa: E402
from acp.schema import AllowedOutcome, RequestPermissionResponse  # noqa: E402


class Editor:
    """The editor's side: records every update, answers permission questions from a script."""

    def __init__(self, answers=()):
        self.updates: list[tuple[str, object]] = []
        self.answers = list(answers)
        self.asked: list[object] = []

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append((session_id, update))

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        self.asked.append((tool_call, [o.option_id for o in options]))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answers.pop(0)))

    def of(self, session_id, kind):
        return [u for s, u in self.updates if s == session_id and u.session_update == kind]

    def said(self, session_id):
        return "".join(u.content.text for u in self.of(session_id, "agent_message_chunk"))


def agent_args(server, *extra):
    return (sys.executable, "-m", "bantam", "acp", "--endpoint", server.url, "--model", "test-model",
            "--set", "retry_delays=0,0,0", *extra)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def session(editor, server, tmp_path, *extra):
    """Start the agent; the caller enters the returned context manager."""
    stderr = open(tmp_path / "agent.stderr", "ab")
    return spawn_agent_process(editor, *agent_args(server, *extra), env=dict(os.environ),
                               transport_kwargs={"stderr": stderr})


def test_initialize_and_a_streamed_answer_with_reasoning(home, server):
    server.add(sse([chunk(reasoning="let me think"), chunk("Hel"), chunk("lo"), chunk(finish="stop"),
                    chunk(usage=usage(), no_choices=True)]))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            init = await conn.initialize(protocol_version=1)
            assert init.protocol_version == 1
            assert init.agent_info.name == "bantam"
            assert init.agent_capabilities.load_session is True
            assert init.agent_capabilities.prompt_capabilities.embedded_context is True
            new = await conn.new_session(cwd=str(home), mcp_servers=[])
            assert new.modes.current_mode_id == "workspace"
            assert {m.id for m in new.modes.available_modes} == {"ask", "read-only", "workspace", "plan", "off"}
            done = await conn.prompt(session_id=new.session_id, prompt=[text_block("hi")])
            return new.session_id, done
    sid, done = run(go())
    assert done.stop_reason == "end_turn"
    assert editor.said(sid) == "Hello"
    assert [u.content.text for u in editor.of(sid, "agent_thought_chunk")] == ["let me think"]
    commands = editor.of(sid, "available_commands_update")[0].available_commands
    assert {"compact", "clear", "model"} <= {c.name for c in commands}
    assert server.chat_requests()[0].body["messages"][-1]["content"] == "hi"


class ByConversation(FakeServer):
    """Two sessions at once: each conversation gets `pwd` first, then an answer."""

    def next_response(self, body=None):
        last = (body or {}).get("messages", [{}])[-1]
        return text_reply("done") if last.get("role") == "tool" else tool_reply("shell_exec", {"command": "pwd"})


def test_two_sessions_in_two_folders_run_commands_in_their_own_folder(home, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    editor = Editor()
    with ByConversation() as server:
        async def go():
            async with await session(editor, server, tmp_path) as (conn, proc):
                await conn.initialize(protocol_version=1)
                a = (await conn.new_session(cwd=str(one), mcp_servers=[])).session_id
                b = (await conn.new_session(cwd=str(two), mcp_servers=[])).session_id
                results = await asyncio.gather(conn.prompt(session_id=a, prompt=[text_block("where?")]),
                                               conn.prompt(session_id=b, prompt=[text_block("where?")]))
                return a, b, results
        a, b, results = run(go())
    assert [r.stop_reason for r in results] == ["end_turn", "end_turn"]
    for sid, folder in ((a, one), (b, two)):
        call = editor.of(sid, "tool_call")[0]
        assert (call.kind, call.status, call.title, call.raw_input) == ("execute", "in_progress", "pwd",
                                                                       {"command": "pwd"})
        # the last one sent; the SDK may record an earlier one (the output as it came) after it
        [result] = [u for u in editor.of(sid, "tool_call_update") if u.status == "completed"]
        assert result.tool_call_id == call.tool_call_id
        assert result.content[0].content.text.splitlines()[0] == str(folder.resolve())


def test_permission_rejected_then_allowed_and_the_edit_comes_with_its_diff(home, server):
    target = home / "notes.txt"
    target.write_text("old\n")
    write = {"path": "notes.txt", "content": "new\n"}
    server.add(tool_reply("write_file", write), text_reply("declined"),
               tool_reply("write_file", write, call_id="call_2"), text_reply("written"))
    editor = Editor(answers=["reject_once", "allow_once"])

    async def go():
        async with await session(editor, server, home.parent, "--set", "approval=always") as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            first = await conn.prompt(session_id=sid, prompt=[text_block("write it")])
            kept = target.read_text()
            second = await conn.prompt(session_id=sid, prompt=[text_block("write it, please")])
            return sid, first, kept, second
    sid, first, kept, second = run(go())
    assert kept == "old\n"  # rejected: nothing happened
    assert target.read_text() == "new\n"  # allowed: it happened
    assert (first.stop_reason, second.stop_reason) == ("end_turn", "end_turn")
    assert [options for _, options in editor.asked] == [["allow_once", "allow_always", "reject_once"]] * 2
    rejected, allowed = [u for u in editor.of(sid, "tool_call_update") if u.status in ("completed", "failed")]
    assert rejected.status == "failed" and "declined" in rejected.content[-1].content.text
    diff = allowed.content[0]
    assert (diff.type, diff.path, diff.old_text, diff.new_text) == ("diff", str(target), "old\n", "new\n")
    call = [u for u in editor.of(sid, "tool_call")][-1]
    assert call.kind == "edit" and call.locations[0].path == str(target)


def test_cancel_kills_the_running_command_and_the_session_goes_on(home, server):
    server.add(tool_reply("shell_exec", {"command": "sleep 60 & echo $! > sleep.pid; wait"}),
               text_reply("still here"))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="off")  # the pid is this machine's
            turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("wait a minute")]))
            pid_file = home / "sleep.pid"
            deadline = time.monotonic() + 60
            while not (pid_file.exists() and pid_file.read_text().strip()):
                assert time.monotonic() < deadline, "the command never started"
                await asyncio.sleep(0.05)
            with pytest.raises(RequestError):  # one prompt at a time
                await conn.prompt(session_id=sid, prompt=[text_block("and this?")])
            # a mode chosen meanwhile builds the next turn's configuration; Stop still stops this one
            await conn.set_session_mode(session_id=sid, mode_id="off")
            await conn.cancel(session_id=sid)
            cancelled = await turn
            after = await conn.prompt(session_id=sid, prompt=[text_block("are you there?")])
            return sid, int(pid_file.read_text()), cancelled, after
    sid, pid, cancelled, after = run(go())
    assert cancelled.stop_reason == "cancelled"
    assert process_gone(pid), "the cancelled command's sleep is still running"
    assert after.stop_reason == "end_turn" and editor.said(sid).endswith("still here")
    # the interrupted step was dropped: the next request holds no half-finished tool call, and
    # the cancelled prompt is closed as unanswered (not continued by the next one)
    last = server.chat_requests()[-1].body["messages"]
    assert [m["role"] for m in last[1:]] == ["user", "assistant", "user"]
    assert last[2]["content"] == "[no answer: the user interrupted this request]"


def test_a_saved_session_is_replayed_and_continued_by_a_new_process(home, server):
    server.add(text_reply("hi there"), text_reply("again"))
    first, second = Editor(), Editor()

    async def start():
        async with await session(first, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("hello")])
            return sid

    async def resume(sid):
        async with await session(second, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(home), session_id=sid, mcp_servers=[])
            return await conn.prompt(session_id=sid, prompt=[text_block("more")])
    sid = run(start())
    assert (Path(os.environ["HOME"]) / ".bantam" / "sessions" / f"{sid}.jsonl").is_file()
    done = run(resume(sid))
    assert [u.content.text for u in second.of(sid, "user_message_chunk")] == ["hello"]
    assert second.said(sid).startswith("hi there")
    assert done.stop_reason == "end_turn"
    roles = [(m["role"], m["content"]) for m in server.chat_requests()[-1].body["messages"][1:]]
    assert roles == [("user", "hello"), ("assistant", "hi there"), ("user", "more")]


def test_a_bad_line_and_bad_requests_get_json_rpc_errors_and_stdout_is_only_json(home, server):
    """Raw lines: a malformed one, protocol errors, and a model's command writing to the agent's
    own stdout (/proc/PID/fd/1), which must land on stderr, never in the protocol stream."""
    server.add(tool_reply("shell_exec", {"command": "echo LEAKED > /proc/$PPID/fd/1"}), text_reply("ok"))
    proc = subprocess.Popen(agent_args(server, "--set", "sandbox=off", "--set", "approval=never"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=home)

    def ask(ident, method, params):
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
                          + "\n").encode())
        proc.stdin.flush()
        while True:
            message = json.loads(proc.stdout.readline())  # every line must parse
            seen.append(message)
            if message.get("id") == ident and "method" not in message:
                return message

    seen: list[dict] = []
    try:
        proc.stdin.write(b"this is not json\n")
        assert ask(1, "initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
        assert seen[0]["error"]["code"] == -32700 and seen[0]["id"] is None
        assert ask(2, "no/such_method", {})["error"]["code"] == -32601
        assert ask(3, "session/new", {"cwd": "relative/dir", "mcpServers": []})["error"]["code"] == -32602
        assert ask(4, "session/prompt", {"sessionId": "nope", "prompt": []})["error"]["code"] == -32002
        sid = ask(5, "session/new", {"cwd": str(home), "mcpServers": []})["result"]["sessionId"]
        done = ask(6, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
        assert done["result"]["stopReason"] == "end_turn"
    finally:
        proc.stdin.close()  # the client leaves: the agent ends
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=60)
    assert all(json.loads(line) for line in out.splitlines())
    assert b"LEAKED" not in out and b"LEAKED" in err
    assert proc.returncode == 0


def test_requests_read_before_the_client_closes_its_end_are_all_answered(home, server):
    """An editor (or a script) sends its requests and closes stdin at once: session/new, slower
    than the rest, is answered all the same before the agent exits."""
    requests = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
                {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(home), "mcpServers": []}},
                {"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {}}]
    done = subprocess.run(agent_args(server), input="".join(json.dumps(r) + "\n" for r in requests).encode(),
                          capture_output=True, cwd=home, timeout=120)
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines()) if "method" not in m}
    assert sorted(answers) == [1, 2, 3], done.stderr.decode()[-2000:]
    assert answers[2]["result"]["sessionId"].startswith("acp-")
    assert done.returncode == 0


def test_a_prompt_running_when_the_client_closes_is_answered_and_what_it_would_ask_is_not_run(home, server):
    """Closed stdin mid-turn: the turn still ends with its answer; the permission question it
    reaches cannot be answered any more, so the command it was about stays unrun."""
    server.add(tool_reply("shell_exec", {"command": "echo hi > asked.txt"}), text_reply("done"))
    proc = subprocess.Popen(agent_args(server), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=home)

    def send(ident, method, params, wait=True):
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
                          + "\n").encode())
        proc.stdin.flush()
        while wait:
            message = json.loads(proc.stdout.readline())
            if message.get("id") == ident and "method" not in message:
                return message["result"]
    try:
        sid = send(1, "session/new", {"cwd": str(home), "mcpServers": []})["sessionId"]
        send(2, "session/set_mode", {"sessionId": sid, "modeId": "ask"})  # every command asks first
        send(3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}, wait=False)
    finally:
        proc.stdin.close()
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=60)
    answers = {m["id"]: m for m in map(json.loads, out.splitlines()) if "method" not in m}
    assert answers[3]["result"]["stopReason"] == "end_turn", err.decode()[-2000:]
    assert not (home / "asked.txt").exists()
    assert proc.returncode == 0


def test_mcp_servers_from_the_editor_budgets_and_commands(home, server):
    """The editor's MCP server, never seen before, is started and waited for by session/new, so
    the first request offers its tools; a spent tool budget stops the turn as max_turn_requests;
    /clear empties the conversation without asking the model."""
    time_server = str(Path(sys.executable).with_name("mcp-server-time"))
    server.add(tool_reply("time__get_current_time", {"timezone": "UTC"}), text_reply("noon"),
               tool_reply("shell_exec", {"command": "true"}), tool_reply("shell_exec", {"command": "true"},
                                                                          call_id="call_2"))
    editor = Editor()
    from acp.schema import McpServerStdio

    async def go():
        async with await session(editor, server, home.parent, "--set", "tool_budget=1") as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[
                McpServerStdio(name="time", command=time_server, args=[], env=[])])).session_id
            timed = await conn.prompt(session_id=sid, prompt=[text_block("what time is it?")])
            spent = await conn.prompt(session_id=sid, prompt=[text_block("run twice")])
            cleared = await conn.prompt(session_id=sid, prompt=[text_block("/clear")])
            return sid, timed, spent, cleared
    sid, timed, spent, cleared = run(go())
    assert "time__get_current_time" in {t["function"]["name"] for t in server.chat_requests()[0].body["tools"]}
    result = editor.of(sid, "tool_call_update")[0]
    assert result.status == "completed" and "UTC" in result.content[-1].content.text
    assert (timed.stop_reason, spent.stop_reason, cleared.stop_reason) == ("end_turn", "max_turn_requests", "end_turn")
    assert "conversation cleared" in editor.said(sid)
    assert len(server.chat_requests()) == 4  # /clear asked no model


SILENT = "import sys, time; open(sys.argv[1], 'w').write('up'); time.sleep(3600)"  # runs, never speaks


@pytest.mark.slow  # the bound, then the silent server's stop at close: about 15 s
def test_session_new_waits_for_the_editors_new_servers_up_to_its_bound(home, server, monkeypatch):
    """In process, with the bound made short: session/new waits for the servers the editor names
    and bantam has never seen, so the toolbox it answers with holds their tools; a server that
    runs but never answers holds the answer up until the bound, no longer, and offers nothing. A
    server seen before is not waited for: its cached tools are offered at once."""
    pytest.importorskip("mcp")
    from bantam import mcp
    from bantam.acp import EditorAgent, conversation
    from bantam.acp.rpc import RpcLink
    bound = 8.0
    monkeypatch.setattr(conversation, "SERVERS_WAIT", bound)
    marker = home / "silent-up"
    servers = [{"name": "time", "command": str(Path(sys.executable).with_name("mcp-server-time")), "args": []},
               {"name": "silent", "command": sys.executable, "args": ["-c", SILENT, str(marker)]}]
    to_agent, from_client = os.pipe()
    to_client, from_agent = os.pipe()
    conn = RpcLink(to_agent, from_agent)
    agent = EditorAgent(conn, {"endpoint": server.url, "model": "test-model"})
    try:
        started = time.monotonic()
        answer = agent.new({"cwd": str(home), "mcpServers": servers})
        waited = time.monotonic() - started
        tools = set(agent.sessions[answer.result["sessionId"]].session.toolbox.tools)
        assert {"time__get_current_time", "time__convert_time"} <= tools
        assert not any(name.startswith("silent__") for name in tools)
        assert marker.exists()  # it did start, and was never answered
        assert bound <= waited < bound + 10, waited
        again = time.monotonic()  # a server seen before offers its cached tools: nothing waits
        second = agent.new({"cwd": str(home), "mcpServers": servers[:1]})
        assert time.monotonic() - again < 3
        assert "time__get_current_time" in agent.sessions[second.result["sessionId"]].session.toolbox.tools
    finally:
        hub = sys.modules.get("bantam.mcp.hub")
        if hub is not None and hub._hub is not None:
            hub._hub.close()  # the servers end with this test, not with the test process
        mcp._told.clear()
        conn.reader.close()
        for fd in (from_client, to_client, from_agent):
            os.close(fd)


def test_stop_reasons_say_a_cut_answer_a_cut_tool_call_and_a_refusal(home, server):
    # an answer cut at the user's max_tokens, a tool call cut at it (never run: OutputLimitReached),
    # and a model that declined: each turn ends with the stop reason the protocol names
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": '{"comm'}}
    server.add(sse([chunk("Half an ans"), chunk(finish="length")]),
               sse([chunk(tool_calls=[call]), chunk(finish="length")]),
               sse([chunk("I can't help with that."), chunk(finish="content_filter")]))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent, "--set", "max_tokens=20") as (conn, proc):
            await conn.initialize(protocol_version=1)
            new = await conn.new_session(cwd=str(home), mcp_servers=[])
            reasons = []
            for words in ("one", "two", "three"):
                done = await conn.prompt(session_id=new.session_id, prompt=[text_block(words)])
                reasons.append(done.stop_reason)
            return reasons
    assert run(go()) == ["max_tokens", "max_tokens", "refusal"]
    assert [r.body["max_tokens"] for r in server.chat_requests()] == [20, 20, 20]  # the user's limit kept


class BufferedEditor(Editor):
    """An editor that serves fs/read_text_file and fs/write_text_file from its buffers (the text
    it shows, unsaved changes included), never touching the disk itself."""

    def __init__(self, buffers, answers=()):
        super().__init__(answers)
        self.buffers = buffers
        self.fs: list[tuple[str, str]] = []

    async def read_text_file(self, path, session_id, limit=None, line=None, **kwargs):
        from acp.schema import ReadTextFileResponse
        self.fs.append(("read", path))
        if path not in self.buffers:
            raise RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(self, content, path, session_id, **kwargs):
        from acp.schema import WriteTextFileResponse
        self.fs.append(("write", path))
        self.buffers[path] = content
        return WriteTextFileResponse()


def test_file_tools_read_and_write_the_editors_buffers_after_bantams_own_checks(home, server):
    """With the client's fs capabilities, read_file sees the unsaved buffer, edit_file and
    write_file change the buffer (not the disk), a protected path is refused before the editor
    is asked, and a file in a folder that does not exist yet is written on the disk."""
    notes = home / "notes.txt"
    notes.write_text("on disk\n")
    (home / ".git").mkdir()
    editor = BufferedEditor({str(notes): "unsaved\n"}, answers=["reject_once"])
    server.add(tool_reply("read_file", {"path": "notes.txt"}),
               tool_reply("edit_file", {"path": "notes.txt", "old_string": "unsaved", "new_string": "edited"},
                          call_id="call_2"),
               tool_reply("write_file", {"path": ".git/config", "content": "[core]\n"}, call_id="call_3"),
               tool_reply("write_file", {"path": "new/deep.txt", "content": "fresh\n"}, call_id="call_4"),
               text_reply("done"))
    from acp.schema import ClientCapabilities, FileSystemCapabilities

    async def go():
        async with await session(editor, server, home.parent, "--set", "tools=shell_exec,write_file,read_file,edit_file"
                                 ) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True)))
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            return sid, await conn.prompt(session_id=sid, prompt=[text_block("tidy the notes")])
    sid, done = run(go())
    assert done.stop_reason == "end_turn"
    results = [m["content"] for m in server.chat_requests()[-1].body["messages"] if m["role"] == "tool"]
    assert "unsaved" in results[0] and "on disk" not in results[0]  # the buffer, not the disk
    assert editor.buffers[str(notes)] == "edited\n" and notes.read_text() == "on disk\n"
    assert "rejected" in results[2] and not (home / ".git" / "config").exists()
    assert "protected: .git" in editor.asked[0][0].title
    assert (home / "new" / "deep.txt").read_text() == "fresh\n"  # a new folder: made on the disk
    assert all(".git" not in path and "deep" not in path for _, path in editor.fs)
    edit = [u for u in editor.of(sid, "tool_call_update") if u.tool_call_id == "call_2"][0]
    assert (edit.content[0].old_text, edit.content[0].new_text) == ("unsaved\n", "edited\n")


def test_without_the_clients_fs_capabilities_files_stay_on_the_disk(home, server):
    notes = home / "notes.txt"
    notes.write_text("on disk\n")
    editor = BufferedEditor({str(notes): "unsaved\n"})
    server.add(tool_reply("write_file", {"path": "notes.txt", "content": "written\n"}), text_reply("done"))

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)  # no clientCapabilities: the disk
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            return await conn.prompt(session_id=sid, prompt=[text_block("write")])
    assert run(go()).stop_reason == "end_turn"
    assert notes.read_text() == "written\n" and editor.fs == []


def test_sub_agents_show_as_the_editors_plan(home, server):
    server.add(tool_reply("run_subagent", {"prompt": "count the files"}), text_reply("3 files"),
               text_reply("there are 3"))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            return sid, await conn.prompt(session_id=sid, prompt=[text_block("how many files?")])
    sid, done = run(go())
    assert done.stop_reason == "end_turn"
    plans = [[(e.content, e.status) for e in u.entries] for u in editor.of(sid, "plan")]
    assert plans == [[("count the files", "in_progress")], [("count the files", "completed")]]


def test_the_terminals_continue_picks_up_the_editors_session_in_that_folder(home, server):
    server.add(text_reply("hi from the editor"), text_reply("hi from the terminal"))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("hello")])
            return sid
    sid = run(go())
    from tests.conftest import run_bantam
    done = run_bantam("-c", "-p", "and now?", "--endpoint", server.url, "--model", "test-model", cwd=home)
    assert done.returncode == 0, done.stderr
    assert "hi from the terminal" in done.stdout
    sent = [(m["role"], m["content"]) for m in server.chat_requests()[-1].body["messages"][1:]]
    assert sent == [("user", "hello"), ("assistant", "hi from the editor"), ("user", "and now?")]
    saved = (Path(os.environ["HOME"]) / ".bantam" / "sessions" / f"{sid}.jsonl").read_text()
    assert "hi from the terminal" in saved  # the editor's session, continued and saved again


def test_a_line_over_the_message_limit_is_dropped_unread_and_the_connection_goes_on():
    # the transport itself, in process: a client's line is never held whole past the limit
    from bantam.acp.rpc import RpcLink
    to_agent, from_client = os.pipe()
    to_client, from_agent = os.pipe()
    conn = RpcLink(to_agent, from_agent, max_message=1000)
    served = threading.Thread(target=conn.serve, args=({"ping": lambda params: "pong"}, {}), daemon=True)
    served.start()
    with os.fdopen(from_client, "wb") as client, os.fdopen(to_client, "rb") as answers:
        client.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"y" * 5000 + b'"}}\n')
        client.write(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{}}\n')
        client.flush()
        dropped, answered = json.loads(answers.readline()), json.loads(answers.readline())
    served.join(timeout=60)
    assert dropped["id"] is None and "over 1000 bytes" in dropped["error"]["message"]
    assert answered == {"jsonrpc": "2.0", "id": 2, "result": "pong"}


def test_the_sessions_tmp_outlives_a_change_of_mode(home, server):
    """A mode makes a new session configuration, not a new session: its commands' /tmp is kept."""
    server.add(tool_reply("shell_exec", {"command": "echo kept-across-modes > /tmp/note.txt"}), text_reply("written"),
               tool_reply("shell_exec", {"command": "cat /tmp/note.txt"}), text_reply("read"))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="workspace")
            await conn.prompt(session_id=sid, prompt=[text_block("write a note in /tmp")])
            await conn.set_session_mode(session_id=sid, mode_id="read-only")
            return await conn.prompt(session_id=sid, prompt=[text_block("read it back")])
    assert run(go()).stop_reason == "end_turn"
    results = [m["content"] for r in server.chat_requests() for m in r.body["messages"] if m["role"] == "tool"]
    assert any(r.startswith("kept-across-modes") for r in results), results
