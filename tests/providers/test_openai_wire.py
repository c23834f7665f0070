"""The OpenAI provider against a real local server sending the bytes real servers send."""
import json

import pytest

from bantam.config import Config
from bantam.errors import APIError, ProviderError
from bantam.events import Reasoning, RequestStarted, Text
from bantam.providers.openai import OpenAIProvider
from tests.fakes.openai_server import (Response, chunk, completion, json_reply, sse, text_reply,
                                       tool_reply, usage)


def complete(server, *responses, messages=None, tools=None, **cfg):
    server.add(*responses)
    provider = OpenAIProvider(Config(endpoint=server.url, model="test-model", **cfg))
    events = []
    reply = provider.complete(messages or [{"role": "user", "content": "hi"}], tools or [],
                              events.append)
    return reply, events


def texts(events, kind=Text):
    return "".join(e.text for e in events if isinstance(e, kind))


def test_request_shape(server):
    complete(server, text_reply("ok"), temperature=0.2, api_key="sk-test-123",
             forward={"top_p": 0.5, "max_tokens": 100},
             tools=[{"type": "function", "function": {"name": "x", "parameters": {}}}])
    req = server.chat_requests()[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["user-agent"] == "Mozilla/5.0 (compatible; Bantam/1.0)"
    assert req.headers["authorization"] == "Bearer sk-test-123"
    body = req.body
    assert body["model"] == "test-model" and body["temperature"] == 0.2 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["reasoning_effort"] == "high"
    assert body["top_p"] == 0.5 and body["max_tokens"] == 100
    assert body["tools"][0]["function"]["name"] == "x"


def test_no_key_no_authorization_header(server):
    complete(server, text_reply("ok"))
    assert "authorization" not in server.chat_requests()[0].headers


def test_streamed_text_and_usage_only_chunk(server):
    reply, events = complete(server, text_reply("Hello there, world", usage(12, 4, cached=8)))
    assert isinstance(events[0], RequestStarted)
    assert texts(events) == "Hello there, world"
    assert len([e for e in events if isinstance(e, Text)]) >= 3  # streamed, not buffered
    assert reply.message == {"role": "assistant", "content": "Hello there, world"}
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.cached_tokens) == (12, 4, 8)


@pytest.mark.parametrize("space", [True, False])
@pytest.mark.parametrize("crlf", [True, False])
def test_data_lines_with_and_without_space_and_crlf(server, space, crlf):
    reply, _ = complete(server, sse([chunk("a"), chunk("b", finish="stop")], space=space, crlf=crlf))
    assert reply.message["content"] == "ab"


def test_comments_and_keepalives_are_skipped(server):
    reply, _ = complete(server, sse([chunk("x"), ": OPENROUTER PROCESSING", chunk("y", finish="stop")],
                                    comments=(": OPENROUTER PROCESSING", ":")))
    # a comment between events arrives as a raw data-less line
    assert reply.message["content"] == "xy"


def test_bytes_split_anywhere(server):
    events = [chunk("héllo "), chunk("wörld"), chunk(finish="stop"), chunk(usage=usage(), no_choices=True)]
    reply, _ = complete(server, sse(events, split=7))
    assert reply.message["content"] == "héllo wörld"
    assert reply.usage.prompt_tokens == 10


