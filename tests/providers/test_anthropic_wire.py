"""The Anthropic provider against a real local server sending the bytes the Messages API sends."""
import json

import pytest

from bantam import config, loop
from bantam.config import Config
from bantam.errors import APIError, ProviderError
from bantam.events import Reasoning, RequestStarted, Retry, Text, UsageReport
from bantam.providers import make_provider
from bantam.providers.anthropic import AnthropicProvider
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.anthropic_server import (AnthropicServer, error_body, error_event, ev, finish,
                                          message_json, message_start, redacted_block, stream,
                                          text_block, text_reply, thinking_block, tool_block,
                                          tool_reply)

TOOLS = [{"type": "function", "function": {"name": "shell_exec", "description": "Run a command",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}}}}}]


@pytest.fixture
def server():
    with AnthropicServer() as s:
        yield s


def complete(server, *responses, messages=None, tools=None, **cfg):
    server.add(*responses)
    provider = AnthropicProvider(Config(endpoint=server.url, model="claude-test", provider="anthropic", **cfg))
    events = []
    reply = provider.complete(messages or [{"role": "user", "content": "hi"}], tools or [], events.append)
    return reply, events


def sent(server, n=0):
    return server.messages_requests()[n].body


def texts(events, kind=Text):
    return "".join(e.text for e in events if isinstance(e, kind))


def agent(server, home, messages=None, **cfg_values):
    cfg = Config(endpoint=server.url, model="claude-test", provider="anthropic", **cfg_values)
    provider = make_provider(cfg)
    events = []
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider, "SYSTEM", events.append))
    messages = messages if messages is not None else [{"role": "system", "content": "SYSTEM"},
                                                      {"role": "user", "content": "go"}]
    return lambda: loop.run(provider, messages, box, loop.Limits(retry_delays=(0, 0, 0)), events.append), \
        messages, events


# --- the request ------------------------------------------------------------------------------

def test_request_shape(server):
    history = [{"role": "system", "content": "Be brief."}, {"role": "system", "content": "Use tools."},
               {"role": "user", "content": "hi"}]
    complete(server, text_reply("ok"), messages=history, tools=TOOLS, api_key="sk-ant-123", temperature=0.2)
    req = server.messages_requests()[0]
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == "sk-ant-123" and "authorization" not in req.headers
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["user-agent"] == "Mozilla/5.0 (compatible; Bantam/1.0)"
    body = req.body
    assert body["model"] == "claude-test" and body["max_tokens"] == 8192
    assert body["temperature"] == 0.2 and body["stream"] is True
    # the system prompt is a plain string (a proxy in front of a llama.cpp server refuses a list for
    # it); the last tool carries the breakpoint that a new session reads the tools back from
    assert body["system"] == "Be brief.\n\nUse tools."
    assert list(body)[:4] == ["model", "tools", "system", "messages"]  # Anthropic's cache order
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]
    assert body["tools"] == [{"name": "shell_exec", "description": "Run a command",
                              "input_schema": TOOLS[0]["function"]["parameters"],
                              "cache_control": {"type": "ephemeral"}}]
    assert "reasoning_effort" not in body and "stream_options" not in body


def test_no_key_no_key_header(server):
    complete(server, text_reply("ok"))
    assert "x-api-key" not in server.messages_requests()[0].headers


def test_forwarded_keys_override_max_tokens_and_thinking_drops_temperature(server):
    thinking = {"type": "enabled", "budget_tokens": 2000}
    complete(server, text_reply("ok"), forward={"max_tokens": 16000, "thinking": thinking, "top_k": 5})
    body = sent(server)
    assert body["max_tokens"] == 16000 and body["thinking"] == thinking and body["top_k"] == 5
    assert "temperature" not in body  # Anthropic allows only the default with thinking on


def test_max_tokens_above_the_models_limit_is_lowered(server):
    err = "max_tokens: 8192 > 4096, which is the maximum allowed number of output tokens for claude-3-haiku"
    reply, events = complete(server, error_body("invalid_request_error", err, 400), text_reply("fine"))
    assert reply.message["content"] == "fine"
    assert [r.body["max_tokens"] for r in server.messages_requests()] == [8192, 4096]
    assert any("4096" in getattr(e, "message", "") for e in events)


