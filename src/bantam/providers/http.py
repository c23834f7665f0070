"""What every HTTP provider shares: the client, the request, error mapping, reading error bodies.

`HTTPProvider.complete` sends one request and hands the answer to the subclass: `read_stream` for
server-sent events, `read_json` for a whole JSON body. Subclasses own only their wire format.
"""
from __future__ import annotations

import contextlib
import email.utils
import json
import os
import re
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from ..config import Config
from ..errors import APIError, ProviderError, is_context_overflow
from ..events import Notice, OnEvent, RequestStarted, Usage
from ..sanitize import TooDeep, loads, terminal_safe
from . import DEFAULT_OPTIONS, Reply, RequestOptions

if TYPE_CHECKING:
    import httpx

USER_AGENT = "Mozilla/5.0 (compatible; Bantam/1.0)"  # seed: avoids gateway 403 blocks
RETRYABLE_STATUS = {408, 429}  # and every 5xx
DISCOVERY_TIMEOUT = 3.0        # seconds for side requests such as GET /models (they delay the usage line)
CHARS_PER_TOKEN = 4            # for estimating usage a server does not report
# Byte caps on what a server may send (a hostile or broken one must not grow bantam's memory):
BODY_CAP = 16 * 1024 * 1024    # a whole JSON answer or a model listing
ERROR_CAP = 64 * 1024          # an error body: only its message is wanted
LINE_CAP = 4 * 1024 * 1024     # one SSE line (a real chunk is a few kB)


