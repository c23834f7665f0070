"""The interactive terminal, driven through a real pseudo-terminal against a real local server."""
import json
import os
import sys
import time
from pathlib import Path

import pexpect
import pytest

from bantam.transcripts import project_id
from tests.conftest import process_gone, base_cfg, wait_for, write_cfg
from tests.fakes.openai_server import chunk, json_reply, sse, text_reply, tool_reply, usage

PROMPT_READY = "\x1b[?2004h"  # prompt_toolkit turns on bracketed paste whenever it starts a prompt


class Term:
    def __init__(self, cwd: Path, width: int = 120, **env: str):
        full = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", **env}
        self.child = pexpect.spawn(sys.executable, ["-m", "bantam"], cwd=str(cwd), env=full,
                                   encoding="utf-8", dimensions=(40, width), timeout=20)

    def enter(self, text: str) -> None:
        """Wait for the prompt, type `text` and press Enter."""
        self.child.expect_exact(PROMPT_READY)
        self.child.send(text + "\r")

    def expect(self, text: str) -> str:
        self.child.expect_exact(text)
        return self.child.before

    def quit(self) -> int:
        self.enter("/quit")
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus


@pytest.fixture
def cfg(home, server):
    write_cfg(home, **base_cfg(server))
    return home


def session_file(directory: Path, name: str | None = None) -> Path:
    return Path(os.environ["HOME"], ".bantam", "sessions", f"{name or project_id(directory)}.jsonl")


def session_records(path: Path) -> tuple[dict, list[dict]]:
    """A session file's head record and its messages (JSON Lines, parsed here, not by bantam)."""
    head, *messages = [json.loads(line) for line in path.read_text().splitlines()]
    return head, messages


def test_multiline_prompt_with_ctrl_j_and_usage_line(cfg, server):
    server.add(text_reply("Got both lines.", usage(40, 4)))
    term = Term(cfg)
    term.child.expect_exact(PROMPT_READY)
    term.child.send("first line")
    term.child.sendcontrol("j")
    term.child.send("second line\r")
    term.expect("Got both lines.")
    term.expect("[test-model: 40 prompt + 4 completion | context: 40/? (window unknown)]")
    assert term.quit() == 0
    assert server.chat_requests()[0].body["messages"][1]["content"] == "first line\nsecond line"


def test_history_across_two_runs(cfg, server):
    server.add(text_reply("one"), text_reply("two"))
    term = Term(cfg)
    term.enter("remember this prompt")
    term.expect("one")
    term.quit()
    history = Path(os.environ["HOME"], ".bantam_history")
    assert "remember this prompt" in history.read_text()
    assert history.stat().st_mode & 0o777 == 0o600
    term = Term(cfg)
    term.child.expect_exact(PROMPT_READY)
    term.child.send("\x1b[A\x1b[A")  # Up twice: the last entry is /quit
    term.child.send("\r")
    term.expect("two")
    term.quit()
    assert server.chat_requests()[1].body["messages"][1]["content"] == "remember this prompt"


def test_bang_command_runs_outside_the_conversation(cfg, server):
    server.add(text_reply("fine"))
    term = Term(cfg)
    term.enter("!echo shell-says-hi; exit 4")
    term.expect("shell-says-hi")
    term.expect("exit: 4")
    term.enter("hello")
    term.expect("fine")
    term.quit()
    sent = json.dumps(server.chat_requests()[0].body["messages"])
    assert "shell-says-hi" not in sent and len(server.chat_requests()) == 1


def test_help_unknown_and_bad_arguments(cfg, server):
    term = Term(cfg)
    term.enter("/help")
    term.expect("/continue, /cont")
    term.enter("/bogus")
    term.expect("unknown command /bogus; /help lists the commands")
    term.enter("/load")
    term.expect("usage: /load <id or unique prefix>")
    term.enter("/cfg temperature hot")
    term.expect("temperature: expected a number, got 'hot'")
    term.enter("/save ../escape")
    term.expect("session name '../escape'")
    term.enter("/continue")
    term.expect("this project has no saved session yet")
    assert term.quit() == 0
    assert server.chat_requests() == [] and not (cfg / ".bantam.cfg").read_text().count("hot")


