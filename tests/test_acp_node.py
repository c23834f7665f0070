"""`bantam acp` driven by a second client nobody here wrote: the npm `@agentclientprotocol/sdk`
(the TypeScript SDK that Zed's side of the protocol comes from), through tests/acp_node/client.mjs,
against the fake model server. The SDK checks the notifications and requests it receives against
its own copy of the protocol's schema and drops what fails (the client prints each complaint as a
line, and every test here requires none); the answers to its requests it passes on unchecked, so
the tests check their fields themselves.

Needs node and `npm install --prefix tests/node @agentclientprotocol/sdk@2.4.0` (the README's
set-up command); skipped, saying which is missing, without them.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fakes.openai_server import FakeServer, chunk, sse, text_reply, tool_reply, usage

CLIENT = ROOT / "tests" / "acp_node" / "client.mjs"
SDK = ROOT / "tests" / "node" / "node_modules" / "@agentclientprotocol" / "sdk"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed (apt-get install nodejs npm)"),
    pytest.mark.skipif(not SDK.is_dir(), reason=f"{SDK.relative_to(ROOT)} is missing: npm install --prefix "
                                                "tests/node @agentclientprotocol/sdk@2.4.0"),
]


def drive(server: FakeServer, cwd: Path, *prompts: str, permission: str = "reject_once",
          extra: tuple[str, ...] = (), client: tuple[str, ...] = (), env: dict[str, str] | None = None) -> list[dict]:
    """Run the node client's scenario (initialize, session/new in `cwd`, each prompt in turn, then
    the steps in `client`: its options, such as `--call METHOD JSON`) on a fresh `bantam acp`; the
    lines it printed, in order. The agent's own arguments are written here rather than taken from
    test_acp.py, which skips itself without the Python SDK."""
    agent = [sys.executable, "-m", "bantam", "acp", "--endpoint", server.url, "--model", "test-model",
             "--set", "retry_delays=0,0,0", *extra]
    command = [str(NODE), str(CLIENT), "--cwd", str(cwd), "--permission", permission,
               *[a for p in prompts for a in ("--prompt", p)], *client, "--", *agent]
    # its own session, so that a hung run is ended with the agent the client started
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the node client did not finish:\n{out[-3000:]}\n{err[-3000:]}") from None
    assert proc.returncode == 0, f"client.mjs failed ({proc.returncode}):\n{err[-3000:]}"
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines and {k: v for k, v in lines[-1].items() if k != "t"} == {"type": "exit", "code": 0, "signal": None}, \
        err[-3000:]
    assert not [line for line in lines if line["type"] == "sdk_complaint"], lines
    return lines


def responses(lines: list[dict], method: str) -> list[dict]:
    """The results of the client's requests of one method; an error answer fails the test."""
    errors = [line for line in lines if line["type"] == "error"]
    assert not errors, errors
    return [line["result"] for line in lines if line["type"] == "response" and line["method"] == method]


def updates(lines: list[dict], kind: str) -> list[dict]:
    return [line["params"]["update"] for line in lines if line["type"] == "notification"
            and line["params"]["update"]["sessionUpdate"] == kind]


def test_initialize_a_session_and_a_streamed_answer(home, server):
    server.add(sse([chunk("Hel"), chunk("lo"), chunk(finish="stop"), chunk(usage=usage(), no_choices=True)]))
    lines = drive(server, home, "hi")
    [init] = responses(lines, "initialize")
    assert init["protocolVersion"] == 1
    assert init["agentInfo"]["name"] == "bantam"
    [new] = responses(lines, "session/new")
    assert new["sessionId"] and new["modes"]["currentModeId"] == "workspace"
    [done] = responses(lines, "session/prompt")
    assert done["stopReason"] == "end_turn"
    # the answer arrives as it streams, piece by piece, each piece for this session
    assert [u["content"]["text"] for u in updates(lines, "agent_message_chunk")] == ["Hel", "lo"]
    assert {line["params"]["sessionId"] for line in lines if line["type"] == "notification"} == {new["sessionId"]}
    # every update of the turn comes before the prompt's answer
    assert (lines[-2]["type"], lines[-2]["method"]) == ("response", "session/prompt")
    assert server.chat_requests()[0].body["messages"][-1]["content"] == "hi"


