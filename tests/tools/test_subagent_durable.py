"""Durable sub-agents across a SIGKILL (issue 32): the parent's call is saved before the child
starts, and a resumed thread runs that saved call again, so the child's work is found even
though the model, asked anew, would word the task differently. A real bantam process, a real
local server that answers the parent and the child from their own scripts, real shells."""
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from bantam.tools.subagent import CHILD_NOTE
from tests.conftest import base_cfg, run_bantam, wait_for, write_cfg
from tests.fakes.openai_server import FakeServer, Response, json_reply, text_reply, tool_reply

TOOLS = "shell_exec,write_file,spawn_agent"


Reply = Response | dict[str, Response] | None


class RoutedServer(FakeServer):
    """The parent's and the child's requests each take the next reply of their own script. A
    dict in a script chooses by the role of the request's last message (what the model says
    depends on what it was asked); `None` holds that request until the test ends (the process
    is killed meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.parent: list[Reply] = []
        self.child: list[Reply] = []
        self.release = threading.Event()

    def next_response(self, body: Any = None) -> Response:
        messages = (body or {}).get("messages") or [{}]
        system = messages[0].get("content", "")
        with self.lock:
            queue = self.child if CHILD_NOTE in system else self.parent
            reply = queue.pop(0) if queue else json_reply({"error": {"message": "script exhausted"}}, 500)
        if reply is None:
            self.release.wait(120)
            return json_reply({"error": {"message": "held"}}, 500)
        return reply[messages[-1]["role"]] if isinstance(reply, dict) else reply

    def roles(self, index: int) -> list[str]:
        return [m["role"] for m in self.chat_requests()[index].body["messages"]]

    def is_child(self, index: int) -> bool:
        return CHILD_NOTE in self.chat_requests()[index].body["messages"][0]["content"]


@pytest.fixture
def routed():
    with RoutedServer() as s:
        yield s
        s.release.set()


def thread_file(name: str) -> Path:
    return Path(os.environ["HOME"], ".bantam", "threads", f"{name}.jsonl")


def killed_in_the_child(home: Path, server: RoutedServer) -> None:
    """Run 1: the parent starts a durable child, whose first step runs; the process is killed
    when the child's second request reaches the server."""
    write_cfg(home, **base_cfg(server, tools=TOOLS))
    server.parent += [tool_reply("spawn_agent", {"task": "build the report", "persistence": "durable"})]
    server.child += [tool_reply("shell_exec", {"command": "echo step1 >> log.txt"}), None]
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "--thread", "job", "-p", "make the report"],
                            cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(server.chat_requests()) == 3 or proc.poll() is not None,
                 "the child's second request")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_a_killed_durable_child_is_found_by_the_saved_call_not_the_wording(home, routed):
    killed_in_the_child(home, routed)
    saved = [json.loads(line) for line in thread_file("job").read_text().splitlines()]
    assert [m["role"] for m in saved] == ["user", "assistant"]  # the call, saved before the child started
    assert saved[1]["tool_calls"][0]["function"]["name"] == "spawn_agent"

    # Asked anew, the model would word the task differently; the saved call must be what runs.
    reworded = tool_reply("spawn_agent", {"task": "write up the report", "persistence": "durable"},
                          call_id="call_again")
    routed.parent += [{"user": reworded, "tool": text_reply("The report is built.")},
                      text_reply("The report is built.")]
    routed.child += [text_reply("report built\nSTATUS: success")]
    r = run_bantam("--thread", "job", cwd=home)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "The report is built.\n"
    assert (home / "log.txt").read_text() == "step1\n"  # the child's first step was not done again
    assert routed.is_child(3)  # run 2 went straight to the child: the parent was not asked again
    assert routed.roles(3) == ["system", "user", "assistant", "tool"]
    assert routed.chat_requests()[3].body["messages"][1]["content"].startswith("build the report")
    history = [json.loads(line) for line in thread_file("job").read_text().splitlines()]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    result = json.loads(history[2]["content"])
    assert result["resumed"] is True and result["status"] == "success"
    assert history[2]["tool_call_id"] == saved[1]["tool_calls"][0]["id"]


def test_a_new_prompt_on_a_thread_with_a_saved_call_says_to_finish_it(home, routed):
    killed_in_the_child(home, routed)
    r = run_bantam("--thread", "job", "-p", "something else", cwd=home)
    assert r.returncode == 2
    assert "thread job has a step cut off before its results; finish it first: bantam --thread job" in r.stderr
    assert len(routed.chat_requests()) == 3  # nothing was asked


def test_an_ephemeral_child_is_not_saved_first(home, routed):
    write_cfg(home, **base_cfg(routed, tools=TOOLS))
    routed.parent += [tool_reply("spawn_agent", {"task": "count"}), text_reply("done")]
    routed.child += [text_reply("3\nSTATUS: success")]
    r = run_bantam("--thread", "plain", "-p", "count it", cwd=home)
    assert r.returncode == 0, r.stderr
    history = [json.loads(line) for line in thread_file("plain").read_text().splitlines()]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]


# --- the usage line counts every request: a vision call, a sub-agent stopped by Ctrl+C --------------


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_read_images_vision_request_counts_in_the_usage(home, routed):
    from tests.fakes.openai_server import usage
    from tests.tools.test_media import png_bytes
    (home / "pic.png").write_bytes(png_bytes())
    write_cfg(home, **base_cfg(routed, tools="read_image"))
    routed.parent += [tool_reply("read_image", {"path": "pic.png"}, u=usage(100, 10)),
                      text_reply("A small red square.", usage(1000, 50)),  # the side request
                      text_reply("It is red.", usage(120, 5))]
    r = run_bantam("-p", "what is in pic.png?", "--json", cwd=home)
    assert r.returncode == 0, r.stderr
    done = [e for e in json_lines(r.stdout) if e["type"] == "done"][-1]
    assert done["usage"]["requests"] == len(routed.chat_requests()) == 3
    assert (done["usage"]["prompt_tokens"], done["usage"]["completion_tokens"]) == (1220, 65)
    assert done["usage"]["context_tokens"] == 120  # the conversation's own latest request


def test_a_sub_agent_stopped_by_ctrl_c_counts_in_the_usage(home, routed):
    from tests.fakes.openai_server import usage
    write_cfg(home, **base_cfg(routed, tools=TOOLS))
    routed.parent += [tool_reply("spawn_agent", {"task": "count the files"}, u=usage(100, 10))]
    routed.child += [tool_reply("shell_exec", {"command": "ls"}, u=usage(700, 70)), None]
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", "count", "--json"], cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(routed.chat_requests()) == 3 or proc.poll() is not None,
                 "the child's second request")
        proc.send_signal(signal.SIGINT)  # what Ctrl+C sends
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    reports = [e for e in json_lines(out) if e["type"] == "usage"]
    assert reports, out + err
    assert (reports[-1]["prompt_tokens"], reports[-1]["completion_tokens"]) == (800, 80)
    assert reports[-1]["requests"] == 2  # the parent's and the child's answered requests