def test_cfg_model_endpoint_and_models(cfg, server):
    server.models = [{"id": "test-model"}, {"id": "bigger-model"}]
    server.add(text_reply("a"), text_reply("b"))
    term = Term(cfg, NO_COLOR="1")
    term.enter("/cfg temperature")
    term.expect("temperature=0.7")
    term.enter("/cfg temperature 0.25")
    term.expect("temperature=0.25 (written to .bantam.cfg)")
    term.enter("/models")
    term.expect("* test-model")
    term.expect("  bigger-model")
    term.enter("/model bigger-model")
    term.expect("model: bigger-model (for this session)")
    term.enter("/endpoint")
    term.expect(f"endpoint: {server.url}")
    term.enter("/cfg api_key sk-secret-cfg")
    term.expect("api_key=***")
    term.enter("/cfg top_p 0.5")
    term.enter("question")
    term.expect("a")
    term.quit()
    body = server.chat_requests()[0]
    assert (body.body["model"], body.body["temperature"], body.body["top_p"]) == ("bigger-model", 0.25, 0.5)
    assert body.headers["authorization"] == "Bearer sk-secret-cfg"
    text = (cfg / ".bantam.cfg").read_text()
    assert "temperature=0.25\n" in text and f"endpoint={server.url}\n" in text
    assert "model=bigger-model" not in text  # /model chose it for this session only
    assert (cfg / ".bantam.cfg").stat().st_mode & 0o777 == 0o600


def test_cfg_starts_from_model_cfg(home, server):
    write_cfg(home, "model.cfg", **base_cfg(server), top_k="40")
    term = Term(home)
    term.enter("/cfg temperature 0.3")
    term.expect("written to .bantam.cfg")
    term.quit()
    text = (home / ".bantam.cfg").read_text()
    assert "top_k=40" in text and f"endpoint={server.url}" in text and "temperature=0.3" in text


def test_save_list_load_clear(cfg, server):
    server.add(text_reply("Paris."), text_reply("Talk about the capital of France"), text_reply("Again"))
    term = Term(cfg, NO_COLOR="1")
    term.enter("What is the capital of France?")
    term.expect("Paris.")
    term.enter("/save geo")
    term.expect("saved 2 messages")  # as /list counts them: no system prompt
    term.enter("/list")
    term.expect("geo")
    term.expect("2 msgs  Talk about the capital of France")
    term.enter("/clear")
    term.expect("conversation cleared")
    term.enter("/load ge")
    term.expect("loaded geo: 2 messages")
    term.enter("and again?")
    term.expect("Again")
    term.quit()
    head, messages = session_records(session_file(cfg, "geo"))
    assert head["summary"] == "Talk about the capital of France"
    assert [m["role"] for m in messages] == ["user", "assistant"]  # the system prompt is rebuilt on load
    assert session_file(cfg, "geo").stat().st_mode & 0o777 == 0o600
    summary_request = server.chat_requests()[1].body
    assert summary_request["messages"][-1]["content"].startswith("Summarize this conversation in one line")
    assert "tools" not in summary_request
    last = server.chat_requests()[2].body["messages"]
    assert [m["content"] for m in last[1:]] == ["What is the capital of France?", "Paris.", "and again?"]


def test_autosave_then_continue_in_a_new_process(cfg, server):
    server.add(tool_reply("shell_exec", {"command": "echo 42 > answer.txt"}), text_reply("Wrote it."),
               text_reply("It was 42."))
    term = Term(cfg)
    term.enter("write 42 to answer.txt")
    term.expect("Wrote it.")
    term.quit()
    _, saved = session_records(session_file(cfg))
    assert [m["role"] for m in saved] == ["user", "assistant", "tool", "assistant"]
    term = Term(cfg)
    term.expect("/continue resumes it")
    term.enter("/cont")
    term.expect("messages")
    term.enter("what did you write?")
    term.expect("It was 42.")
    term.quit()
    sent = server.chat_requests()[2].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_quitting_at_once_keeps_the_previous_autosave(cfg, server):
    path = session_file(cfg).with_suffix(".json")  # one of an earlier version, too
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"messages": [{"role": "system", "content": "s"},
                                             {"role": "user", "content": "old work"}]}))
    before = path.read_text()
    assert Term(cfg).quit() == 0
    assert path.read_text() == before