def test_a_shell_command_is_reported_as_a_tool_call_and_its_result(home, server):
    server.add(tool_reply("shell_exec", {"command": "echo made > made.txt && echo ran"}), text_reply("done"))
    lines = drive(server, home, "make the file")
    assert (home / "made.txt").read_text() == "made\n"
    [call] = updates(lines, "tool_call")
    assert (call["kind"], call["status"], call["title"]) == ("execute", "in_progress", "echo made > made.txt && echo ran")
    assert call["rawInput"] == {"command": "echo made > made.txt && echo ran"}
    shown, result = updates(lines, "tool_call_update")  # its output as it came, then the result
    assert shown["status"] == "in_progress" and shown["content"][0]["content"]["text"] == "ran\n"
    assert result["toolCallId"] == call["toolCallId"] and result["status"] == "completed"
    assert "ran" in result["content"][0]["content"]["text"]
    assert not [line for line in lines if line["type"] == "request"]  # nothing to approve in the project folder
    assert [r["stopReason"] for r in responses(lines, "session/prompt")] == ["end_turn"]


@pytest.mark.parametrize("answer", ["reject_once", "allow_once"])
def test_the_editor_is_asked_and_its_answer_decides(home, server, answer):
    server.add(tool_reply("shell_exec", {"command": "echo made > made.txt"}), text_reply("over"))
    lines = drive(server, home, "make the file", permission=answer, extra=("--set", "approval=always"))
    [asked] = [line for line in lines if line["type"] == "request"]
    assert asked["method"] == "session/request_permission"
    assert "allow_once" in [o["optionId"] for o in asked["params"]["options"]]
    assert "reject_once" in [o["optionId"] for o in asked["params"]["options"]]
    [call] = updates(lines, "tool_call")
    assert asked["params"]["toolCall"]["toolCallId"] == call["toolCallId"]
    result = updates(lines, "tool_call_update")[-1]
    assert result["toolCallId"] == call["toolCallId"]
    if answer == "reject_once":
        assert not (home / "made.txt").exists()  # rejected: the command never ran
        assert result["status"] == "failed" and "rejected" in result["content"][-1]["content"]["text"]
    else:
        assert (home / "made.txt").read_text() == "made\n"
        assert result["status"] == "completed"
    assert [r["stopReason"] for r in responses(lines, "session/prompt")] == ["end_turn"]
    # the model is told what happened and answers once more
    assert server.chat_requests()[-1].body["messages"][-1]["role"] == "tool"


def test_a_permission_request_shows_the_command_and_the_diff_of_a_write(home, server):
    (home / "notes.txt").write_text("one\ntwo\n")
    server.add(tool_reply("shell_exec", {"command": "rm -f notes.bak && echo gone"}),
               tool_reply("write_file", {"path": "new.txt", "content": "fresh\n"}, call_id="call_2"),
               tool_reply("edit_file", {"path": "notes.txt", "old_string": "two", "new_string": "2"}, call_id="call_3"),
               text_reply("asked thrice"))
    lines = drive(server, home, "do three things", permission="reject_once",
                  extra=("--set", "approval=always", "--set", "tools=shell_exec,write_file,edit_file"))
    run, write, edit = [line["params"]["toolCall"] for line in lines if line["type"] == "request"]
    calls = {u["toolCallId"]: u for u in updates(lines, "tool_call")}
    assert set(calls) == {run["toolCallId"], write["toolCallId"], edit["toolCallId"]}
    assert run["content"] == [{"type": "content", "content": {"type": "text",
                                                             "text": "```sh\nrm -f notes.bak && echo gone\n```"}}]
    assert run["rawInput"] == {"command": "rm -f notes.bak && echo gone"}
    assert write["content"] == [{"type": "diff", "path": str(home / "new.txt"), "oldText": None, "newText": "fresh\n"}]
    assert edit["content"] == [{"type": "diff", "path": str(home / "notes.txt"), "oldText": "one\ntwo\n",
                                "newText": "one\n2\n"}]
    # rejected, each changed nothing
    assert not (home / "new.txt").exists() and (home / "notes.txt").read_text() == "one\ntwo\n"


TICKS = "for i in 1 2 3 4; do echo tick $i; sleep 1; done"


