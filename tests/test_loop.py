"""The loop, driven through the real OpenAI provider against a real local server, with real tools."""
import json
from pathlib import Path

import pytest

from bantam import loop
from bantam.config import Config
from bantam.errors import APIError, LimitReached, ProviderError
from bantam.events import Notice, Retry, Text, ToolCall, ToolResult, UsageReport
from bantam.providers.openai import OpenAIProvider
from bantam.tools import ToolContext, make_toolbox
from bantam.tools.subagent import CHILD_NOTE
from tests.fakes.openai_server import Response, chunk, json_reply, sse, text_reply, tool_reply, usage


def agent(server, home, messages=None, limits=None, guards=None, **cfg_values):
    cfg = Config(endpoint=server.url, model="test-model", **cfg_values)
    provider = OpenAIProvider(cfg)
    events = []
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider, "SYSTEM", events.append))
    messages = messages if messages is not None else [{"role": "system", "content": "SYSTEM"},
                                                      {"role": "user", "content": "go"}]
    limits = limits or loop.Limits(retry_delays=(0, 0, 0))
    return lambda: loop.run(provider, messages, box, limits, events.append, guards=guards), messages, events


def test_tool_step_then_answer(server, home):
    server.add(tool_reply("shell_exec", {"command": "echo hello"}, u=usage(10, 2)),
               text_reply("It printed hello.", usage(30, 5, cached=10)))
    run, messages, events = agent(server, home)
    turn = run()
    assert turn.text == "It printed hello."
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "hello\n\n\nexit: 0"}
    second = server.chat_requests()[1].body["messages"]
    assert second[3]["content"] == "hello\n\n\nexit: 0"
    assert [type(e) for e in events if isinstance(e, (ToolCall, ToolResult))] == [ToolCall, ToolResult]
    report = [e for e in events if isinstance(e, UsageReport)][0]
    assert (report.usage.prompt_tokens, report.usage.completion_tokens) == (40, 7)
    assert report.usage.cached_tokens == 10 and report.usage.context_tokens == 30


def test_tools_offered_to_the_model(server, home):
    server.add(text_reply("hi"))
    agent(server, home)[0]()
    names = [t["function"]["name"] for t in server.chat_requests()[0].body["tools"]]
    assert names == ["shell_exec", "write_file", "run_subagent"]


def test_invalid_tool_json_goes_back_to_the_model(server, home):
    server.add(tool_reply("shell_exec", '{"command": "echo hi"'), text_reply("fixed"))
    run, messages, _ = agent(server, home)
    assert run().text == "fixed"
    assert messages[3]["content"].startswith("error: arguments are not valid JSON")


def test_unknown_tool_is_an_error_result(server, home):
    server.add(tool_reply("launch_rockets", {}), text_reply("ok"))
    run, messages, events = agent(server, home)
    run()
    assert "unknown tool 'launch_rockets'" in messages[3]["content"]
    assert [e for e in events if isinstance(e, ToolResult)][0].is_error


def test_third_identical_call_is_refused(server, home):
    call = {"command": "echo x >> count.txt"}
    server.add(*[tool_reply("shell_exec", call, call_id=f"c{i}") for i in range(3)], text_reply("done"))
    run, messages, _ = agent(server, home)
    run()
    assert Path("count.txt").read_text() == "x\nx\n"
    assert "3 times in a row" in messages[-2]["content"]


def test_max_iterations(server, home):
    server.add(tool_reply("shell_exec", {"command": "true 1"}), tool_reply("shell_exec", {"command": "true 2"}))
    run, messages, _ = agent(server, home, limits=loop.Limits(max_iterations=2, retry_delays=()))
    with pytest.raises(LimitReached, match="max_al_iterations"):
        run()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]


