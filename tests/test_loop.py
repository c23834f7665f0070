"""The loop, guards and tools, driven by a scripted model in process (tests/fakes/scripted.py) with
real tools on real files. At the end, a few turns through the real OpenAI provider against a real
local server: what the loop does with what only a wire produces (a cut stream, a refused
connection, the output budget in the request body)."""
import json
import threading
from pathlib import Path

import pytest

from bantam import loop
from bantam.config import Config
from bantam.errors import APIError, LimitReached, ProviderError
from bantam.events import Notice, Reasoning, RequestStarted, Retry, Text, ToolCall, ToolResult, UsageReport
from bantam.providers import context_window_later
from bantam.providers.openai import OpenAIProvider
from bantam.tools import ToolContext, make_toolbox
from bantam.tools.subagent import CHILD_NOTE
from tests.fakes import scripted
from tests.fakes.openai_server import Response, chunk, sse, text_reply, tool_reply, usage
from tests.fakes.scripted import ScriptedProvider, call, calls, text, tool

pytestmark = pytest.mark.quick


def agent(provider, messages=None, limits=None, guards=None, **cfg_values):
    """A turn of the loop with the default tools, on `provider` (the tools' own settings come from
    `cfg_values`); returns (run, messages, events)."""
    cfg = Config(model="test-model", **cfg_values)
    events = []
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider, "SYSTEM", events.append))
    messages = messages if messages is not None else [{"role": "system", "content": "SYSTEM"},
                                                      {"role": "user", "content": "go"}]
    limits = limits or loop.Limits(retry_delays=(0, 0, 0))
    return lambda: loop.run(provider, messages, box, limits, events.append, guards=guards), messages, events


def test_tool_step_then_answer(home):
    model = ScriptedProvider(tool("shell_exec", {"command": "echo hello"}, usage=scripted.usage(10, 2)),
                             text("It printed hello.", scripted.usage(30, 5, cached=10), chunks=3))
    run, messages, events = agent(model)
    turn = run()
    assert turn.text == "It printed hello." and turn.steps == 2
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "hello\n\n\nexit: 0"}
    assert model.requests[1].messages[3]["content"] == "hello\n\n\nexit: 0"
    assert [type(e) for e in events if isinstance(e, (ToolCall, ToolResult))] == [ToolCall, ToolResult]
    assert "".join(e.text for e in events if isinstance(e, Text)) == "It printed hello."
    assert sum(isinstance(e, RequestStarted) for e in events) == 2
    report = [e for e in events if isinstance(e, UsageReport)][0]
    assert (report.usage.prompt_tokens, report.usage.completion_tokens) == (40, 7)
    assert report.usage.cached_tokens == 10 and report.usage.context_tokens == 30


def test_tools_offered_to_the_model(home):
    model = ScriptedProvider(text("hi"))
    agent(model)[0]()
    assert model.requests[0].tool_names() == ["shell_exec", "write_file", "run_subagent"]


def test_invalid_tool_json_goes_back_to_the_model(home):
    model = ScriptedProvider(tool("shell_exec", '{"command": "echo hi"'), text("fixed"))
    run, messages, _ = agent(model)
    assert run().text == "fixed"
    assert messages[3]["content"].startswith("error: arguments are not valid JSON")


def test_unknown_tool_is_an_error_result(home):
    run, messages, events = agent(ScriptedProvider(tool("launch_rockets", {}), text("ok")))
    run()
    assert "unknown tool 'launch_rockets'" in messages[3]["content"]
    assert [e for e in events if isinstance(e, ToolResult)][0].is_error


def test_third_identical_call_is_refused(home):
    same = {"command": "echo x >> count.txt"}
    run, messages, _ = agent(ScriptedProvider(*[tool("shell_exec", same, call_id=f"c{i}") for i in range(3)],
                                              text("done")))
    run()
    assert Path("count.txt").read_text() == "x\nx\n"
    assert "3 times in a row" in messages[-2]["content"]


