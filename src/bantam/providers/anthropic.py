"""Anthropic Messages API (`POST /v1/messages`): Claude, and servers that copy its wire format.

bantam's history stays in the OpenAI chat shape; this module translates at the edge, both ways.
One extra key lives on assistant messages: `"thinking"`, the model's thinking blocks with their
signatures, replayed on the next request because Anthropic requires them for tool use.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator
from urllib.parse import urlsplit

from ..config import Config
from ..errors import APIError, ProviderError
from ..events import OnEvent, Reasoning, Text, Usage
from ..sanitize import loads
from . import Reply, RequestOptions
from .http import HTTPProvider, error_message, foreign_answer, own_events, stream_error
from .sse import iter_sse

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192  # Anthropic requires max_tokens; `max_tokens=` in the config overrides it
THINKING = ("thinking", "redacted_thinking")
CACHE = {"type": "ephemeral"}  # a cache breakpoint: see request_body and _breakpoints
WIRE = "an Anthropic Messages API"
EVENTS = ("message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
          "message_stop", "ping", "error")
OUTPUT_LIMIT = re.compile(r"max_tokens: \d+ > (\d+)")  # "...> 4096, which is the maximum allowed..."


def split_endpoint(endpoint: str, exact: bool = False) -> tuple[str, str]:
    """(base URL, messages URL): a full `.../messages` URL, or any URL given `exact` (LLM_URL's
    form: a gateway at a path of its own), is used as it is; a bare host (the Anthropic SDK's
    base URL form) gets `/v1`."""
    endpoint = endpoint.rstrip("/")
    if endpoint.endswith("/messages"):
        return endpoint[: -len("/messages")], endpoint
    if exact:
        return endpoint.rsplit("/", 1)[0], endpoint
    if "://" in endpoint and not urlsplit(endpoint).path:
        endpoint += "/v1"
    return endpoint, endpoint + "/messages"


class AnthropicProvider(HTTPProvider):
    key_variable = "ANTHROPIC_API_KEY"

    def __init__(self, cfg: Config):
        super().__init__(cfg, *split_endpoint(cfg.endpoint, cfg.exact_url))
        self.max_tokens = DEFAULT_MAX_TOKENS

    def headers(self) -> dict[str, str]:
        key = {"x-api-key": self.cfg.api_key} if self.cfg.api_key else {}
        return {**key, "anthropic-version": API_VERSION}

    def request_body(self, messages: list[dict], tools: list[dict], options: RequestOptions) -> dict[str, Any]:
        cfg = self.cfg
        system = "\n\n".join(_text_of(m.get("content")) for m in messages if m.get("role") == "system")
        # Anthropic caches tools, then system, then messages; the keys go in that order, the
        # small options after, so each request is the last one plus the new step, byte for byte.
        body: dict[str, Any] = {"model": self.model}
        if tools:  # a breakpoint here: a new session reads the tools from the cache too
            body["tools"] = [_tool(t) for t in tools]
            body["tools"][-1] = {**body["tools"][-1], "cache_control": CACHE}
        if system:  # a plain string: proxies turn a list of blocks into an OpenAI content list,
            body["system"] = system  # which llama.cpp-style servers refuse for the system role
        body.update(messages=to_anthropic(messages), max_tokens=self.max_tokens, stream=cfg.stream)
        thinking = cfg.forward.get("thinking")
        if not (isinstance(thinking, dict) and thinking.get("type") != "disabled"):
            body["temperature"] = cfg.temperature  # with thinking on, only the default (1) is allowed
        body.update(cfg.forward)
        if options.output_tokens:  # the loop asks again for an answer cut at the output limit
            body["max_tokens"] = options.output_tokens
        return body

    def adjust(self, error: APIError) -> str | None:
        # Older models take fewer output tokens than the default; use their limit from now on.
        limit = OUTPUT_LIMIT.search(str(error))
        if not limit or "max_tokens" in self.cfg.forward:
            return None
        self.max_tokens = int(limit.group(1))
        return f"{self.model} takes at most {self.max_tokens} output tokens; using that"

    def models(self) -> list[Any]:
        data = self.get_json(self.base_url + "/models?limit=1000")  # the default page holds only 20
        return (data.get("data") or []) if isinstance(data, dict) else []

    def read_stream(self, lines: Iterator[str], on_event: OnEvent) -> Reply:
        turn = TurnBuilder(on_event, self.cfg.api_key)
        for event, payload in own_events(iter_sse(lines, idle=self.cfg.timeout), is_event, self.url, WIRE):
            if is_event(payload, event):  # an event type added later needs nothing
                turn.add_event(kind_of(payload, event), payload)
        return turn.finish()

    def read_json(self, data: Any, on_event: OnEvent) -> Reply:
        turn = TurnBuilder(on_event, self.cfg.api_key)
        if isinstance(data, dict) and kind_of(data, "") == "error":
            raise turn.error(data)
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise foreign_answer(self.url, WIRE, data)
        for index, block in enumerate(data["content"]):
            turn.start_block(index, block)
        turn.add_usage(data.get("usage"))
        turn.stop_reason, turn.done = data.get("stop_reason"), True
        return turn.finish()


def is_event(payload: Any, event: str) -> bool:
    """Whether a stream event is one of this API's."""
    return kind_of(payload, event) in EVENTS