def test_tool_budget_keeps_history_valid(server, home):
    calls = [{"index": i, "id": f"c{i}", "type": "function",
              "function": {"name": "shell_exec", "arguments": json.dumps({"command": f"echo {i} >> ran.txt"})}}
             for i in range(3)]
    server.add(sse([chunk(tool_calls=calls), chunk(finish="tool_calls")]))
    run, messages, _ = agent(server, home, limits=loop.Limits(tool_budget=2, retry_delays=()))
    with pytest.raises(LimitReached, match="tool_budget"):
        run()
    assert Path("ran.txt").read_text() == "0\n1\n"
    tool_msgs = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c0", "c1", "c2"]  # every call answered
    assert "budget" in tool_msgs[2]["content"]


class NoRm:
    """A guard of the kind a front end plugs in: refuses `rm`, stops after four requests, and
    records what it was told."""

    def __init__(self):
        self.requests, self.told = 0, []

    def before_request(self, messages):
        self.requests += 1
        if self.requests > 4:
            raise LimitReached("four requests are enough")

    def before_call(self, name, arguments):
        return "rm is not allowed here" if "rm " in json.loads(arguments).get("command", "") else None

    def after_call(self, name, arguments, outcome):
        self.told.append((json.loads(arguments)["command"], outcome.is_error, outcome.content))


def test_guards_refuse_calls_stop_the_turn_and_replace_the_defaults(server, home):
    Path("keep.txt").write_text("precious")
    same = {"command": "echo x >> count.txt"}
    server.add(sse([chunk(tool_calls=[
        {"index": 0, "id": "a", "type": "function", "function": {"name": "shell_exec", "arguments": json.dumps({"command": "rm keep.txt"})}},
        {"index": 1, "id": "b", "type": "function", "function": {"name": "shell_exec", "arguments": json.dumps({"command": "echo kept"})}}]),
        chunk(finish="tool_calls")]),
        *[tool_reply("shell_exec", same, call_id=f"c{i}") for i in range(3)])
    guard = NoRm()
    run, messages, events = agent(server, home, guards=[guard])
    with pytest.raises(LimitReached, match="four requests are enough") as e:
        run()
    assert Path("keep.txt").read_text() == "precious"
    assert guard.told[0] == ("rm keep.txt", True, "error: rm is not allowed here")
    assert guard.told[1] == ("echo kept", False, "kept\n\n\nexit: 0")
    assert [r.is_error for r in events if isinstance(r, ToolResult)] == [True, False, False, False, False]
    assert e.value.turn.steps == 5 and len(server.chat_requests()) == 4
    assert Path("count.txt").read_text() == "x\nx\nx\n"  # the default repeat guard was replaced


def test_retries_on_429_and_503_honouring_retry_after(server, home):
    server.add(json_reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "1"}),
               json_reply({"error": {"message": "down"}}, status=503),
               text_reply("finally"))
    run, messages, events = agent(server, home)
    assert run().text == "finally"
    retries = [e for e in events if isinstance(e, Retry)]
    assert [r.delay for r in retries] == [1, 0] and "slow down" in retries[0].message
    assert len(server.chat_requests()) == 3
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]


def test_retries_run_out(server, home):
    server.add(*[json_reply({"error": {"message": "down"}}, status=503) for _ in range(4)])
    run, messages, _ = agent(server, home)
    with pytest.raises(APIError, match="503"):
        run()
    assert len(server.chat_requests()) == 4  # the first try and three retries
    assert len(messages) == 2  # nothing partial was appended


def test_client_error_fails_at_once(server, home):
    server.add(json_reply({"error": {"message": "model not found"}}, status=404))
    run, _, _ = agent(server, home)
    with pytest.raises(APIError, match="model not found"):
        run()
    assert len(server.chat_requests()) == 1


def test_cut_stream_is_retried_without_a_partial_message(server, home):
    server.add(sse([chunk("Half an ans")], done=False, cut=True), text_reply("Whole answer"))
    run, messages, events = agent(server, home)
    assert run().text == "Whole answer"
    assert [m["content"] for m in messages if m["role"] == "assistant"] == ["Whole answer"]
    assert any(isinstance(e, Retry) for e in events)


