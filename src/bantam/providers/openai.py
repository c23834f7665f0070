"""OpenAI-compatible `/chat/completions`: OpenAI, OpenRouter, DeepSeek, llama.cpp, Ollama, vLLM."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator

from ..config import Config
from ..errors import APIError, ProviderError
from ..events import OnEvent, Reasoning, Text, Usage
from . import Reply, RequestOptions
from .http import HTTPProvider, error_message, foreign_answer, own_events, stream_error
from .sse import iter_sse
from .think import ThinkSplitter

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")  # what the API accepts
WIRE = "an OpenAI-compatible /chat/completions API"

if TYPE_CHECKING:
    from .aids import Aids


def is_chunk(data: Any) -> bool:
    """Whether a response or stream chunk has a shape of this API: choices, its usage counts or an
    error (Anthropic's events carry usage too, counted in input_tokens)."""
    if not isinstance(data, dict):
        return False
    usage = data.get("usage")
    return isinstance(data.get("choices"), list) or "error" in data or \
        (isinstance(usage, dict) and ("prompt_tokens" in usage or "completion_tokens" in usage))


def split_endpoint(endpoint: str, exact: bool = False) -> tuple[str, str]:
    """(base URL, chat URL): a full `.../chat/completions` URL, or any URL given `exact`
    (LLM_URL's form), is used as it is."""
    endpoint = endpoint.rstrip("/")
    if endpoint.endswith("/chat/completions"):
        return endpoint[: -len("/chat/completions")], endpoint
    if exact:
        return endpoint.rsplit("/", 1)[0], endpoint
    return endpoint, endpoint + "/chat/completions"


class OpenAIProvider(HTTPProvider):
    def __init__(self, cfg: Config):
        super().__init__(cfg, *split_endpoint(cfg.endpoint, cfg.exact_url))
        self.chat_url = self.url
        self.send_reasoning_effort = True
        self.aids: Aids | None = None  # a small served model's aids, when local_aids names a profile
        if cfg.local_aids not in ("auto", "off"):
            from . import aids
            self.aids = aids.resolve(cfg.local_aids, None)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.cfg.api_key}"} if self.cfg.api_key else {}

    def request_body(self, messages: list[dict], tools: list[dict], options: RequestOptions) -> dict[str, Any]:
        cfg = self.cfg
        required = False
        if self.aids is not None:
            messages, tools, required = self.aids.request(messages, tools, options.folder)
        # Key order is prompt-cache order: what stays the same from step to step (model, tools,
        # then the messages, which only grow) comes first, the small options last; so each request
        # is the previous one, byte for byte, up to the end of its messages (tests/test_prefix.py).
        body: dict[str, Any] = {"model": self.model}
        if tools:
            body["tools"] = tools
        body["messages"] = [_wire(m) for m in messages]
        body.update(temperature=cfg.temperature, stream=cfg.stream)
        if cfg.reasoning_effort and self.send_reasoning_effort:
            body["reasoning_effort"] = cfg.reasoning_effort
        if cfg.stream:
            body["stream_options"] = {"include_usage": True}
        if required:  # where the bundled runtime's grammar would hold the reply to a call
            body["tool_choice"] = "required"
        body.update(cfg.forward)
        if options.output_tokens:  # the loop asks again for an answer cut at the output limit
            body["max_completion_tokens" if "max_completion_tokens" in cfg.forward else "max_tokens"] = \
                options.output_tokens
        return body

    def adjust(self, error: APIError) -> str | None:
        # bantam's default `reasoning_effort=high` is refused by non-reasoning models (gpt-4o).
        if "reasoning_effort" not in str(error) or not self.send_reasoning_effort:
            return None
        self.send_reasoning_effort = False
        return f"{self.model} does not take reasoning_effort; sending without it"

    def read_stream(self, lines: Iterator[str], on_event: OnEvent) -> Reply:
        turn = TurnBuilder(on_event, self.cfg.api_key)
        for _event, chunk in own_events(iter_sse(lines, idle=self.cfg.timeout), lambda c, _: is_chunk(c),
                                        self.url, WIRE):
            if chunk is None:  # [DONE]
                turn.done = True
            else:
                turn.add_chunk(chunk)
        return turn.finish()

    def read_json(self, data: Any, on_event: OnEvent) -> Reply:
        turn = TurnBuilder(on_event, self.cfg.api_key)
        if not is_chunk(data):
            raise foreign_answer(self.url, WIRE, data)
        turn.add_chunk(data)
        turn.done = True
        return turn.finish()

    def context_window(self) -> int | None:
        """Ask the server: its model list, then Ollama's `/api/show` or llama.cpp's `/props` and
        `/slots`. A list of one model is the model asked for whatever it is called there (llama.cpp's
        server lists the file it loaded and answers to any name)."""
        try:
            models = [m for m in self.models() if isinstance(m, dict)]
            entry = next((m for m in models if self.model in (m.get("id"), m.get("name"), m.get("model"))),
                         models[0] if len(models) == 1 else {})
            self.prices = token_prices(entry)
            root = self.base_url.removesuffix("/v1")
            if str(entry.get("owned_by", "")) in ("library", "ollama") or ":11434" in root:
                return self._ollama_context(root)
            for key in ("context_length", "context_window", "max_context_length", "max_model_len",
                        "max_input_tokens"):
                if _positive(entry, key):
                    return _positive(entry, key)
            return _positive(entry, "top_provider", "context_length") or self._llama_cpp_context(root, entry)
        except ProviderError:
            return None

    def _llama_cpp_context(self, root: str, entry: dict) -> int | None:
        """The context llama.cpp's server runs with (`/props`, else a slot's in `/slots`), else
        the model's training context from its list. Asked of any server whose list says nothing:
        a server without them answers 404, once while the answer is remembered."""
        found = _positive(self._optional(root + "/props"), "default_generation_settings", "n_ctx")
        if found:
            return found
        try:
            slots = self.get_json(root + "/slots")
        except ProviderError:
            slots = []
        first = slots[0] if isinstance(slots, list) and slots else {}
        return _positive(first, "n_ctx") or _positive(entry, "meta", "n_ctx_train")

    def _ollama_context(self, root: str) -> int | None:
        info = self._optional(root + "/api/show", {"model": self.model})
        for line in str(info.get("parameters", "")).splitlines():
            name, _, value = line.partition(" ")
            if name == "num_ctx" and value.strip().isdigit():
                return int(value.strip())
        details = info.get("model_info") or {}
        return next((int(v) for k, v in details.items()
                     if k.endswith(".context_length") and isinstance(v, int) and v > 0), None)

    def _optional(self, url: str, post: dict | None = None) -> dict:
        try:
            data = self.get_json(url, post)
        except ProviderError:
            return {}
        return data if isinstance(data, dict) else {}