# --- the stream -------------------------------------------------------------------------------

def test_streamed_text_usage_and_ping(server):
    reply, events = complete(server, text_reply("Hello there, world", 12, 4, cache_read=100, cache_creation=30))
    assert isinstance(events[0], RequestStarted)
    assert texts(events) == "Hello there, world"
    assert len([e for e in events if isinstance(e, Text)]) >= 3  # streamed, not buffered
    assert reply.message == {"role": "assistant", "content": "Hello there, world"}
    assert reply.finish_reason == "end_turn"
    u = reply.usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.context_tokens) == (142, 4, 100, 142)


def test_tool_use_with_partial_json(server):
    answer = tool_reply("shell_exec", {"command": "ls -la"}, "toolu_A", text="Let me look.")
    reply, events = complete(server, answer)
    assert reply.message["content"] == "Let me look." and texts(events) == "Let me look."
    assert reply.message["tool_calls"] == [{"id": "toolu_A", "type": "function", "function": {
        "name": "shell_exec", "arguments": '{"command": "ls -la"}'}}]
    assert reply.finish_reason == "tool_use"


def test_two_tool_uses_and_no_text(server):
    events = [message_start(), *tool_block(0, "shell_exec", {"command": "a"}, "t1"),
              *tool_block(1, "write_file", {"path": "f", "content": ""}, "t2"), *finish("tool_use")]
    reply, got = complete(server, stream(events))
    assert reply.message["content"] is None and not texts(got)
    calls = reply.message["tool_calls"]
    assert [c["id"] for c in calls] == ["t1", "t2"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"path": "f", "content": ""}


def test_tool_without_arguments(server):
    events = [message_start(), ev("content_block_start", index=0, content_block={
        "type": "tool_use", "id": "t1", "name": "now", "input": {}}), ev("content_block_stop", index=0),
        *finish("tool_use")]
    reply, _ = complete(server, stream(events))
    assert reply.message["tool_calls"][0]["function"]["arguments"] == "{}"