class HTTPProvider:
    """One client per provider, so every loop step reuses the same connection."""

    def __init__(self, cfg: Config, base_url: str, url: str):
        self.cfg = cfg
        self.model = cfg.model
        self.base_url, self.url = base_url, url
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self.learned_window: int | None = None  # the context window stated in a refusal
        self.prices: tuple[float, float] | None = None  # dollars per prompt, completion token

    @property
    def client(self) -> "httpx.Client":
        with self._client_lock:  # the context-window lookup runs in a thread beside the first request
            if self._client is None:
                self._client = make_client(self.cfg)
        return self._client

    def http_client(self) -> "httpx.Client":
        return self.client

    def headers(self) -> dict[str, str]:
        raise NotImplementedError

    def request_body(self, messages: list[dict], tools: list[dict], options: RequestOptions) -> dict[str, Any]:
        raise NotImplementedError

    def read_stream(self, lines: Iterator[str], on_event: OnEvent) -> Reply:
        raise NotImplementedError

    def read_json(self, data: Any, on_event: OnEvent) -> Reply:
        raise NotImplementedError

    def adjust(self, error: APIError) -> str | None:
        """A 400 some models give for a setting bantam sends by default: change the setting and
        say so (the request is then sent once more), or None to let the error stand."""
        return None

    def complete(self, messages: list[dict], tools: list[dict], on_event: OnEvent,
                 options: RequestOptions = DEFAULT_OPTIONS) -> Reply:
        try:
            return self.send(messages, tools, on_event, options)
        except APIError as e:
            if e.status == 400:
                self.learn_window(e)
            notice = self.adjust(e) if e.status == 400 else None
            if not notice:
                raise
            on_event(Notice(message=notice))
            return self.send(messages, tools, on_event, options)

    def learn_window(self, error: APIError) -> None:
        """A refusal that states the context window ("maximum context length is 4096 tokens"):
        use that number from now on, and remember it for this endpoint and model."""
        from .. import cache
        limit = cache.stated_limit(str(error)) if is_context_overflow(error) else None
        if limit and limit != self.learned_window:
            self.learned_window = limit
            cache.remember_window(self.url, self.model, limit, "learned")

    def send(self, messages: list[dict], tools: list[dict], on_event: OnEvent,
             options: RequestOptions) -> Reply:
        body = self.request_body(messages, tools, options)
        on_event(RequestStarted(model=self.model))
        with mapped_errors(self.url, self.cfg):
            with self.client.stream("POST", self.url, json=body, headers=self.headers()) as resp:
                kind = resp.headers.get("content-type", "")
                if resp.status_code >= 400 or "html" in kind:  # a web page at 200: wrong endpoint
                    raise error_from_response(resp, read_head(resp, ERROR_CAP), self.cfg.api_key)
                if "json" in kind or (not body.get("stream") and "event-stream" not in kind):
                    reply = self.read_json(parse_json(read_capped(resp, BODY_CAP, self.url), self.url), on_event)
                else:
                    reply = self.read_stream(capped_lines(resp, LINE_CAP), on_event)
        if reply.usage is None:  # llama-cpp-python's server streams no usage
            reply.usage = estimate_usage(body, reply.message)
        reply.output_limit = output_limit(body)
        return reply

    def get_json(self, url: str, post: dict | None = None) -> Any:
        """A side request (model list, server properties); ProviderError if it fails."""
        with mapped_errors(url, self.cfg):
            with self.client.stream("POST" if post else "GET", url, json=post, headers=self.headers(),
                                    timeout=min(self.cfg.timeout, DISCOVERY_TIMEOUT)) as resp:
                if resp.status_code >= 400:
                    raise error_from_response(resp, read_head(resp, ERROR_CAP), self.cfg.api_key)
                return parse_json(read_capped(resp, BODY_CAP, url), url)

    def models(self) -> list[Any]:
        data = self.get_json(self.base_url + "/models")
        models = data.get("data", data.get("models")) if isinstance(data, dict) else data
        return models if isinstance(models, list) else []

    def list_models(self) -> list[str]:
        """The endpoint's model names, as `bantam models` and /models print them: terminal-safe."""
        return [terminal_safe(str(m.get("id"))) for m in self.models() if isinstance(m, dict) and m.get("id")]

    def context_window(self) -> int | None:
        return None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def output_limit(body: dict[str, Any]) -> int | None:
    """The output token limit a request body carries (None: the server's own)."""
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def estimate_usage(body: dict[str, Any], message: dict[str, Any]) -> Usage:
    """Token counts guessed from the text sent and received (about CHARS_PER_TOKEN characters
    a token), marked as estimates, for a server that reports none."""
    sent = json.dumps([body.get(k) for k in ("system", "messages", "tools")], ensure_ascii=False)
    calls = [c.get("function", {}).get("arguments", "") for c in message.get("tool_calls") or []]
    received = str(message.get("content") or "") + "".join(map(str, calls))
    prompt = -(-len(sent) // CHARS_PER_TOKEN)
    return Usage(prompt, -(-len(received) // CHARS_PER_TOKEN), None, prompt, estimated=True)


def parse_json(raw: bytes, url: str) -> Any:
    if not raw.strip():  # an empty 200 is a hiccup of some proxy: worth another try
        raise ProviderError(f"{url} sent an empty response")
    try:
        return loads(raw)
    except TooDeep as e:
        raise ProviderError(f"{url} sent {e}; not reading it", retryable=False) from None
    except ValueError:
        raise ProviderError(f"{url} sent a body that is not JSON: {raw[:200]!r}", retryable=False) from None


def parse_event(data: str) -> Any:
    """One server-sent event's JSON; ProviderError, in one line, when it is not JSON or nests too deep."""
    try:
        return loads(data)
    except TooDeep as e:
        raise ProviderError(f"server sent {e} in the stream") from None
    except ValueError:
        raise ProviderError(f"server sent invalid JSON in the stream: {data[:200]!r}") from None


def read_head(resp: "httpx.Response", cap: int) -> bytes:
    """At most `cap` bytes of a streamed body; the rest is not read (the connection is dropped)."""
    buffer = bytearray()
    for chunk in resp.iter_bytes():
        buffer += chunk
        if len(buffer) >= cap:
            del buffer[cap:]
            break
    return bytes(buffer)


def read_capped(resp: "httpx.Response", cap: int, url: str) -> bytes:
    """A whole streamed body of at most `cap` bytes; past it, ProviderError (never memory growth)."""
    data = read_head(resp, cap + 1)
    if len(data) > cap:
        raise ProviderError(f"{url} sent a body larger than {cap >> 20} MB; not reading more",
                            retryable=False)
    return data


def capped_lines(resp: "httpx.Response", cap: int) -> Iterator[str]:
    """The body's lines (LF or CRLF), each at most `cap` bytes; a longer line is ProviderError.
    (httpx's iter_lines would keep a line that never ends in memory, however long it grows.)"""
    parts: list[bytes] = []
    size = 0
    for chunk in resp.iter_bytes():
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            parts.append(piece)
            yield b"".join(parts).rstrip(b"\r").decode("utf-8", "replace")
            parts, size = [], 0
        if rest:
            parts.append(rest)
            size += len(rest)
            if size > cap:
                raise ProviderError(f"the server sent a line longer than {cap >> 20} MB; not reading more")
    if parts:
        yield b"".join(parts).rstrip(b"\r").decode("utf-8", "replace")


def load_httpx() -> Any:
    """httpx, without its command-line tool: when click is installed (llama-cpp-python's server
    brings it), `import httpx` also imports rich, pygments and click, 45 ms we do not need."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    import httpx
    return httpx


def make_client(cfg: Config) -> "httpx.Client":
    """One client per provider, so every loop step reuses the same connection."""
    httpx = load_httpx()
    return httpx.Client(timeout=httpx.Timeout(cfg.timeout), proxy=socks_proxy(),
                        headers={"User-Agent": USER_AGENT})


def socks_proxy() -> str | None:
    """SOCKS_PROXY (or socks_proxy); without it httpx reads HTTP(S)_PROXY itself."""
    proxy = os.environ.get("SOCKS_PROXY") or os.environ.get("socks_proxy")
    if proxy and "://" not in proxy:
        proxy = "socks5://" + proxy
    return proxy or None


def redact(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret and len(secret) >= 4 else text


@contextlib.contextmanager
def mapped_errors(url: str, cfg: Config) -> Iterator[None]:
    """Turn httpx's exceptions into ProviderError at the provider boundary."""
    httpx = load_httpx()
    try:
        yield
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:
        raise ProviderError(f"bad endpoint URL {url!r}: {e}", retryable=False) from e
    except httpx.TimeoutException as e:
        raise ProviderError(f"no response from {url} within {cfg.timeout:g}s "
                            f"({type(e).__name__})") from e
    except httpx.HTTPError as e:
        proxy = socks_proxy()  # a dead proxy is named, or the endpoint would be blamed
        via = f" through the SOCKS proxy {proxy}" if proxy else ""
        raise ProviderError(f"connection to {url}{via} failed: {e or type(e).__name__}") from e


def error_from_response(response: "httpx.Response", body: bytes, secret: str) -> APIError:
    status = response.status_code
    message = describe_body(body, response.headers.get("content-type", ""))
    return APIError(redact(f"HTTP {status}: {message}", secret), status=status,
                    retryable=status in RETRYABLE_STATUS or status >= 500,
                    retry_after=parse_retry_after(response.headers.get("retry-after")))


def describe_body(body: bytes, content_type: str) -> str:
    """The API's own message where there is one, else a short, readable hint of the body; either
    without escape sequences (it is printed as `bantam: ...` by every front end)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        message = error_message(loads(text))
        if message:
            return message
    except ValueError:
        pass
    if "html" in content_type or text[:100].lstrip().lower().startswith(("<!doctype", "<html")):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        return "an HTML page" + (f" ({terminal_safe(' '.join(title.group(1).split())[:100])})" if title else "") + \
            ", not an API response: is the endpoint right?"
    return terminal_safe(" ".join(text.split())[:300]) or "(empty body)"


def error_message(obj: Any) -> str:
    """The message in {"error": {"message": ...}}, {"error": "..."}, {"message": ...}, {"detail": ...},
    without escape sequences: a server's words reach the terminal in every front end's error line."""
    return terminal_safe(_find_message(obj))


def _find_message(obj: Any) -> str:
    if not isinstance(obj, dict):
        return ""
    err = obj.get("error", obj)
    if isinstance(err, str):
        return err
    if isinstance(err, dict):
        for key in ("message", "detail", "msg"):
            if isinstance(err.get(key), str):
                return err[key]
    detail = obj.get("detail")
    return detail if isinstance(detail, str) else ""


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