def test_a_turn_that_keeps_repeating_a_refused_call_ends_saying_so(home):
    """A small model that repeats one call after every refusal ends the turn, not the iteration limit."""
    same = {"command": "echo x >> count.txt"}
    model = ScriptedProvider(*[tool("shell_exec", same, call_id=f"c{i}") for i in range(20)])
    run, messages, _ = agent(model, limits=loop.Limits(max_iterations=50, retry_delays=()))
    with pytest.raises(LimitReached, match="kept repeating shell_exec"):
        run()
    assert Path("count.txt").read_text() == "x\nx\n"
    assert len(model.requests) == 2 + loop.REFUSALS_TO_STOP  # run twice, then refused until the turn stops


def test_a_write_made_again_at_once_is_refused_so_a_splice_is_not_doubled(home):
    """A small model repeats the write it just made: the second is not run (a splice made twice
    inserts its text twice), but the same write after another call runs."""
    write = {"path": "greeting.txt", "content": "Hello!", "offset": 0, "del_bytes": 0}
    model = ScriptedProvider(tool("write_file", write, call_id="w1"), tool("write_file", write, call_id="w2"),
                             tool("shell_exec", {"command": "true"}), tool("write_file", write, call_id="w3"),
                             text("done"))
    run, messages, _ = agent(model)
    run()
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert results[1].startswith("error: not written again: this exact write was just made")
    assert results[3].startswith("wrote 6 bytes at offset 0")  # something ran between: meant again
    assert Path("greeting.txt").read_text() == "Hello!Hello!"


def test_the_same_text_spliced_again_at_another_offset_is_refused(home):
    """A small model appended one line, then the same line at the new end, again and again; the
    second is refused. A whole write of the same text (a correction) still runs, and so does the
    same splice after another call."""
    line = {"path": "answer.txt", "content": "37\n"}
    model = ScriptedProvider(tool("write_file", {**line, "offset": 0, "del_bytes": 0}, call_id="w1"),
                             tool("write_file", {**line, "offset": 3, "del_bytes": 0}, call_id="w2"),
                             tool("write_file", line, call_id="w3"),
                             tool("shell_exec", {"command": "true"}),
                             tool("write_file", {**line, "offset": 3}, call_id="w4"),
                             text("done"))
    run, messages, _ = agent(model)
    run()
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert results[1].startswith("error: not written again: this text was just written to this file")
    assert results[2].startswith("wrote 3 bytes to answer.txt")  # whole: the file is that text
    assert results[4].startswith("wrote 3 bytes at offset 3")    # something ran between: meant again
    assert Path("answer.txt").read_text() == "37\n37\n"


def test_a_write_of_the_last_writes_report_is_refused(home):
    """"wrote 4 bytes to output.txt" written over output.txt would replace its content with
    bantam's words; the model is told, and the file keeps what was written."""
    model = ScriptedProvider(tool("write_file", {"path": "answer.txt", "content": "42"}),
                             tool("write_file", {"path": "answer.txt", "content": "wrote 2 bytes to answer.txt"}),
                             text("done"))
    run, messages, _ = agent(model)
    run()
    assert messages[5]["content"].startswith("error: not written: this content is the report of your last write")
    assert Path("answer.txt").read_text() == "42"


def test_a_raw_newline_inside_an_argument_is_a_newline(home):
    """JSON forbids a raw control character inside a string; a model writes one all the same, and
    refusing the call over it made a small model give up the task."""
    model = ScriptedProvider(tool("write_file", '{"path": "a.txt", "content": "one\ntwo"}'), text("done"))
    run, messages, _ = agent(model)
    run()
    assert not messages[3]["content"].startswith("error"), messages[3]["content"]
    assert Path("a.txt").read_text() == "one\ntwo"


def test_max_iterations(home):
    model = ScriptedProvider(tool("shell_exec", {"command": "true 1"}), tool("shell_exec", {"command": "true 2"}))
    run, messages, _ = agent(model, limits=loop.Limits(max_iterations=2, retry_delays=()))
    with pytest.raises(LimitReached, match="max_al_iterations"):
        run()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]