def test_a_commands_output_shows_in_the_call_while_it_runs(home, server):
    # with a key configured, as always outside tests: a secret in the output is ***, and no line
    # waits for the next one to come (a redactor that holds back the key's length would)
    key = "sk-test-0123456789abcdefghijklmnop"
    (home / "key.txt").write_text(f"the key is {key}\n")
    server.add(tool_reply("shell_exec", {"command": "cat key.txt; " + TICKS}), text_reply("counted"))
    lines = drive(server, home, "count slowly", env={"OPENAI_API_KEY": key})
    shown = [line for line in lines if line["type"] == "notification"
             and line["params"]["update"]["sessionUpdate"] == "tool_call_update"]
    *running, last = shown
    assert last["params"]["update"]["status"] == "completed"
    assert all(line["params"]["update"]["status"] == "in_progress" for line in running)
    texts = [line["params"]["update"]["content"][0]["content"]["text"] for line in running]
    assert texts[-1] == "the key is ***\ntick 1\ntick 2\ntick 3\ntick 4\n"
    assert not [text for text in texts if "sk-" in text]
    # each line as it comes, about a second after the one before (updates are at most 0.2 s apart)
    first = [next(line["t"] for line, text in zip(running, texts, strict=True) if f"tick {i}" in text) for i in (1, 2, 3, 4)]
    assert all(700 < later - earlier < 1600 for earlier, later in zip(first, first[1:], strict=False)), first
    assert last["t"] - first[0] > 2500


def test_with_the_clients_terminals_the_output_shows_in_one_and_the_command_stays_in_bantam(home, server):
    # the editor's environment holds a key; a command the editor ran itself would see it
    server.add(tool_reply("shell_exec", {"command": 'echo "[$ACP_TEST_TOKEN]"; ' + TICKS}), text_reply("counted"))
    lines = drive(server, home, "count slowly", client=("--terminal",), env={"ACP_TEST_TOKEN": "hunter2"})
    [create] = [line for line in lines if line["type"] == "request" and line["method"] == "terminal/create"]
    terminal = create["answer"]["terminalId"]
    assert create["params"]["command"] == "cat"  # the editor shows a pipe; bantam runs the command
    [call] = updates(lines, "tool_call")
    shown, last = updates(lines, "tool_call_update")
    assert shown["content"] == [{"type": "terminal", "terminalId": terminal}]
    assert last["status"] == "completed"
    assert last["content"] == [{"type": "terminal", "terminalId": terminal},
                               {"type": "content", "content": {"type": "text", "text": "exit: 0"}}]
    [release] = [line for line in lines if line["type"] == "request" and line["method"] == "terminal/release"]
    assert release["output"] == "[]\ntick 1\ntick 2\ntick 3\ntick 4\n"
    assert release["t"] - create["t"] > 2500  # opened at the first line, not at the end
    # the model got the output as always
    assert "tick 4" in server.chat_requests()[-1].body["messages"][-1]["content"]


def test_zeds_agent_fed_terminal_gets_the_output_piece_by_piece(home, server):
    server.add(tool_reply("shell_exec", {"command": TICKS + "; exit 3"}), text_reply("counted"))
    lines = drive(server, home, "count slowly", client=("--terminal", "--terminal-output"))
    assert not [line for line in lines if line["type"] == "request"]  # no terminal of the editor's runs anything
    [call] = updates(lines, "tool_call")
    first, *pieces, last = updates(lines, "tool_call_update")
    terminal = {"type": "terminal", "terminalId": call["toolCallId"]}
    assert first["content"] == [terminal] and first["_meta"]["terminal_info"]["cwd"] == str(home)
    assert [p["_meta"]["terminal_output"]["data"] for p in pieces] == [f"tick {i}\n" for i in (1, 2, 3, 4)]
    assert last["status"] == "completed" and last["content"][0] == terminal
    assert last["_meta"]["terminal_exit"] == {"terminal_id": call["toolCallId"], "exit_code": 3, "signal": None}


