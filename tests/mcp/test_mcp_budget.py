"""One rule for a child's step budget, whoever asks: spawn_agent's `max_iter` from the model and
`bantam mcp`'s run_task `max_iter` from a client refuse 0 (and anything not a whole number of at
least 1) with the same words, before anything runs; none given means the configured budget.
Real processes: bantam as an MCP server on stdio with the SDK's client, and a fake model server."""
from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply

REFUSAL = "max_iter must be a whole number of at least 1, got 0"


def run_tasks(home, url: str, *arguments: dict) -> list:
    import anyio
    from mcp import Client, StdioServerParameters

    async def session() -> list:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "bantam", "mcp", "--endpoint", url, "--model", "m"],
            env={"HOME": os.environ["HOME"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, cwd=str(home))
        async with Client(params, read_timeout_seconds=120) as client:
            return [await client.call_tool("run_task", args) for args in arguments]
    return anyio.run(session)


@pytest.mark.parametrize("budget", [0, -3])
def test_run_task_refuses_a_budget_below_one_and_runs_nothing(home, budget):
    with FakeServer([text_reply("ran anyway\nSTATUS: success")]) as s:
        write_cfg(home, **base_cfg(s))
        (refused,) = run_tasks(home, s.url, {"task": "say hi", "max_iter": budget})
        assert refused.is_error and refused.content[0].text.endswith(REFUSAL.replace("got 0", f"got {budget}"))
        assert not s.chat_requests()


def test_run_task_without_a_budget_takes_the_configured_one(home):
    with FakeServer([text_reply("hi\nSTATUS: success")]) as s:
        write_cfg(home, **base_cfg(s))
        (done,) = run_tasks(home, s.url, {"task": "say hi"})
        assert not done.is_error and done.structured_content["status"] == "success"


def test_spawn_agent_refuses_zero_with_the_same_words(home):
    with FakeServer([tool_reply("spawn_agent", {"task": "say hi", "max_iter": 0}), text_reply("ok")]) as s:
        write_cfg(home, **base_cfg(s, tools="shell_exec,spawn_agent"))
        r = run_bantam("-p", "delegate", cwd=home)
        assert r.returncode == 0, r.stderr
        requests = s.chat_requests()
        assert len(requests) == 2  # no child request in between
        result = [m for m in requests[1].body["messages"] if m["role"] == "tool"][0]["content"]
        assert REFUSAL in result, json.dumps(result)


def test_run_task_stops_at_its_max_iter_with_a_partial_result(home):
    """A client's max_iter bounds the task's session (model requests), and the agent is told how
    to report: a task stopped by it is a partial result saying why, not an error."""
    with FakeServer([tool_reply("shell_exec", {"command": "echo one"}), text_reply("never asked\nSTATUS: success")]) as s:
        write_cfg(home, **base_cfg(s))
        (stopped,) = run_tasks(home, s.url, {"task": "work", "checks": ["it works"], "max_iter": 1})
        requests = s.chat_requests()
    result = stopped.structured_content
    assert not stopped.is_error and result["status"] == "partial", result
    assert "max_al_iterations (1) reached" in result["output"] and result["unmet_checks"] == ["it works"]
    assert result["steps_taken"] == 1 and result["tool_calls"] == 1 and len(requests) == 1
    assert "STATUS: success" in requests[0].body["messages"][0]["content"]