@pytest.mark.parametrize("suffix,damage", [(".json", '{"messages": [truncated'),
                                           (".jsonl", '{"session": "x"}\n{"role": "us\n{"role": "user", "content": "a"}\n')])
def test_corrupt_autosave_is_reported_and_left_alone(cfg, server, suffix, damage):
    path = session_file(cfg).with_suffix(suffix)
    path.parent.mkdir(parents=True)
    path.write_text(damage)
    server.add(text_reply("hi"))
    term = Term(cfg)
    term.enter("hello")
    term.expect("not a readable session")
    term.expect("autosave will not overwrite it")
    term.quit()
    assert path.read_text() == damage


def test_ctrl_c_during_a_slow_stream(cfg, server):
    slow = sse([chunk("Slowly "), chunk("and "), chunk("slowly "), chunk("more", finish="stop")], delay=1.0)
    server.add(slow, text_reply("Quick answer."))
    term = Term(cfg)
    term.enter("tell me slowly")
    term.expect("Slowly")
    started = time.monotonic()
    term.child.sendintr()
    term.expect("interrupted")
    assert time.monotonic() - started < 1.5  # within a second (plus some slack for a busy machine)
    term.enter("now quickly")
    term.expect("Quick answer.")
    term.quit()
    _, saved = session_records(session_file(cfg))
    assert [(m["role"], m["content"]) for m in saved] == [
        ("user", "tell me slowly"), ("assistant", "[no answer: the user interrupted this request]"),
        ("user", "now quickly"), ("assistant", "Quick answer.")]


def test_ctrl_c_during_a_shell_command(cfg, server):
    write_cfg(cfg, **base_cfg(server, sandbox="off"))  # host pids: a sandboxed $$ is namespaced
    server.add(tool_reply("shell_exec", {"command": "echo $$ > sleeper.pid; sleep 30"}), text_reply("after"))
    term = Term(cfg)
    term.enter("sleep a while")
    term.expect("[tool call: shell_exec")
    pid_file = cfg / "sleeper.pid"
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    term.child.sendintr()
    term.expect("interrupted")
    term.enter("next")
    term.expect("after")
    term.quit()
    assert process_gone(int(pid_file.read_text()))
    _, saved = session_records(session_file(cfg))
    assert [m["role"] for m in saved] == ["user", "assistant", "user", "assistant"]  # no dangling tool call


def test_compaction_offer_at_sixty_percent(cfg, server):
    (cfg / "AGENTS.md").write_text("Never touch the prod database.")
    server.models = [{"id": "test-model", "context_length": 1000}]
    server.add(text_reply("Big answer.", usage(700, 10)), text_reply("We discussed a big question."),
               text_reply("Continuing."))
    term = Term(cfg, NO_COLOR="1")
    term.enter("a big question")
    term.expect("Big answer.")
    term.expect("Context usage is at 70.0% (700 / 1000 tokens). Compact conversation? [Y/n]:")
    term.child.send("y\r")
    term.expect("compacted 2 messages into 1")
    term.enter("go on")
    term.expect("Continuing.")
    term.quit()
    compaction = server.chat_requests()[1].body["messages"]
    assert compaction[-1]["content"].startswith("You are now acting as a compaction engine.")
    after = server.chat_requests()[2].body["messages"]
    assert [m["role"] for m in after] == ["system", "user", "user"]
    summary = after[1]["content"]
    assert "Original task (verbatim):\na big question" in summary
    assert "Never touch the prod database." in summary and "We discussed a big question." in summary