def test_invalid_assistant_message_recovery(server, home):
    history = [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
               {"role": "assistant", "content": ""}, {"role": "user", "content": "b"}]
    server.add(json_reply({"error": {"message": "Invalid assistant message: content or tool_calls must be set"}},
                          status=400), text_reply("recovered"))
    run, messages, events = agent(server, home, messages=history)
    assert run().text == "recovered"
    sent = server.chat_requests()[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    assert any(isinstance(e, Notice) for e in events)


def test_reasoning_is_not_kept_as_answer(server, home):
    server.add(sse([chunk(reasoning="secret plan"), chunk("<think>more</think>Answer", finish="stop")]))
    run, messages, _ = agent(server, home)
    assert run().text == "Answer"
    assert messages[-1] == {"role": "assistant", "content": "Answer"}


def test_empty_answer_appends_nothing(server, home):
    server.add(sse([chunk("", finish="stop")]))
    run, messages, events = agent(server, home)
    assert run().text == ""
    assert len(messages) == 2 and any(isinstance(e, Notice) for e in events)


def test_run_subagent(server, home):
    server.add(tool_reply("run_subagent", {"prompt": "count the files"}),
               tool_reply("shell_exec", {"command": "echo child-was-here"}),
               text_reply("child result"),
               text_reply("parent result"))
    run, messages, events = agent(server, home)
    assert run().text == "parent result"
    child_first = server.chat_requests()[1].body
    assert child_first["messages"][0]["content"] == "SYSTEM" + CHILD_NOTE
    assert child_first["messages"][1] == {"role": "user", "content": "count the files"}
    assert [t["function"]["name"] for t in child_first["tools"]] == ["shell_exec", "write_file"]
    assert messages[3]["content"] == "child result"
    # the child's answer is a tool result, not answer text; its own tool traces still show
    assert "".join(e.text for e in events if isinstance(e, Text)) == "parent result"
    assert [e.name for e in events if isinstance(e, ToolCall)] == ["run_subagent", "shell_exec"]


def test_connection_refused_exhausts_retries(home):
    cfg = Config(endpoint="http://127.0.0.1:9/v1", model="m")
    provider = OpenAIProvider(cfg)
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider))
    events = []
    with pytest.raises(ProviderError):
        loop.run(provider, [{"role": "user", "content": "x"}], box, loop.Limits(retry_delays=(0, 0)), events.append)
    assert len([e for e in events if isinstance(e, Retry)]) == 2


def cut_tool_call(args_text: str, completion: int) -> Response:
    """A tool call whose arguments stop mid-JSON because the output limit was reached."""
    return sse([chunk(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "shell_exec", "arguments": args_text}}]),
                chunk(finish="length"), chunk(usage=usage(10, completion), no_choices=True)])


def test_a_tool_call_cut_at_the_output_limit_is_asked_again_with_double_max_tokens(server, home):
    server.add(cut_tool_call('{"command": "echo hel', 2000),
               tool_reply("shell_exec", {"command": "echo hello"}), text_reply("done"))
    run, messages, events = agent(server, home)
    assert run().text == "done"
    first, second, third = [r.body for r in server.chat_requests()]
    assert "max_tokens" not in first and second["max_tokens"] == 4000 and "max_tokens" not in third
    assert messages[3]["content"] == "hello\n\n\nexit: 0"  # the cut call never ran
    assert not any("not valid JSON" in str(m.get("content")) for m in messages)
    assert any(isinstance(e, Notice) and "max_tokens=4000" in e.message for e in events)


def test_output_limit_recovery_doubles_up_to_max_tokens_limit_then_gives_up(server, home):
    server.add(*[cut_tool_call('{"command": "ec', 10) for _ in range(3)])
    run, messages, _ = agent(server, home, forward={"max_tokens": 3000},
                             limits=loop.Limits(retry_delays=(0,), max_tokens_limit=8000))
    with pytest.raises(LimitReached, match="cut at the output limit"):
        run()
    assert [r.body["max_tokens"] for r in server.chat_requests()] == [3000, 6000, 8000]
    assert [m["role"] for m in messages] == ["system", "user"]  # nothing half-done was kept