def test_tool_budget_keeps_history_valid(home):
    model = ScriptedProvider(calls(*[call("shell_exec", {"command": f"echo {i} >> ran.txt"}, f"c{i}")
                                     for i in range(3)]))
    run, messages, _ = agent(model, limits=loop.Limits(tool_budget=2, retry_delays=()))
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


def test_guards_refuse_calls_stop_the_turn_and_replace_the_defaults(home):
    Path("keep.txt").write_text("precious")
    same = {"command": "echo x >> count.txt"}
    model = ScriptedProvider(calls(call("shell_exec", {"command": "rm keep.txt"}, "a"),
                                   call("shell_exec", {"command": "echo kept"}, "b")),
                             *[tool("shell_exec", same, call_id=f"c{i}") for i in range(3)])
    guard = NoRm()
    run, messages, events = agent(model, guards=[guard])
    with pytest.raises(LimitReached, match="four requests are enough") as e:
        run()
    assert Path("keep.txt").read_text() == "precious"
    assert guard.told[0] == ("rm keep.txt", True, "error: rm is not allowed here")
    assert guard.told[1] == ("echo kept", False, "kept\n\n\nexit: 0")
    assert [r.is_error for r in events if isinstance(r, ToolResult)] == [True, False, False, False, False]
    assert e.value.turn.steps == 5 and len(model.requests) == 4
    assert Path("count.txt").read_text() == "x\nx\nx\n"  # the default repeat guard was replaced


def test_retries_honour_retry_after(home):
    # a Retry-After longer than the configured delay wins; one shorter does not shorten it (the
    # header's parsing is the wire's: tests/providers/test_openai_wire.py)
    model = ScriptedProvider(APIError("HTTP 429: slow down", status=429, retryable=True, retry_after=0.2),
                             APIError("HTTP 503: down", status=503, retryable=True, retry_after=0.0),
                             text("finally"))
    run, messages, events = agent(model, limits=loop.Limits(retry_delays=(0.1, 0.1, 0)))
    assert run().text == "finally"
    retries = [e for e in events if isinstance(e, Retry)]
    assert [r.delay for r in retries] == [0.2, 0.1] and "slow down" in retries[0].message
    assert len(model.requests) == 3
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]


def test_retries_run_out(home):
    model = ScriptedProvider(*[APIError("HTTP 503: down", status=503, retryable=True) for _ in range(4)])
    run, messages, _ = agent(model)
    with pytest.raises(APIError, match="503"):
        run()
    assert len(model.requests) == 4  # the first try and three retries
    assert len(messages) == 2  # nothing partial was appended


def test_client_error_fails_at_once(home):
    model = ScriptedProvider(APIError("HTTP 404: model not found", status=404))
    run, _, _ = agent(model)
    with pytest.raises(APIError, match="model not found"):
        run()
    assert len(model.requests) == 1


def test_a_dropped_request_is_retried_without_a_partial_message(home):
    model = ScriptedProvider(ProviderError("the stream ended before the response was complete"),
                             text("Whole answer"))
    run, messages, events = agent(model)
    assert run().text == "Whole answer"
    assert [m["content"] for m in messages if m["role"] == "assistant"] == ["Whole answer"]
    assert len([e for e in events if isinstance(e, Retry)]) == 1


def test_invalid_assistant_message_recovery(home):
    history = [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
               {"role": "assistant", "content": ""}, {"role": "user", "content": "b"}]
    model = ScriptedProvider(APIError("HTTP 400: Invalid assistant message: content or tool_calls must be set",
                                      status=400), text("recovered"))
    run, messages, events = agent(model, messages=history)
    assert run().text == "recovered"
    assert [m["role"] for m in model.requests[1].messages] == ["system", "user", "user"]
    assert any(isinstance(e, Notice) for e in events)


