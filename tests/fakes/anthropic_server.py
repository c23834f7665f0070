"""Builders for the Anthropic Messages wire format, served by the same real local FakeServer.

FakeServer answers POST `.../messages` from its script as it does `/chat/completions`; these
helpers write the bytes Anthropic sends: `event: NAME` + `data: {...}` server-sent events
(message_start, content_block_*, ping, message_delta, message_stop, error) and whole JSON bodies.
"""
from __future__ import annotations

import json
from typing import Any

from tests.fakes.openai_server import FakeServer, Response, json_reply


class AnthropicServer(FakeServer):
    def messages_requests(self) -> list:
        return [r for r in self.requests if r.path.endswith("/messages")]


Event = tuple[str, dict]


def ev(kind: str, **data: Any) -> Event:
    return kind, {"type": kind, **data}


def stream(events: list[Event | str], **kw: Any) -> Response:
    """(name, data) pairs as `event:`/`data:` lines; raw strings are sent as they are."""
    pieces = [e if isinstance(e, str) else f"event: {e[0]}\ndata: {json.dumps(e[1])}\n\n" for e in events]
    return Response(headers={"Content-Type": "text/event-stream"}, chunks=[p.encode() for p in pieces], **kw)


def message_start(input_tokens: int = 10, cache_read: int = 0, cache_creation: int = 0) -> Event:
    usage = {"input_tokens": input_tokens, "cache_creation_input_tokens": cache_creation,
             "cache_read_input_tokens": cache_read, "output_tokens": 1}
    return ev("message_start", message={"id": "msg_1", "type": "message", "role": "assistant",
                                        "model": "claude-test", "content": [], "stop_reason": None,
                                        "stop_sequence": None, "usage": usage})


def text_block(index: int, text: str, pieces: int = 3) -> list[Event]:
    step = max(1, len(text) // pieces)
    return [ev("content_block_start", index=index, content_block={"type": "text", "text": ""}),
            *[ev("content_block_delta", index=index, delta={"type": "text_delta", "text": text[i:i + step]})
              for i in range(0, len(text), step)],
            ev("content_block_stop", index=index)]


def tool_block(index: int, name: str, args: Any, tool_id: str = "toolu_1", fragments: int = 3) -> list[Event]:
    text = args if isinstance(args, str) else json.dumps(args)
    step = max(1, len(text) // fragments)
    return [ev("content_block_start", index=index,
               content_block={"type": "tool_use", "id": tool_id, "name": name, "input": {}}),
            ev("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": ""}),
            *[ev("content_block_delta", index=index,
                 delta={"type": "input_json_delta", "partial_json": text[i:i + step]})
              for i in range(0, len(text), step)],
            ev("content_block_stop", index=index)]


def thinking_block(index: int, thinking: str, signature: str = "sig-abc") -> list[Event]:
    half = len(thinking) // 2
    return [ev("content_block_start", index=index,
               content_block={"type": "thinking", "thinking": "", "signature": ""}),
            ev("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": thinking[:half]}),
            ev("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": thinking[half:]}),
            ev("content_block_delta", index=index, delta={"type": "signature_delta", "signature": signature}),
            ev("content_block_stop", index=index)]


def redacted_block(index: int, data: str = "EncryptedBlob==") -> list[Event]:
    return [ev("content_block_start", index=index, content_block={"type": "redacted_thinking", "data": data}),
            ev("content_block_stop", index=index)]


def finish(stop_reason: str = "end_turn", output_tokens: int = 5) -> list[Event]:
    return [ev("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": None},
               usage={"output_tokens": output_tokens}),
            ev("message_stop")]


def text_reply(text: str, input_tokens: int = 10, output_tokens: int = 5, **cache: int) -> Response:
    return stream([message_start(input_tokens, **cache), ev("ping"), *text_block(0, text),
                   *finish("end_turn", output_tokens)])


def tool_reply(name: str, args: Any, tool_id: str = "toolu_1", text: str = "", **usage: int) -> Response:
    blocks = text_block(0, text) if text else []
    return stream([message_start(), *blocks, *tool_block(len(blocks) and 1, name, args, tool_id),
                   *finish("tool_use", **usage)])


def error_event(kind: str, message: str) -> Event:
    return ev("error", error={"type": kind, "message": message})


def error_body(kind: str, message: str, status: int, headers: dict | None = None) -> Response:
    return json_reply({"type": "error", "error": {"type": kind, "message": message}}, status, headers)


def message_json(content: list[dict], stop_reason: str = "end_turn", input_tokens: int = 10,
                 output_tokens: int = 5, **cache: int) -> Response:
    """A whole non-streaming Messages response."""
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
             "cache_read_input_tokens": cache.get("cache_read", 0),
             "cache_creation_input_tokens": cache.get("cache_creation", 0)}
    return json_reply({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                       "content": content, "stop_reason": stop_reason, "stop_sequence": None, "usage": usage})
