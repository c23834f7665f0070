"""Faults a model server can commit, in the OpenAI and the Anthropic wire formats.

Each fault is a Response the real local FakeServer sends in place of a good answer (or, for
`refuse`, no server at all). `RECOVERS` says what bantam must make of it: a retry that succeeds
(True) or one clear error (False).
"""
from __future__ import annotations

import json
import time
from typing import Callable

from tests.fakes import anthropic_server as anth
from tests.fakes.openai_server import Response, chunk, json_reply, sse, text_reply

HTML_502 = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


def _forever():
    """A stream that never ends: keep-alive comments, forever (until the client hangs up)."""
    yield b": keep-alive\n\n"
    while True:
        time.sleep(0.05)
        yield b": keep-alive\n\n"


def _openai(name: str) -> Response | None:
    return {
        "refuse": None,
        "reset": sse([chunk("Half an ans")], done=False, cut=True),
        "stall": sse([chunk("slow"), chunk(" answer", finish="stop")], delay=3.0),
        "truncated": sse([chunk("no end marker")], done=False),
        "invalid_json": sse([chunk("ok "), '{"choices": [broken'], done=False),
        "429_retry_after": json_reply({"error": {"message": "rate limited"}}, 429, {"Retry-After": "0"}),
        "429": json_reply({"error": {"message": "rate limited"}}, 429),
        "500": json_reply({"error": {"message": "internal error"}}, 500),
        "502": json_reply({"error": {"message": "bad gateway"}}, 502),
        "503": json_reply({"error": {"message": "unavailable"}}, 503),
        "529": json_reply({"error": {"message": "overloaded"}}, 529),
        "html_502": Response(status=502, headers={"Content-Type": "text/html"}, chunks=[HTML_502], chunked=False),
        "html_200": Response(status=200, headers={"Content-Type": "text/html"}, chunks=[HTML_502], chunked=False),
        "empty_200": Response(status=200, headers={"Content-Type": "application/json"}, chunks=[b""], chunked=False),
        "endless": Response(headers={"Content-Type": "text/event-stream"}, chunks=_forever()),
    }[name]


def _anthropic(name: str) -> Response | None:
    start = anth.message_start()
    if name == "reset":
        return anth.stream([start, *anth.text_block(0, "Half an ans")], cut=True)
    if name == "stall":
        return anth.stream([start, *anth.text_block(0, "slow"), *anth.finish()], delay=3.0)
    if name == "truncated":
        return anth.stream([start, *anth.text_block(0, "no end marker")])
    if name == "invalid_json":
        return anth.stream([start, "event: content_block_delta\ndata: {broken\n\n"])
    if name in ("500", "502", "503", "529", "429", "429_retry_after"):
        status = int(name[:3])
        headers = {"Retry-After": "0"} if name == "429_retry_after" else None
        return anth.error_body("overloaded_error" if status == 529 else "api_error", "try later", status, headers)
    return _openai(name)  # refuse, HTML pages, empty 200 and the endless stream look the same


FAULTS = ("refuse", "reset", "stall", "truncated", "invalid_json", "429_retry_after", "429", "500", "502",
          "503", "529", "html_502", "html_200", "empty_200", "endless")
RECOVERS = {name: name not in ("refuse", "html_200") for name in FAULTS}
BUILDERS: dict[str, Callable[[str], Response | None]] = {"openai": _openai, "anthropic": _anthropic}


def fault(name: str, wire: str = "openai") -> Response | None:
    return BUILDERS[wire](name)


def good_answer(text: str, wire: str = "openai") -> Response:
    return anth.text_reply(text) if wire == "anthropic" else text_reply(text)


def good_tool_call(name: str, args: dict, wire: str = "openai", call_id: str = "call_1") -> Response:
    if wire == "anthropic":
        return anth.tool_reply(name, args, tool_id=call_id)
    from tests.fakes.openai_server import tool_reply
    return tool_reply(name, args, call_id=call_id)