def test_ask_mode_asks_before_every_write_and_command_and_a_rejected_one_changes_nothing(home, server):
    server.add(tool_reply("write_file", {"path": "new.txt", "content": "x\n"}),
               tool_reply("shell_exec", {"command": "touch made.txt"}, call_id="call_2"),
               text_reply("nothing done"),
               tool_reply("shell_exec", {"command": "touch made.txt"}, call_id="call_3"), text_reply("done"))
    lines = drive(server, home, client=("--call", "session/set_mode", '{"modeId": "ask"}',
                                        "--prompt", "write and touch", "--prompt", "touch it"),
                  permission="reject_once")
    [new] = responses(lines, "session/new")
    assert [m["id"] for m in new["modes"]["availableModes"]] == ["ask", "workspace", "read-only", "plan", "off"]
    asked = [line["params"]["toolCall"]["title"] for line in lines if line["type"] == "request"]
    assert len(asked) == 3  # the write, the command, and the command again
    assert not (home / "new.txt").exists() and not (home / "made.txt").exists()
    results = [u for u in updates(lines, "tool_call_update") if u["status"] != "in_progress"]
    assert [u["status"] for u in results] == ["failed"] * 3


def test_plan_mode_writes_nothing_runs_nothing_that_writes_and_tells_the_model(home, server):
    server.add(tool_reply("write_file", {"path": "new.txt", "content": "x\n"}),
               tool_reply("shell_exec", {"command": "touch made.txt; cat seen.txt"}, call_id="call_2"),
               text_reply("1. write new.txt"), text_reply("back to work"))
    (home / "seen.txt").write_text("looked at\n")
    lines = drive(server, home, client=("--call", "session/set_mode", '{"modeId": "plan"}', "--prompt", "plan it",
                                        "--call", "session/set_mode", '{"modeId": "workspace"}', "--prompt", "go"))
    assert not [line for line in lines if line["type"] == "request"]  # refused, never asked
    assert not (home / "new.txt").exists() and not (home / "made.txt").exists()
    write, command = [u for u in updates(lines, "tool_call_update") if u["status"] != "in_progress"]
    assert write["status"] == "failed"
    assert "looked at" in command["content"][-1]["content"]["text"]  # a command may look
    planned, working = server.chat_requests()[0].body, server.chat_requests()[-1].body
    assert "Plan mode" in planned["messages"][0]["content"]
    assert "Plan mode" not in working["messages"][0]["content"]  # another mode, another configuration
    assert [r["stopReason"] for r in responses(lines, "session/prompt")] == ["end_turn", "end_turn"]


def test_the_model_dropdown_lists_the_endpoints_models_and_a_choice_switches_the_model(home):
    with FakeServer(models=[{"id": "test-model"}, {"id": "other-model"}]) as server:
        server.add(text_reply("one"), text_reply("two"))
        lines = drive(server, home, client=(
            "--prompt", "hi", "--call", "session/set_config_option", '{"configId": "model", "value": "other-model"}',
            "--prompt", "again"))
        requests = server.chat_requests()
    [new] = responses(lines, "session/new")
    model = {o["id"]: o for o in new["configOptions"]}["model"]
    assert (model["category"], model["currentValue"]) == ("model", "test-model")
    listed = updates(lines, "config_option_update")[0]["configOptions"]
    assert [o["value"] for o in {o["id"]: o for o in listed}["model"]["options"]] == ["test-model", "other-model"]
    [chosen] = responses(lines, "session/set_config_option")
    assert {o["id"]: o for o in chosen["configOptions"]}["model"]["currentValue"] == "other-model"
    assert [r.body["model"] for r in requests] == ["test-model", "other-model"]
    assert requests[-1].body["messages"][1]["content"] == "hi"  # the same conversation, another model


PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")