def test_reasoning_is_not_kept_as_answer(home):
    run, messages, events = agent(ScriptedProvider(text("Answer", reasoning="secret plan")))
    assert run().text == "Answer"
    assert messages[-1] == {"role": "assistant", "content": "Answer"}
    assert [e.text for e in events if isinstance(e, Reasoning)] == ["secret plan"]


def test_empty_answer_appends_nothing(home):
    run, messages, events = agent(ScriptedProvider(text("")))
    assert run().text == ""
    assert len(messages) == 2 and any(isinstance(e, Notice) for e in events)


def test_run_subagent(home):
    model = ScriptedProvider(tool("run_subagent", {"prompt": "count the files"}),
                             tool("shell_exec", {"command": "echo child-was-here"}),
                             text("child result"),
                             text("parent result"))
    run, messages, events = agent(model)
    assert run().text == "parent result"
    child_first = model.requests[1]
    assert child_first.messages[0]["content"] == "SYSTEM" + CHILD_NOTE
    assert child_first.messages[1] == {"role": "user", "content": "count the files"}
    assert child_first.tool_names() == ["shell_exec", "write_file"]
    assert model.requests[2].messages[-1]["content"] == "child-was-here\n\n\nexit: 0"
    assert messages[3]["content"] == "child result"
    # the child's answer is a tool result, not answer text; its own tool traces still show
    assert "".join(e.text for e in events if isinstance(e, Text)) == "parent result"
    assert [e.name for e in events if isinstance(e, ToolCall)] == ["run_subagent", "shell_exec"]


def cut_call(arguments: str, completion: int) -> scripted.Step:
    """A tool call whose arguments stop mid-JSON because the output limit was reached."""
    return tool("shell_exec", arguments, usage=scripted.usage(10, completion), finish="length")


def test_a_tool_call_cut_at_the_output_limit_is_asked_again_with_twice_the_budget(home):
    model = ScriptedProvider(cut_call('{"command": "echo hel', 2000),
                             tool("shell_exec", {"command": "echo hello"}), text("done"))
    run, messages, events = agent(model)
    assert run().text == "done"
    assert [r.options.output_tokens for r in model.requests] == [None, 4000, None]  # that request only
    assert messages[3]["content"] == "hello\n\n\nexit: 0"  # the cut call never ran
    assert not any("not valid JSON" in str(m.get("content")) for m in messages)
    assert any(isinstance(e, Retry) and "max_tokens=4000" in e.message for e in events)


def test_output_limit_recovery_doubles_up_to_max_tokens_limit_then_gives_up(home):
    model = ScriptedProvider(*[cut_call('{"command": "ec', 10) for _ in range(3)], output_limit=3000)
    run, messages, _ = agent(model, limits=loop.Limits(retry_delays=(0,), max_tokens_limit=8000))
    with pytest.raises(LimitReached, match="cut at the output limit"):
        run()
    assert [r.options.output_tokens for r in model.requests] == [None, 6000, 8000]
    assert [m["role"] for m in messages] == ["system", "user"]  # nothing half-done was kept


def test_a_text_cut_at_the_output_limit_is_asked_again_then_kept_with_a_notice(home):
    model = ScriptedProvider(*[text("Half of the answ", scripted.usage(10, 600), finish="length") for _ in range(3)])
    run, messages, events = agent(model)
    assert run().text == "Half of the answ"
    assert [r.options.output_tokens for r in model.requests] == [None, 1200, 2400]  # three generations at most
    assert messages[-1] == {"role": "assistant", "content": "Half of the answ"}
    assert any(isinstance(e, loop.AnswerCut) and e.limit == 2400
               and e.message == "answer cut at max_tokens=2400 after 3 attempts; raise max_tokens" for e in events)


class SlowWindow(ScriptedProvider):
    """A model whose window lookup hangs until the test lets it answer."""

    def __init__(self, release):
        super().__init__(window=999)
        self.release = release

    def context_window(self):
        self.release.wait(60)
        return super().context_window()