def _wire(message: dict) -> dict:
    """The message as the API takes it: bantam's own keys (Anthropic thinking blocks) stay home,
    and a tool-calling message's missing text is "" (llama-cpp-python's server answers `null`
    with a 500; every server takes "")."""
    wire = message if all(k in MESSAGE_KEYS for k in message) else \
        {k: v for k, v in message.items() if k in MESSAGE_KEYS}
    if wire.get("tool_calls") and wire.get("content") is None:
        wire = {**wire, "content": ""}
    return wire


def token_prices(entry: Any) -> tuple[float, float] | None:
    """(prompt, completion) dollars per token from a model entry's `pricing` (OpenRouter's form:
    strings such as "0.000003"), or None."""
    pricing = entry.get("pricing") if isinstance(entry, dict) else None
    try:
        prices = float(pricing["prompt"]), float(pricing["completion"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
    return prices if all(p >= 0 for p in prices) else None


def _positive(obj: Any, *path: str) -> int | None:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, int) and not isinstance(obj, bool) and obj > 0 else None
class TurnBuilder:
    """Assembles one assistant message from stream chunks (or one whole JSON response)."""

    def __init__(self, on_event: OnEvent, secret: str = ""):
        self.on_event = on_event
        self.secret = secret
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.streamed = False  # a streamed chunk with choices came: a finish_reason is due
        self.think = ThinkSplitter()

    def add_chunk(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            raise ProviderError(f"server sent an unexpected chunk: {str(chunk)[:200]!r}")
        if chunk.get("error"):
            raise error_in_stream(chunk["error"], self.secret)
        if isinstance(chunk.get("usage"), dict):
            self.usage = parse_usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            self.streamed = self.streamed or "delta" in choice
            delta = choice.get("delta") or choice.get("message") or {}
            self._add_delta(delta)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def _add_delta(self, delta: dict) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self.on_event(Reasoning(text=reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._add_content(self.think.feed(content))
        for position, call in enumerate(delta.get("tool_calls") or []):
            self._add_tool_call(position, call)

    def _add_content(self, pieces: list[tuple[bool, str]]) -> None:
        for is_reasoning, piece in pieces:
            if is_reasoning:
                self.on_event(Reasoning(text=piece))
            else:
                self.text.append(piece)
                self.on_event(Text(text=piece))

    def _add_tool_call(self, position: int, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        index = delta.get("index")
        if not isinstance(index, int):  # servers that send whole calls without an index
            index = len(self.calls) if delta.get("id") else max(self.calls, default=position)
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        function = delta.get("function") or {}
        if delta.get("id") and not call["id"]:
            call["id"] = delta["id"]
        if function.get("name") and not call["name"]:
            call["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["arguments"].append(arguments)
        elif arguments is not None:  # some servers send an object instead of a JSON string
            call["arguments"].append(json.dumps(arguments))

    def finish(self) -> Reply:
        if self.finish_reason is None and (not self.done or self.streamed):
            # llama-cpp-python's server ends a stream it drops (another request came) with [DONE]
            # but no finish_reason: that answer is cut off, not complete
            raise ProviderError("the stream ended before the response was complete")
        self._add_content(self.think.flush())
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"] or f"call_{i}", "type": "function",
                 "function": {"name": c["name"], "arguments": "".join(c["arguments"]) or "{}"}}
                for i, c in sorted(self.calls.items())]
        return Reply(message, self.usage, self.finish_reason)


def parse_usage(raw: dict) -> Usage:
    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = raw.get("prompt_cache_hit_tokens")  # DeepSeek
    prompt = count(raw.get("prompt_tokens"))
    return Usage(prompt, count(raw.get("completion_tokens")),
                 count(cached) if cached is not None else None, prompt)


def error_in_stream(error: Any, secret: str) -> APIError:
    """An error object inside a 200 stream (http.stream_error says whether it is retried)."""
    message = error_message({"error": error}) or str(error)
    code = error.get("code") if isinstance(error, dict) else None
    kind = str(error.get("type") or "") if isinstance(error, dict) else ""
    return stream_error(message, code, kind, secret)