def kind_of(payload: Any, event: str) -> str:
    """An event's type: its `type`, else the SSE event name; an `error` object alone is an error."""
    if not isinstance(payload, dict):
        return ""
    return str(payload.get("type") or event or ("error" if "error" in payload else ""))


class TurnBuilder:
    """Assembles one assistant message from stream events (or one whole response's blocks)."""

    def __init__(self, on_event: OnEvent, secret: str = ""):
        self.on_event, self.secret = on_event, secret
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}  # tool input, as partial JSON fragments
        self.counts: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.done = False

    def add_event(self, kind: str, data: dict) -> None:
        if kind == "message_start":
            self.add_usage((data.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            index = data.get("index")
            self.start_block(index if isinstance(index, int) else len(self.blocks), data.get("content_block"))
        elif kind == "content_block_delta":
            self.add_delta(data.get("index"), data.get("delta") or {})
        elif kind == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.add_usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise self.error(data)
        # ping, content_block_stop and event types added later need nothing

    def start_block(self, index: int, block: Any) -> None:
        if not isinstance(block, dict):
            raise ProviderError(f"server sent an unexpected content block: {str(block)[:200]!r}")
        block = dict(block)
        self.blocks[index] = block
        self._emit(block.get("type"), block.get("text") or block.get("thinking"))

    def add_delta(self, index: Any, delta: dict) -> None:
        block = self.blocks.get(index)
        if block is None:
            raise ProviderError(f"server sent a delta for content block {index!r} before it started")
        kind = str(delta.get("type"))
        field = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}.get(kind)
        if field and isinstance(delta.get(field), str):
            block[field] = block.get(field, "") + delta[field]
            self._emit(block.get("type"), delta.get("text") or delta.get("thinking"))
        elif kind == "input_json_delta":
            self.json_parts.setdefault(index, []).append(str(delta.get("partial_json", "")))

    def _emit(self, block_type: Any, text: Any) -> None:
        if text and isinstance(text, str):
            self.on_event(Reasoning(text=text) if block_type == "thinking" else Text(text=text))

    def add_usage(self, raw: Any) -> None:
        """message_delta repeats or raises message_start's counts (they are cumulative)."""
        for key, value in raw.items() if isinstance(raw, dict) else ():
            if isinstance(value, int) and not isinstance(value, bool):
                self.counts[key] = max(value, self.counts.get(key, 0))

    def usage(self) -> Usage | None:
        if not self.counts:
            return None
        cached = self.counts.get("cache_read_input_tokens", 0)
        written = self.counts.get("cache_creation_input_tokens", 0)
        prompt = self.counts.get("input_tokens", 0) + cached + written
        return Usage(prompt, self.counts.get("output_tokens", 0), cached, prompt, cache_write_tokens=written)

    def error(self, data: dict) -> APIError:
        """An error event (http.stream_error says whether it is retried)."""
        error = data.get("error")
        kind = str(error.get("type") or "") if isinstance(error, dict) else ""
        return stream_error(error_message(data) or str(error), None, kind, self.secret)

    def finish(self) -> Reply:
        if not self.done and self.stop_reason is None:
            raise ProviderError("the stream ended before the response was complete")
        ordered = sorted(self.blocks.items())
        text = "".join(b.get("text", "") for _, b in ordered if b.get("type") == "text")
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = self._calls(ordered)
        if calls:
            message["tool_calls"] = calls
        thinking = [b for _, b in ordered if b.get("type") in THINKING]
        if thinking:
            message["thinking"] = thinking
        return Reply(message, self.usage(), self.stop_reason)

    def _calls(self, ordered: list[tuple[int, dict]]) -> list[dict[str, Any]]:
        """The tool_use blocks as calls. Blocks that share one id are pieces of one call: litellm's
        proxy streams each argument fragment as a new block with the same id."""
        calls: dict[str, dict[str, Any]] = {}
        for index, block in ordered:
            if block.get("type") != "tool_use":
                continue
            parts = self.json_parts.get(index)
            arguments = "".join(parts) if parts else (json.dumps(block["input"]) if block.get("input") else "")
            call_id = str(block.get("id") or f"toolu_{index}")
            call = calls.setdefault(call_id, {"id": call_id, "type": "function",
                                              "function": {"name": "", "arguments": ""}})
            call["function"]["name"] = call["function"]["name"] or str(block.get("name") or "")
            call["function"]["arguments"] += arguments
        for call in calls.values():
            call["function"]["arguments"] = call["function"]["arguments"] or "{}"
        return list(calls.values())


# --- OpenAI chat shape -> Anthropic messages ----------------------------------------------------

def to_anthropic(messages: list[dict]) -> list[dict]:
    """Translate the history; runs of the same role become one message (tool results included)."""
    out: list[dict] = []
    for m in messages:
        role = "assistant" if m.get("role") == "assistant" else "user"
        blocks = _blocks(m) if m.get("role") != "system" else []
        if not blocks:
            continue  # Anthropic rejects empty messages
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for m in out:  # tool results must come before any text in their user message
        m["content"].sort(key=lambda b: b.get("type") != "tool_result")
    if out:
        last = out[-1]["content"]
        results = [i for i, b in enumerate(last) if b.get("type") == "tool_result"]
        _breakpoints(last, {len(last) - 1, *results[-1:]})
    if len(out) >= 3:
        _breakpoints(out[-3]["content"], {len(out[-3]["content"]) - 1})
    return out


def _breakpoints(content: list[dict], where: set[int]) -> None:
    """Mark blocks as cache breakpoints, so each step reads what the last one wrote without
    relying on Anthropic's 20-block look-back (a step with many parallel calls exceeds it).

    In the last message: its last block, and its last tool result when text follows it (the
    daemon's LIFE.md tail, rebuilt every step: the next request repeats the message only up to
    that result). In the message two before it (the previous request's last, as this request
    repeats it): its last block. With the tools', at most 4, Anthropic's limit."""
    for i in where:
        if content[i].get("type") not in THINKING:
            content[i] = {**content[i], "cache_control": CACHE}


def _blocks(m: dict) -> list[dict]:
    content = m.get("content")
    if m.get("role") == "tool":
        return [{"type": "tool_result", "tool_use_id": m.get("tool_call_id", ""),
                 "content": content if isinstance(content, str) else _content_blocks(content)}]
    if m.get("role") != "assistant":
        return _content_blocks(content)
    blocks = [b for b in m.get("thinking") or [] if isinstance(b, dict)]  # replayed first, as required
    blocks += _content_blocks(content)
    for call in m.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""),
                       "input": _arguments(function.get("arguments"))})
    return blocks


def _content_blocks(content: Any) -> list[dict]:
    """A string or OpenAI content parts (text, image_url) as Anthropic blocks; empty text skipped."""
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    blocks = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            blocks.append(_image(part.get("image_url")))
    return blocks


def _image(image: Any) -> dict:
    url = str(image.get("url", "") if isinstance(image, dict) else image or "")
    header, sep, data = url.partition(",")
    if url.startswith("data:") and sep and header.endswith(";base64"):
        media_type = header[len("data:"):-len(";base64")]
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _arguments(arguments: Any) -> dict:
    """The call's JSON arguments as an object; {} when the model wrote invalid JSON."""
    try:
        value = arguments if isinstance(arguments, dict) else loads(arguments or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _tool(schema: dict) -> dict:
    function = schema.get("function", schema)
    return {"name": function.get("name", ""), "description": function.get("description", ""),
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}}}


def _text_of(content: Any) -> str:
    return content if isinstance(content, str) else \
        "\n".join(b["text"] for b in _content_blocks(content) if b.get("type") == "text")