def test_an_image_in_the_prompt_goes_to_the_model_as_its_image_input(home, server):
    import base64
    server.add(text_reply("a dot"))
    data = base64.b64encode(PNG).decode()
    blocks = [{"type": "text", "text": "what is this?"}, {"type": "image", "mimeType": "image/png", "data": data},
              {"type": "image", "mimeType": "image/gif", "data": base64.b64encode(b"GIF89a....").decode()}]
    lines = drive(server, home, client=("--blocks", json.dumps(blocks)))
    [init] = responses(lines, "initialize")
    assert init["agentCapabilities"]["promptCapabilities"]["image"] is True
    [done] = responses(lines, "session/prompt")
    assert done["stopReason"] == "end_turn"
    sent = server.chat_requests()[0].body["messages"][-1]["content"]
    assert sent == [{"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]
    said = "".join(u["content"]["text"] for u in updates(lines, "agent_message_chunk"))
    assert "not a PNG or JPEG image (it is a GIF)" in said  # the GIF is left out, and the user told


def test_sessions_are_listed_forked_closed_and_resumed_in_a_new_process(home, server):
    server.add(text_reply("hi there"), text_reply("again"))
    lines = drive(server, home, "hello", client=(
        "--call", "session/fork", json.dumps({"cwd": str(home), "mcpServers": []}),
        "--call", "session/list", "{}", "--call", "session/close", "{}"))
    [init] = responses(lines, "initialize")
    assert init["agentCapabilities"]["sessionCapabilities"] == {"list": {}, "resume": {}, "close": {}, "fork": {}}
    [new], [fork] = responses(lines, "session/new"), responses(lines, "session/fork")
    [listed] = responses(lines, "session/list")
    assert {s["sessionId"] for s in listed["sessions"]} == {new["sessionId"], fork["sessionId"]}
    assert responses(lines, "session/close") == [{}]
    saved = Path(os.environ["HOME"]) / ".bantam" / "sessions"
    assert "hello" in (saved / f"{fork['sessionId']}.jsonl").read_text()  # the fork starts with the history
    later = drive(server, home, client=("--open", "session/resume", new["sessionId"], "--prompt", "more"))
    assert responses(later, "session/resume")[0]["modes"]["currentModeId"] == "workspace"
    assert not updates(later, "user_message_chunk")  # resumed, not replayed
    assert [m["content"] for m in server.chat_requests()[-1].body["messages"][1:]] == ["hello", "hi there", "more"]


def test_the_terminals_slash_commands_are_offered_and_run_from_its_table(home):
    from bantam.slash import TABLE
    with FakeServer(models=[{"id": "test-model"}, {"id": "other-model"}]) as server:
        server.add(text_reply("what?"))
        lines = drive(server, home, "/models", "/sandbox", "/model other-model", "/help", "/bogus")
        asked = [r.body["messages"][-1]["content"] for r in server.chat_requests()]
    [offered] = updates(lines, "available_commands_update")
    names = [c["name"] for c in offered["availableCommands"]]
    terminal = {c.name for c in TABLE}
    assert set(names) <= terminal and len(names) == len(set(names))
    assert {"compact", "clear", "model", "endpoint", "models", "undo", "redo", "rewind", "sandbox", "mcp", "trust",
            "list", "help"} == set(names)
    said = "".join(u["content"]["text"] for u in updates(lines, "agent_message_chunk"))
    assert "* test-model\n  other-model" in said  # /models, the current one marked
    assert "sandbox=workspace" in said  # /sandbox
    assert "model: other-model (for this session)" in said  # /model NAME: a new configuration with it
    assert "/undo [N] [--force]  take back the file changes" in said  # /help: what runs here
    assert "/run GOAL" not in said  # a controlled run works in a terminal's background
    assert asked == ["/bogus"]  # only what is no command of bantam's reaches the model
    assert [r["stopReason"] for r in responses(lines, "session/prompt")] == ["end_turn"] * 5


def test_a_sandbox_change_typed_in_the_editor_holds_and_the_mode_picker_follows(home):
    """/sandbox with words is the terminal's command, run by the same code: the boundary changes for
    this session (nothing written) and the editor's mode follows; a write in the project folder,
    which the workspace sandbox lets through unasked, now crosses the boundary: the editor is asked."""
    with FakeServer() as server:
        server.add(tool_reply("write_file", {"path": "kept-out.txt", "content": "x"}), text_reply("tried"))
        lines = drive(server, home, "/sandbox read-only", "write it")
    [asked] = [line for line in lines if line["type"] == "request"]
    assert asked["method"] == "session/request_permission"
    said = "".join(u["content"]["text"] for u in updates(lines, "agent_message_chunk"))
    assert "for this session (nothing written)" in said and "read-only" in said
    assert [u["currentModeId"] for u in updates(lines, "current_mode_update")] == ["read-only"]
    [options] = [u for u in updates(lines, "config_option_update")][:1]
    assert {o["id"]: o["currentValue"] for o in options["configOptions"]}["mode"] == "read-only"
    assert not (home / "kept-out.txt").exists() and not (home / ".bantam.cfg").exists()