def test_a_hanging_window_lookup_holds_up_the_usage_line_only_as_long_as_asked(home):
    release = threading.Event()
    facts = context_window_later(SlowWindow(release), Config(context_window=5000), wait=0.01)
    assert facts() == 5000  # not known yet: the configured window, after the wait it was given
    release.set()
    facts.lookup.join(60)
    assert facts() == 999 and facts.cost(scripted.usage(10, 2)) is None  # found later; no prices


# --- through the real OpenAI provider and a real local server -----------------------------------

def wire_agent(server, forward=None, **kwargs):
    return agent(OpenAIProvider(Config(endpoint=server.url, model="test-model", forward=forward or {})), **kwargs)


def test_over_the_wire_a_tool_step_then_answer(server, home):
    server.add(tool_reply("shell_exec", {"command": "echo hello"}, u=usage(10, 2)),
               text_reply("It printed hello.", usage(30, 5, cached=10)))
    run, messages, events = wire_agent(server)
    assert run().text == "It printed hello."
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "hello\n\n\nexit: 0"}
    assert server.chat_requests()[1].body["messages"][3]["content"] == "hello\n\n\nexit: 0"
    report = [e for e in events if isinstance(e, UsageReport)][0]
    assert (report.usage.prompt_tokens, report.usage.completion_tokens, report.usage.cached_tokens) == (40, 7, 10)


def test_cut_stream_is_retried_without_a_partial_message(server, home):
    server.add(sse([chunk("Half an ans")], done=False, cut=True), text_reply("Whole answer"))
    run, messages, events = wire_agent(server)
    assert run().text == "Whole answer"
    assert [m["content"] for m in messages if m["role"] == "assistant"] == ["Whole answer"]
    assert any(isinstance(e, Retry) for e in events)


def test_connection_refused_on_this_machine_is_not_retried(home):
    # issue 32: nothing listens there, so waiting cannot help (tests/providers/test_fail_fast.py)
    cfg = Config(endpoint="http://127.0.0.1:9/v1", model="m")
    provider = OpenAIProvider(cfg)
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider))
    events = []
    with pytest.raises(ProviderError, match="is the server running"):
        loop.run(provider, [{"role": "user", "content": "x"}], box, loop.Limits(retry_delays=(0, 0)), events.append)
    assert [e for e in events if isinstance(e, Retry)] == []


def cut_tool_call(args_text: str, completion: int) -> Response:
    """A tool call whose arguments stop mid-JSON because the output limit was reached."""
    return sse([chunk(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "shell_exec", "arguments": args_text}}]),
                chunk(finish="length"), chunk(usage=usage(10, completion), no_choices=True)])


def test_over_the_wire_the_larger_budget_is_max_tokens_in_that_request_only(server, home):
    server.add(cut_tool_call('{"command": "echo hel', 2000),
               tool_reply("shell_exec", {"command": "echo hello"}), text_reply("done"))
    run, messages, events = wire_agent(server)
    assert run().text == "done"
    first, second, third = [r.body for r in server.chat_requests()]
    assert "max_tokens" not in first and second["max_tokens"] == 4000 and "max_tokens" not in third
    assert messages[3]["content"] == "hello\n\n\nexit: 0"  # the cut call never ran
    assert not any("not valid JSON" in str(m.get("content")) for m in messages)
    assert any(isinstance(e, Retry) and "max_tokens=4000" in e.message for e in events)


def test_over_the_wire_a_configured_max_tokens_is_the_budget_doubled(server, home):
    server.add(*[cut_tool_call('{"command": "ec', 10) for _ in range(3)])
    run, messages, _ = wire_agent(server, forward={"max_tokens": 3000},
                                  limits=loop.Limits(retry_delays=(0,), max_tokens_limit=8000))
    with pytest.raises(LimitReached, match="cut at the output limit"):
        run()
    assert [r.body["max_tokens"] for r in server.chat_requests()] == [3000, 6000, 8000]
    assert [m["role"] for m in messages] == ["system", "user"]  # nothing half-done was kept
