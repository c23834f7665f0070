"""Seed 004's edges (issue 15): what a child reports, the seed's names and arguments, labels and
usage of sub-agents, and clean stderr in a pipe, through real local servers and real processes."""
import json
from dataclasses import replace

import pytest

from bantam.tools.spawn import read_report
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.fakes import scripted
from tests.fakes.scripted import text, tool
from tests.tools.test_agents import RoutedModel, parent_run, results, spawn_calls


@pytest.mark.parametrize("text, status, output", [
    ("tried\nSTATUS: failure", "failure", "tried"),
    ("STATUS: blocked - I need the API key", "blocked", "I need the API key"),
    ("done.\n**STATUS: failure**", "failure", "done."),
    ("x\nSTATUS: failure.", "failure", "x"),
    ("STATUS: `blocked`: no network", "blocked", "no network"),
])
def test_a_failed_or_blocked_child_is_not_success(text, status, output):
    assert read_report(text, []) == (status, output, [])


def test_spawned_child_failure_reaches_the_parent(home):
    children = {"deploy": [text("cannot reach the host\nSTATUS: blocked - I need the API key")]}
    _, messages, _ = parent_run(RoutedModel([spawn_calls("deploy"), text("ok")], children), home)
    result = results(messages)[0]
    assert result["status"] == "blocked"
    assert result["output"] == "cannot reach the host\nI need the API key"


def test_max_iter_zero_is_refused_and_one_is_one(home):
    children = {"one step": [tool("shell_exec", {"command": "true"})]}
    model = RoutedModel([spawn_calls("zero", max_iter=0), spawn_calls("one step", max_iter=1), text("ok")], children)
    _, messages, _ = parent_run(model, home)
    zero = next(m["content"] for m in messages if m["role"] == "tool")
    assert zero == "error: max_iter must be a whole number of at least 1, got 0"
    one = json.loads([m["content"] for m in messages if m["role"] == "tool"][1])
    assert one["status"] == "partial" and one["steps_taken"] == 1
    assert "max_al_iterations (1)" in one["output"]


def test_durable_without_a_thread_says_so(home):
    children = {"job": [text("done\nSTATUS: success")]}
    _, messages, _ = parent_run(RoutedModel([spawn_calls("job", persistence="durable"), text("ok")], children), home)
    result = results(messages)[0]
    assert result["persistence"] == "ephemeral"
    assert result["note"] == "durable needs a --thread run; this sub-agent ran ephemeral"


def test_children_are_labelled_and_their_tokens_counted(home):
    children = {"task A": [tool("shell_exec", {"command": "echo a"}, usage=scripted.usage(100, 10)),
                           text("A\nSTATUS: success", scripted.usage(120, 5))],
                "task B": [text("B\nSTATUS: success", scripted.usage(50, 5))]}
    spawn = replace(spawn_calls("task A", "task B"), usage=scripted.usage(10, 5))
    model = RoutedModel([spawn, text("both done", scripted.usage(1000, 7))], children)
    turn, _, events = parent_run(model, home)
    calls = [e for e in events if e.type == "tool_call"]
    assert {(e.agent, e.name) for e in calls} == {("", "spawn_agent"), ("agent 1", "shell_exec")}
    child_result = next(e for e in events if e.type == "tool_result" and e.name == "shell_exec")
    assert child_result.agent == "agent 1" and child_result.to_json()["agent"] == "agent 1"
    assert "agent" not in calls[0].to_json()  # the main agent's events are as before
    assert turn.usage.prompt_tokens == 10 + 1000 + 100 + 120 + 50
    assert turn.usage.completion_tokens == 5 + 7 + 10 + 5 + 5
    assert turn.usage.context_tokens == 1000  # how full the parent's own context is


def test_children_labelled_in_the_terminal_trace_and_json(home, server):
    write_cfg(home, **base_cfg(server, tools="shell_exec,spawn_agent"))
    # one process; the fake serves parent and child in order, as they ask one after the other
    server.add(tool_reply("spawn_agent", {"task": "list"}), tool_reply("shell_exec", {"command": "echo hi"}),
               text_reply("hi\nSTATUS: success"), text_reply("done"))
    r = run_bantam("-p", "go", cwd=home)
    assert r.returncode == 0, r.stderr
    assert '[agent 1 tool call: shell_exec({"command": "echo hi"})]' in r.stderr
    assert "[agent 1 tool result: shell_exec]" in r.stderr
    server.add(tool_reply("spawn_agent", {"task": "list"}), tool_reply("shell_exec", {"command": "echo hi"}),
               text_reply("hi\nSTATUS: success"), text_reply("done"))
    r = run_bantam("--json", "-p", "go", cwd=home)
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e.get("agent") for e in events if e["type"] == "tool_call"] == [None, "agent 1"]


@pytest.mark.quick
def test_run_shell_is_shell_exec(home):  # in process: the alias is the toolbox's, not the command line's
    write_cfg(home, model="test-model")
    model = scripted.ScriptedProvider(tool("run_shell", {"command": "echo via-alias"}), text("ok"))
    turn, _ = scripted.one_shot(home, model)
    assert turn is not None and turn.text == "ok"
    assert "via-alias" in model.requests[1].messages[-1]["content"]


@pytest.mark.parametrize("args, prompt", [
    (["List files in /tmp"], "List files in /tmp"),
    (["hello"], "hello"),
    (["what", "is", "2+2"], "what is 2+2"),
])
def test_positional_words_that_are_no_file_are_the_prompt(home, server, args, prompt):
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("ok"))
    r = run_bantam(*args, cwd=home)
    assert r.returncode == 0, r.stderr
    assert server.chat_requests()[0].body["messages"][-1]["content"] == prompt


def test_a_missing_file_name_is_still_an_error(home, server):
    write_cfg(home, **base_cfg(server))
    r = run_bantam("notes.md", cwd=home)
    assert r.returncode == 2 and "cannot read prompt file notes.md" in r.stderr
    assert not server.chat_requests()


def test_pipe_and_handler_stderr_start_without_a_blank_line(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "echo x"}), text_reply("answer"))
    r = run_bantam("-p", "go", cwd=home)
    assert r.stderr.startswith("[tool call: shell_exec"), repr(r.stderr)
    assert "\n\n[" not in r.stderr
    server.add(tool_reply("shell_exec", {"command": "echo y"}), text_reply("topic answer"))
    r = run_bantam("handler", cwd=home, input="a task", env={"ACTOR_RESULT_TOPIC": "results"})
    assert r.returncode == 0, r.stderr
    assert not r.stderr.startswith("\n"), repr(r.stderr)


def test_pipe_separates_the_text_before_a_tool_call_from_the_answer(home, server):
    write_cfg(home, **base_cfg(server))
    first = tool_reply("shell_exec", {"command": "echo x"})
    first.chunks.insert(0, b'data: {"choices":[{"index":0,"delta":{"content":"I will check first."}}]}\n\n')
    server.add(first, text_reply("Sure! The file is fine."))
    r = run_bantam("-p", "go", cwd=home)
    assert r.stdout == "I will check first.\nSure! The file is fine.\n"