def test_tool_call_fragments_and_interleaved_indices(server):
    events = [
        chunk(tool_calls=[{"index": 0, "id": "call_a", "type": "function",
                           "function": {"name": "shell_exec", "arguments": ""}}]),
        chunk(tool_calls=[{"index": 1, "id": "call_b", "type": "function",
                           "function": {"name": "write_file", "arguments": '{"pa'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"comm'}}]),
        chunk(tool_calls=[{"index": 1, "function": {"arguments": 'th": "f", "content": ""}'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": 'and": "ls"}'}}]),
        chunk(finish="tool_calls"),
    ]
    reply, _ = complete(server, sse(events))
    calls = reply.message["tool_calls"]
    assert [c["id"] for c in calls] == ["call_a", "call_b"]
    assert [c["function"]["name"] for c in calls] == ["shell_exec", "write_file"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"command": "ls"}
    assert json.loads(calls[1]["function"]["arguments"]) == {"path": "f", "content": ""}
    assert reply.message["content"] is None


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_fields(server, field):
    events = [chunk(reasoning="think ", reasoning_field=field), chunk(reasoning="hard", reasoning_field=field),
              chunk("answer", finish="stop")]
    reply, got = complete(server, sse(events))
    assert texts(got, Reasoning) == "think hard"
    assert reply.message["content"] == "answer"  # reasoning is never answer text


def test_think_tags_split_across_chunks(server):
    events = [chunk("<thi"), chunk("nk>plan it"), chunk("</th"), chunk("ink>\n\nThe answer"), chunk(finish="stop")]
    reply, got = complete(server, sse(events))
    assert texts(got, Reasoning) == "plan it"
    assert texts(got) == "The answer"
    assert reply.message["content"] == "The answer"


def test_empty_string_content_is_not_an_answer(server):
    events = [chunk(""), chunk(tool_calls=[{"index": 0, "id": "c", "function": {"name": "t", "arguments": "{}"}}]),
              chunk("", finish="tool_calls")]
    reply, got = complete(server, sse(events))
    assert reply.message["content"] is None and not [e for e in got if isinstance(e, Text)]


def test_deepseek_cache_hit_tokens(server):
    u = {"prompt_tokens": 100, "completion_tokens": 3, "prompt_cache_hit_tokens": 64}
    reply, _ = complete(server, sse([chunk("k", finish="stop"), chunk(usage=u, no_choices=True)]))
    assert reply.usage.cached_tokens == 64


def test_error_object_inside_stream(server):
    err = {"error": {"message": "Provider returned error", "code": 502}}
    with pytest.raises(APIError, match="Provider returned error") as info:
        complete(server, sse([chunk("par"), err], done=False))
    assert info.value.retryable


def test_non_retryable_error_inside_stream(server):
    err = {"error": {"message": "context length exceeded", "code": "context_length_exceeded"}}
    with pytest.raises(APIError) as info:
        complete(server, sse([err], done=False))
    assert not info.value.retryable


def test_non_streaming_json(server):
    body = completion("the answer", reasoning="mulling", u=usage(7, 2, cached=0))
    reply, got = complete(server, json_reply(body), stream=False)
    assert server.chat_requests()[0].body["stream"] is False
    assert "stream_options" not in server.chat_requests()[0].body
    assert reply.message["content"] == "the answer"
    assert texts(got, Reasoning) == "mulling" and texts(got) == "the answer"
    assert reply.usage.cached_tokens == 0


def test_non_streaming_tool_calls(server):
    calls = [{"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": '{"command":"ls"}'}}]
    reply, _ = complete(server, json_reply(completion(tool_calls=calls)), stream=False)
    assert reply.message["tool_calls"][0]["function"]["arguments"] == '{"command":"ls"}'


def test_json_answer_to_a_streaming_request(server):
    reply, _ = complete(server, json_reply(completion("plain json")))
    assert reply.message["content"] == "plain json"


def test_html_page_is_a_clear_error(server):
    page = b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>hi</body></html>"
    with pytest.raises(APIError, match="HTML page.*Welcome to nginx.*endpoint") as info:
        complete(server, Response(headers={"Content-Type": "text/html"}, chunks=[page], chunked=False))
    assert not info.value.retryable


def test_html_error_page(server):
    page = b"<html><head><title>502 Bad Gateway</title></head></html>"
    with pytest.raises(APIError, match="HTTP 502.*Bad Gateway") as info:
        complete(server, Response(status=502, headers={"Content-Type": "text/html"}, chunks=[page], chunked=False))
    assert info.value.retryable


def test_connection_closed_mid_stream(server):
    with pytest.raises(ProviderError) as info:
        complete(server, sse([chunk("partial")], done=False, cut=True))
    assert info.value.retryable


def test_stream_that_ends_without_finish_or_done(server):
    with pytest.raises(ProviderError, match="ended before"):
        complete(server, sse([chunk("partial")], done=False))


def test_invalid_json_chunk(server):
    with pytest.raises(ProviderError, match="invalid JSON") as info:  # a stream torn after it began
        complete(server, sse([chunk("par"), "{not json"]))
    assert info.value.retryable
    with pytest.raises(ProviderError, match="answered, but not as an OpenAI-compatible") as info:
        complete(server, sse(["{not json"]))  # nothing of this API at all: another server
    assert not info.value.retryable


def test_stalled_stream_times_out(server):
    with pytest.raises(ProviderError, match="within"):
        complete(server, sse([chunk("a"), chunk("b", finish="stop")], delay=1.5), timeout=0.5)


def test_http_error_carries_api_message_and_redacts_key(server):
    body = {"error": {"message": "Incorrect API key provided: sk-secret-999", "type": "invalid_request_error"}}
    with pytest.raises(APIError) as info:
        complete(server, json_reply(body, status=401), api_key="sk-secret-999")
    assert "Incorrect API key" in str(info.value) and "sk-secret-999" not in str(info.value)
    assert info.value.status == 401 and not info.value.retryable


@pytest.mark.parametrize("status,retry", [(400, False), (404, False), (408, True), (429, True),
                                          (500, True), (503, True), (529, True)])
def test_which_statuses_are_retryable(server, status, retry):
    with pytest.raises(APIError) as info:
        complete(server, json_reply({"error": {"message": "x"}}, status=status, headers={"Retry-After": "7"}))
    assert info.value.retryable is retry and info.value.retry_after == 7


def test_connection_refused_on_this_machine_is_not_retried():
    # nothing listens on that port here: the server is not running (issue 32; tests/providers/test_fail_fast.py)
    provider = OpenAIProvider(Config(endpoint="http://127.0.0.1:9/v1", model="m"))
    with pytest.raises(ProviderError, match="cannot connect to .*connection refused") as info:
        provider.complete([{"role": "user", "content": "hi"}], [], lambda e: None)
    assert not info.value.retryable


def test_endpoint_without_scheme_is_not_retried():
    provider = OpenAIProvider(Config(endpoint="localhost:8080/v1", model="m"))
    with pytest.raises(ProviderError, match="bad endpoint URL") as info:
        provider.complete([{"role": "user", "content": "hi"}], [], lambda e: None)
    assert not info.value.retryable


def test_full_chat_url_is_used_as_is(server):
    server.add(text_reply("ok"))
    provider = OpenAIProvider(Config(endpoint=server.url + "/chat/completions", model="test-model"))
    provider.complete([{"role": "user", "content": "hi"}], [], lambda e: None)
    assert server.chat_requests()[0].path == "/v1/chat/completions"


def test_one_connection_for_many_requests(server):
    server.add(*[text_reply(f"r{i}") for i in range(4)])
    provider = OpenAIProvider(Config(endpoint=server.url, model="test-model"))
    for _ in range(4):
        provider.complete([{"role": "user", "content": "hi"}], [], lambda e: None)
    assert len({r.port for r in server.chat_requests()}) == 1


# --- context window discovery ---------------------------------------------------------------

def window(server, model="test-model", **cfg):
    return OpenAIProvider(Config(endpoint=server.url, model=model, **cfg)).context_window()


def test_window_from_models_list(server):
    server.models = [{"id": "other", "context_length": 5}, {"id": "test-model", "context_length": 131072}]
    assert window(server) == 131072


def test_window_from_llamacpp_props(server):
    server.models = [{"id": "test-model", "owned_by": "llamacpp", "meta": {"n_ctx_train": 8192}}]
    server.props = {"default_generation_settings": {"n_ctx": 4096}}
    assert window(server) == 4096


def test_window_from_ollama_show(server):
    server.models = [{"id": "test-model", "owned_by": "library"}]
    server.show = {"parameters": "stop <eos>\nnum_ctx 16384", "model_info": {"llama.context_length": 131072}}
    assert window(server) == 16384
    assert [r for r in server.requests if r.path == "/api/show"][0].body == {"model": "test-model"}


def test_window_unknown(server):
    assert window(server) is None
    assert OpenAIProvider(Config(endpoint="http://127.0.0.1:9/v1", model="m")).context_window() is None


def test_list_models(server):
    server.models = [{"id": "a"}, {"id": "b"}]
    assert OpenAIProvider(Config(endpoint=server.url, model="a")).list_models() == ["a", "b"]


def test_rejected_reasoning_effort_is_dropped(server):
    err = {"error": {"message": "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                     "type": "invalid_request_error", "param": "reasoning_effort"}}
    reply, events = complete(server, json_reply(err, status=400), text_reply("fine"), text_reply("again"))
    assert reply.message["content"] == "fine"
    first, second = server.chat_requests()
    assert "reasoning_effort" in first.body and "reasoning_effort" not in second.body
    assert any("reasoning_effort" in getattr(e, "message", "") for e in events)


def test_other_400_errors_are_not_retried(server):
    with pytest.raises(APIError, match="max_tokens is too large"):
        complete(server, json_reply({"error": {"message": "max_tokens is too large"}}, status=400))
    assert len(server.chat_requests()) == 1
