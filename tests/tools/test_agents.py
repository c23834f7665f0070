"""Sub-agents (spawn_agent), threads, durable sub-agents, skills and the queue handler (seed 004).
Sub-agents run in process on a scripted model (tests/fakes/scripted.py) with real shells and real
files; threads, skills and the handler through real bantam processes against a real local server."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bantam import loop
from bantam.config import Config
from bantam.errors import APIError
from bantam.tools import ToolContext, make_toolbox
from bantam.tools.spawn import read_report
from bantam.tools.subagent import CHILD_NOTE
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.fakes.scripted import ScriptedProvider, Step, call, calls, text, tool

TOOLS = "shell_exec,write_file,spawn_agent"


class RoutedModel(ScriptedProvider):
    """Sub-agents ask at the same time, so each gets the replies scripted for its own task."""

    def __init__(self, parent, children, barrier=None):
        super().__init__(*parent)
        self.children = {task: list(replies) for task, replies in children.items()}
        self.barrier = barrier

    def next_step(self, messages):
        if CHILD_NOTE not in messages[0]["content"]:
            return super().next_step(messages)
        task = messages[1]["content"]
        if self.barrier and len(messages) == 2:
            self.barrier.wait(timeout=10)  # breaks (and the test fails) unless all children ask at once
        with self.lock:
            return self.children[task].pop(0)

    def child_requests(self):
        return [r for r in self.requests if CHILD_NOTE in r.messages[0]["content"]]


def spawn_calls(*tasks, **extra) -> Step:
    return calls(*[call("spawn_agent", {"task": t, **extra}, f"call_{i}") for i, t in enumerate(tasks)])


def parent_run(model, home, **cfg_values):
    cfg = Config(model="test-model", tools=tuple(TOOLS.split(",")), retry_delays=(0,), **cfg_values)
    events = []
    box = make_toolbox(cfg.tools, ToolContext(cfg, model, "SYSTEM", events.append))
    messages = [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "go"}]
    turn = loop.run(model, messages, box, loop.Limits(retry_delays=(0,)), events.append)
    return turn, messages, events


def results(messages):
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


@pytest.mark.quick
def test_three_sub_agents_run_at_once_and_report_in_order(home):
    children = {t: [text(f"{t} finished\nSTATUS: success")] for t in ("task A", "task B", "task C")}
    model = RoutedModel([spawn_calls("task A", "task B", "task C"), text("all three done")],
                        children, barrier=threading.Barrier(3))
    turn, messages, _ = parent_run(model, home)
    assert turn.text == "all three done"
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_1", "call_2"]
    got = results(messages)
    assert [r["output"] for r in got] == ["task A finished", "task B finished", "task C finished"]
    assert all(r["status"] == "success" and r["steps_taken"] == 1 for r in got)


@pytest.mark.quick
def test_child_context_is_fresh_and_cannot_delegate(home):
    children = {"count files": [tool("shell_exec", {"command": "echo child-ran"}),
                                text("3 files\nSTATUS: success")]}
    model = RoutedModel([spawn_calls("count files"), text("ok")], children)
    _, messages, _ = parent_run(model, home)
    child_first, child_second = model.child_requests()
    assert [m["role"] for m in child_first.messages] == ["system", "user"]
    assert child_first.messages[1]["content"] == "count files"
    assert child_first.tool_names() == ["shell_exec", "write_file"]
    assert "STATUS: success" in child_first.messages[0]["content"]
    assert child_second.messages[-1]["content"] == "child-ran\n\n\nexit: 0"
    result = results(messages)[0]
    assert result == {"status": "success", "output": "3 files", "steps_taken": 2, "tool_calls": 1,
                      "unmet_checks": [], "persistence": "ephemeral"}


@pytest.mark.quick
def test_checks_are_reported(home):
    children = {"find TODOs": [text("found 2\nUNMET: cite file:line for each\nSTATUS: success")],
                "quiet child": [text("did it, no report")]}
    model = RoutedModel([spawn_calls("find TODOs", checks=["cite file:line for each"]),
                         spawn_calls("quiet child", checks=["tests pass"]), text("ok")], children)
    _, messages, _ = parent_run(model, home)
    system = model.child_requests()[0].messages[0]["content"]
    assert "- cite file:line for each" in system and "UNMET:" in system
    first, second = results(messages)
    assert (first["status"], first["output"], first["unmet_checks"]) == ("partial", "found 2", ["cite file:line for each"])
    assert (second["status"], second["unmet_checks"]) == ("partial", ["tests pass"])


@pytest.mark.quick
def test_read_report():
    assert read_report("done\nSTATUS: blocked", []) == ("blocked", "done", [])
    assert read_report("plain answer", []) == ("success", "plain answer", [])
    assert read_report("x\nstatus: FAILURE", ["c"]) == ("failure", "x", [])


@pytest.mark.quick
def test_fan_out_cap(home):
    children = {t: [text("ok\nSTATUS: success")] for t in ("a", "b")}
    model = RoutedModel([spawn_calls("a", "b", "c"), text("done")], children)
    _, messages, _ = parent_run(model, home, max_fanout=2)
    contents = [m["content"] for m in messages if m["role"] == "tool"]
    assert json.loads(contents[0])["status"] == json.loads(contents[1])["status"] == "success"
    assert contents[2].startswith("error: the fan-out cap of 2 sub-agents")


@pytest.mark.quick
def test_child_budget_and_failure(home):
    children = {"loop forever": [tool("shell_exec", {"command": "true"})],
                "doomed": [APIError("HTTP 400: model overloaded badly", status=400)]}
    model = RoutedModel([spawn_calls("loop forever", max_iter=1), spawn_calls("doomed"), text("ok")], children)
    _, messages, _ = parent_run(model, home)
    limited, failed = results(messages)
    assert limited["status"] == "partial" and limited["steps_taken"] == 1 and "max_al_iterations (1)" in limited["output"]
    assert failed["status"] == "failure" and "model overloaded badly" in failed["output"]


@pytest.mark.quick
def test_bad_spawn_arguments(home):
    model = RoutedModel([spawn_calls("x", persistence="forever"), text("ok")], {})
    _, messages, _ = parent_run(model, home)
    assert "persistence must be ephemeral or durable" in messages[3]["content"]


# --- threads ----------------------------------------------------------------------------------

def thread_file(name):
    return Path(os.environ["HOME"], ".bantam", "threads", f"{name}.jsonl")


def test_thread_continues_across_runs(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "echo noted"}), text_reply("Noted: blue."),
               text_reply("You said blue."))
    assert run_bantam("--thread", "colors", "-p", "my favourite colour is blue", cwd=home).returncode == 0
    r = run_bantam("--thread", "colors", "-p", "what did I say?", cwd=home)
    assert r.stdout == "You said blue.\n"
    sent = server.chat_requests()[2].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    path = thread_file("colors")
    lines = path.read_text().splitlines()
    assert [json.loads(line)["role"] for line in lines] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_torn_thread_line_is_healed(home, server):
    write_cfg(home, **base_cfg(server))
    path = thread_file("t")
    path.parent.mkdir(parents=True)
    good = json.dumps({"role": "user", "content": "hi"}) + "\n" + json.dumps({"role": "assistant", "content": "hello"}) + "\n"
    path.write_text(good + '{"role": "user", "content": "half')
    server.add(text_reply("fine"))
    r = run_bantam("--thread", "t", "-p", "again", cwd=home)
    assert r.returncode == 0, r.stderr
    assert [m["role"] for m in server.chat_requests()[0].body["messages"]] == ["system", "user", "assistant", "user"]
    assert path.read_text().startswith(good) and all(json.loads(line) for line in path.read_text().splitlines())


def test_damaged_thread_is_reported_and_left_alone(home, server):
    write_cfg(home, **base_cfg(server))
    path = thread_file("bad")
    path.parent.mkdir(parents=True)
    path.write_text('{"role": "user", "content": "a"}\nnot json at all\n{"role": "assistant", "content": "b"}\n')
    before = path.read_text()
    r = run_bantam("--thread", "bad", "-p", "x", cwd=home)
    assert r.returncode == 1 and "bad.jsonl:2" in r.stderr and "Traceback" not in r.stderr
    assert path.read_text() == before and server.chat_requests() == []


def test_thread_without_prompt_needs_something_to_resume(home, server):
    write_cfg(home, **base_cfg(server))
    r = run_bantam("--thread", "empty", cwd=home)
    assert r.returncode == 2 and "no unanswered request" in r.stderr


def test_killed_thread_resumes_its_durable_sub_agent(home, server):
    # sandbox off: the test kills the orphan by its host pid (a sandboxed $$ is namespaced)
    write_cfg(home, **base_cfg(server, tools=TOOLS, sandbox="off"))
    spawn = {"task": "build the report", "persistence": "durable"}
    server.add(tool_reply("spawn_agent", spawn),                                     # run 1: parent
               tool_reply("shell_exec", {"command": "echo step1 >> log.txt"}),       # child step 1
               tool_reply("shell_exec", {"command": "echo $$ > sleeper.pid; sleep 30"}))  # child step 2
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "--thread", "job", "-p", "make the report"],
                            cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pid_file = home / "sleeper.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # the orphaned sleep, in its own group

    server.add(text_reply("report built\nSTATUS: success"),  # run 2: the saved call runs again, the child carries on
               text_reply("The report is built."))
    r = run_bantam("--thread", "job", cwd=home)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "The report is built.\n"
    assert (home / "log.txt").read_text() == "step1\n"  # step 1 was not done again
    resumed_child = server.chat_requests()[3].body["messages"]
    assert [m["role"] for m in resumed_child] == ["system", "user", "assistant", "tool"]
    assert resumed_child[3]["content"] == "\n\nexit: 0"
    history = [json.loads(line) for line in thread_file("job").read_text().splitlines()]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(history[2]["content"])["resumed"] is True


# --- skills and the handler ---------------------------------------------------------------------

def test_agent_dir_system_and_skills(home, server):
    agent = home / "agent-dir"
    (agent / "skills").mkdir(parents=True)
    (agent / "system.md").write_text("You are the release bot.")
    (agent / "skills" / "02-rules.md").write_text("Never push on Fridays.")
    (agent / "skills" / "01-domain.md").write_text("We ship wheels.")
    (home / "AGENTS.md").write_text("Use tabs.")
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("ok"))
    run_bantam("-p", "x", cwd=home, env={"AGENT_DIR": str(agent)})
    system = server.chat_requests()[0].body["messages"][0]["content"]
    assert system.startswith("You are the release bot.")
    assert system.index("We ship wheels.") < system.index("Never push on Fridays.") < system.index("Use tabs.")


def test_handler_fed_through_a_pipe(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "echo 7"}), text_reply("The answer is 7."),
               text_reply("Second task done."))
    env = {**os.environ, "ACTOR_ID": "ai-agent", "ACTOR_TOPIC": "ai_task", "ACTOR_RESULT_TOPIC": "ai_result"}
    errs = []
    for task, expected in (("compute it", "ai_result\nThe answer is 7."), ("next task", "ai_result\nSecond task done.")):
        broker = subprocess.Popen([sys.executable, "-m", "bantam", "handler"], cwd=home, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = broker.communicate(task, timeout=60)
        assert broker.returncode == 0, err
        assert out == expected
        errs.append(err)
    # the traces go to stderr, never into the result on stdout: the first task's call, not the second's
    assert "[tool call: shell_exec" in errs[0] and "tool call" not in errs[1]
    assert server.chat_requests()[0].body["messages"][1]["content"] == "compute it"


def test_handler_without_topic_and_without_task(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("plain result"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTOR_")}
    r = subprocess.run([sys.executable, "-m", "bantam", "handler"], cwd=home, env=env, input="task",
                       capture_output=True, text=True, timeout=60)
    assert r.stdout == "plain result"
    r = subprocess.run([sys.executable, "-m", "bantam", "handler"], cwd=home, env=env, input="  ",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no task on standard input" in r.stderr