def test_thinking_and_redacted_thinking(server):
    events = [message_start(), *thinking_block(0, "Let me think hard.", "sig-1"), *redacted_block(1, "BLOB"),
              *text_block(2, "Answer."), *finish()]
    reply, got = complete(server, stream(events))
    assert texts(got, Reasoning) == "Let me think hard." and texts(got) == "Answer."
    assert reply.message["content"] == "Answer."
    assert reply.message["thinking"] == [
        {"type": "thinking", "thinking": "Let me think hard.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "BLOB"}]


def test_overloaded_error_mid_stream_is_retryable(server):
    with pytest.raises(APIError, match="Overloaded") as info:
        complete(server, stream([message_start(), *text_block(0, "par")[:2],
                                 error_event("overloaded_error", "Overloaded")]))
    assert info.value.retryable


def test_invalid_request_error_mid_stream_is_not_retryable(server):
    with pytest.raises(APIError, match="bad thing") as info:
        complete(server, stream([error_event("invalid_request_error", "bad thing")]))
    assert not info.value.retryable


def test_stream_that_ends_without_message_stop(server):
    with pytest.raises(ProviderError, match="ended before") as info:
        complete(server, stream([message_start(), *text_block(0, "partial")]))
    assert info.value.retryable


def test_connection_cut_mid_stream(server):
    with pytest.raises(ProviderError) as info:
        complete(server, stream([message_start(), *text_block(0, "partial")], cut=True))
    assert info.value.retryable


def test_invalid_json_event(server):
    with pytest.raises(ProviderError, match="invalid JSON"):
        complete(server, stream([message_start(), "event: content_block_delta\ndata: {not json\n\n"]))


def test_max_tokens_stop_is_asked_again_with_double_max_tokens(server):
    server.add(stream([message_start(), *text_block(0, "cut sho"), *finish("max_tokens")]),
               text_reply("the whole answer"))
    provider = AnthropicProvider(Config(endpoint=server.url, model="claude-test", provider="anthropic"))
    events = []
    reply = loop.request(provider, [{"role": "user", "content": "hi"}], [], loop.Limits(retry_delays=()),
                         events.append)
    assert reply.message["content"] == "the whole answer"
    assert [sent(server, n)["max_tokens"] for n in (0, 1)] == [8192, 16384]
    assert any(isinstance(e, Retry) and "max_tokens=16384" in e.message for e in events)


def test_non_streaming_json(server):
    content = [{"type": "thinking", "thinking": "mulling", "signature": "s"},
               {"type": "text", "text": "Running it."},
               {"type": "tool_use", "id": "t9", "name": "shell_exec", "input": {"command": "ls"}}]
    reply, got = complete(server, message_json(content, "tool_use", 20, 3, cache_read=7), stream=False)
    assert sent(server)["stream"] is False
    assert texts(got, Reasoning) == "mulling" and texts(got) == "Running it."
    assert reply.message["tool_calls"][0]["function"]["arguments"] == '{"command": "ls"}'
    assert reply.message["thinking"] == [content[0]]
    assert (reply.usage.prompt_tokens, reply.usage.cached_tokens) == (27, 7)


# --- errors over HTTP -------------------------------------------------------------------------

def test_http_400_fails_at_once_with_the_api_message(server, home):
    server.add(error_body("invalid_request_error", "messages: roles must alternate", 400))
    run, messages, _ = agent(server, home)
    with pytest.raises(APIError, match="roles must alternate") as info:
        run()
    assert info.value.status == 400 and not info.value.retryable
    assert len(server.messages_requests()) == 1


def test_http_529_then_success(server, home):
    server.add(error_body("overloaded_error", "Overloaded", 529), text_reply("made it"))
    run, _, events = agent(server, home)
    assert run().text == "made it"
    assert len(server.messages_requests()) == 2
    assert "HTTP 529: Overloaded" in [e for e in events if isinstance(e, Retry)][0].message


def test_overloaded_mid_stream_then_success_through_the_loop(server, home):
    server.add(stream([message_start(), *text_block(0, "Hel")[:2], error_event("overloaded_error", "Overloaded")]),
               text_reply("Hello again"))
    run, messages, events = agent(server, home)
    assert run().text == "Hello again"
    assert [e.attempt for e in events if isinstance(e, Retry)] == [1]
    assert messages[-1]["content"] == "Hello again" and len(messages) == 3


# --- the history, translated ------------------------------------------------------------------

def test_tool_round_trip_through_the_loop(server, home):
    calls = [message_start(), *text_block(0, "Two checks."),
             *tool_block(1, "shell_exec", {"command": "echo one"}, "toolu_1"),
             *tool_block(2, "shell_exec", {"command": "echo two"}, "toolu_2"), *finish("tool_use")]
    server.add(stream(calls), text_reply("Both ran.", 50, 5))
    run, messages, events = agent(server, home)
    assert run().text == "Both ran."
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    second = sent(server, 1)
    assert second["system"] == "SYSTEM"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"] == [
        {"type": "text", "text": "Two checks."},
        {"type": "tool_use", "id": "toolu_1", "name": "shell_exec", "input": {"command": "echo one"}},
        {"type": "tool_use", "id": "toolu_2", "name": "shell_exec", "input": {"command": "echo two"}}]
    results = second["messages"][2]["content"]  # both results in one user message
    assert results[0] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one\n\n\nexit: 0"}
    assert results[1]["tool_use_id"] == "toolu_2" and results[1]["content"] == "two\n\n\nexit: 0"
    assert results[1]["cache_control"] == {"type": "ephemeral"}
    assert [t["name"] for t in second["tools"]][:2] == ["shell_exec", "write_file"]
    assert [e for e in events if isinstance(e, UsageReport)][0].usage.prompt_tokens == 60


def test_thinking_is_replayed_with_its_signature(server, home):
    first = [message_start(), *thinking_block(0, "I should list files.", "sig-xyz"), *redacted_block(1, "R=="),
             *tool_block(2, "shell_exec", {"command": "echo hi"}, "toolu_7"), *finish("tool_use")]
    server.add(stream(first), text_reply("Done."))
    run, messages, _ = agent(server, home, forward={"thinking": {"type": "enabled", "budget_tokens": 2000}})
    run()
    assistant = sent(server, 1)["messages"][1]
    assert assistant["content"][:2] == [
        {"type": "thinking", "thinking": "I should list files.", "signature": "sig-xyz"},
        {"type": "redacted_thinking", "data": "R=="}]
    assert assistant["content"][2]["type"] == "tool_use"
    assert messages[2]["thinking"][0]["signature"] == "sig-xyz"  # kept in bantam's history


def test_user_text_after_tool_results_joins_their_message(server):
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "t1", "type": "function", "function": {"name": "x", "arguments": "{bad json"}}]},
               {"role": "tool", "tool_call_id": "t1", "content": "result"},
               {"role": "user", "content": "and now?"}]
    complete(server, text_reply("ok"), messages=history)
    msgs = sent(server)["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]  # no empty text
    assert [b["type"] for b in msgs[2]["content"]] == ["tool_result", "text"]
    assert msgs[2]["content"][1]["text"] == "and now?"


def test_images_become_base64_image_blocks(server):
    parts = [{"type": "text", "text": "What is this?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
             {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]
    complete(server, text_reply("A pixel."), messages=[{"role": "user", "content": parts}])
    blocks = sent(server)["messages"][0]["content"]
    assert blocks[0] == {"type": "text", "text": "What is this?"}
    assert blocks[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                     "data": "iVBORw0KGgo="}}
    assert blocks[2]["source"] == {"type": "url", "url": "https://example.com/cat.jpg"}


# --- endpoints, inference, models, the CLI ----------------------------------------------------

def test_full_messages_url_infers_the_provider_and_is_used_as_is(server, home):
    cfg = config.load({"endpoint": server.url + "/messages", "model": "claude-test"}, environ={})
    assert cfg.provider == "anthropic"
    provider = make_provider(cfg)
    assert isinstance(provider, AnthropicProvider)
    server.add(text_reply("ok"))
    provider.complete([{"role": "user", "content": "hi"}], [], lambda e: None)
    assert server.messages_requests()[0].path == "/v1/messages"


def test_anthropic_key_from_the_environment(home):
    cfg = config.load({"endpoint": "https://api.anthropic.com/v1"}, environ={"ANTHROPIC_API_KEY": "sk-ant-env"})
    assert cfg.provider == "anthropic" and AnthropicProvider(cfg).headers()["x-api-key"] == "sk-ant-env"


def test_bare_host_gets_v1(server):
    server.add(text_reply("ok"))
    provider = AnthropicProvider(Config(endpoint=server.url.removesuffix("/v1"), model="m", provider="anthropic"))
    provider.complete([{"role": "user", "content": "hi"}], [], lambda e: None)
    assert server.messages_requests()[0].path == "/v1/messages"


def test_list_models_with_anthropic_headers(server):
    server.models = [{"type": "model", "id": "claude-a", "display_name": "A"}, {"type": "model", "id": "claude-b"}]
    cfg = Config(endpoint=server.url, model="claude-a", provider="anthropic", api_key="k-1")
    provider = AnthropicProvider(cfg)
    assert provider.list_models() == ["claude-a", "claude-b"]
    assert provider.context_window() is None
    req = server.requests[-1]
    assert req.path == "/v1/models?limit=1000" and req.headers["x-api-key"] == "k-1"
    assert req.headers["anthropic-version"] == "2023-06-01"


def test_cli_usage_line_shows_cache_tokens(home, server):
    write_cfg(home, **base_cfg(server, provider="anthropic", model="claude-test"))
    server.add(text_reply("Cached answer.", 20, 7, cache_read=1000, cache_creation=200))
    r = run_bantam("-p", "x", cwd=home)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Cached answer.\n"
    assert "[claude-test: 1220 prompt (1000 cached, 200 written to cache, 20 uncached) + 7 completion" in r.stderr
    assert sent(server)["messages"][0]["content"][0]["text"] == "x"