def test_markdown_table_rendered_with_box_drawing(cfg, server):
    table = "Here:\n\n| name | size |\n|------|------|\n| a.txt | 10 |\n| b.txt | 20 |\n"
    server.add(text_reply(table))
    term = Term(cfg)
    term.enter("list files as a table")
    term.expect("| a.txt | 10 |")  # streamed as it arrives, then drawn again:
    after = term.expect("[test-model")
    assert "a.txt" in after and "┌" in after and "│" in after and "└" in after
    term.quit()


def test_json_without_prompt_is_an_error(cfg):
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "--json"], cwd=str(cfg), encoding="utf-8", timeout=20)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2 and "--json needs a prompt" in child.before


def test_the_terminals_prompt_offers_escalate_and_says_how(cfg, server):
    write_cfg(cfg, **base_cfg(server, sandbox="workspace", approval="on-request"))
    server.add(text_reply("ok"))
    term = Term(cfg)
    term.enter("hi")
    term.expect("ok")
    term.quit()
    body = server.chat_requests()[0].body
    shell = next(t["function"]["parameters"]["properties"] for t in body["tools"]
                 if t["function"]["name"] == "shell_exec")
    assert "escalate" in shell  # a person is here to approve: offered, and the prompt says how
    assert "call shell_exec with `escalate` set to the reason" in body["messages"][0]["content"]


def test_pause_stops_a_working_run_at_its_next_step_and_resume_finishes_it(cfg):
    """/run works in the background, so /pause reaches it; the step in progress (a command)
    finishes, no model request follows it, and /resume goes on from there."""
    from tests.runs.test_runs import held_run
    term = Term(cfg)
    term.enter("/run " + held_run(cfg, ["a.txt", "b.txt"]))
    held = wait_for(lambda: next(cfg.glob("runs/*/workspace/held"), None), "the run's command to start")
    term.enter("/status")  # the prompt is back while the run works
    term.expect("status: running")
    term.enter("/pause")
    term.expect("pausing the run at its next safe point")
    (held.parent / "go").write_text("")
    term.expect("paused on request at a safe point")
    run = held.parent.parent
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "paused" and [s["status"] for s in state["plan"]] == ["done", "pending", "pending"]
    assert state["scripted_used"] == 2  # the plan and the command's call: nothing asked after /pause
    assert state["pending_answer"] is None and state["pending_call"] is None
    term.child.send("/resume\r")  # the run's output came after the prompt was drawn: it is waiting
    term.expect(f"run {run.name} completed (")  # the outcome line, once the run has ended
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "completed" and state["final"] == "done" and state["scripted_used"] == 5
    tools = [json.loads(line)["tool"] for line in (run / "observations.jsonl").read_text().splitlines()]
    assert tools == ["shell", "read_file", "read_file"]  # the command ran once
    term.child.send("/quit\r")
    term.child.expect(pexpect.EOF)
    term.child.close()
    assert term.child.exitstatus == 0


def test_ctrl_c_at_the_prompt_pauses_a_working_run_and_a_chat_message_waits(cfg, server):
    from tests.runs.test_runs import held_run
    term = Term(cfg)
    term.enter("/run " + held_run(cfg, ["a.txt"]))
    held = wait_for(lambda: next(cfg.glob("runs/*/workspace/held"), None), "the run's command to start")
    term.enter("what is the weather?")
    term.expect("a run is working: /pause pauses it at its next step")
    term.child.expect_exact(PROMPT_READY)
    term.child.sendcontrol("c")
    term.expect("pausing the run at its next safe point")
    (held.parent / "go").write_text("")
    term.expect("paused on request at a safe point")
    assert json.loads((held.parent.parent / "state.json").read_text())["status"] == "paused"
    assert server.chat_requests() == []  # the chat message was not sent while the run worked
    term.child.send("/quit\r")
    term.child.expect(pexpect.EOF)
    term.child.close()
    assert term.child.exitstatus == 0
