"""What every HTTP provider shares: the client, the request, error mapping, reading error bodies.

`HTTPProvider.complete` sends one request and hands the answer to the subclass: `read_stream` for
server-sent events, `read_json` for a whole JSON body. Subclasses own only their wire format.
"""
from __future__ import annotations

import contextlib
import email.utils
import errno
import ipaddress
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import urlsplit

from ..envpolicy import redact as redact_known
from ..config import Config
from ..errors import APIError, ProviderError, Unreachable, is_context_overflow
from ..events import Notice, OnEvent, RequestStarted, Usage
from ..sanitize import TooDeep, loads, terminal_safe
from . import DEFAULT_OPTIONS, REQUEST_SENT, Reply, RequestOptions
from ..slots import arriving, idle
from .pace import pace_for

if TYPE_CHECKING:
    import ssl

    import httpx

USER_AGENT = "Mozilla/5.0 (compatible; Bantam/1.0)"  # a browser-like name: avoids gateway 403 blocks
RETRYABLE_STATUS = {408, 429}  # and every 5xx
RATE_LIMITED = (429, 529)  # "too many requests", Anthropic's "overloaded"
RATE_LIMIT_PAUSE = 1.0  # seconds every session pauses after one without Retry-After
DISCOVERY_TIMEOUT = 3.0        # seconds for side requests such as GET /models (they delay the usage line)
CHARS_PER_TOKEN = 4            # for estimating usage a server does not report
PROBE_TIMEOUT = 1.5            # seconds a failed endpoint's port has to show what it speaks
# Byte caps on what a server may send (a hostile or broken one must not grow bantam's memory):
BODY_CAP = 16 * 1024 * 1024    # a whole JSON answer or a model listing
ERROR_CAP = 64 * 1024          # an error body: only its message is wanted
LINE_CAP = 4 * 1024 * 1024     # one SSE line (a real chunk is a few kB)
# A refusal by a remote host, a DNS server that did not answer, no route: tried this many more
# times (1 + 1 + 2 s with the default delays), for a server restarting behind its proxy or a
# network hiccup passes in seconds, while a wrong port or no network lasts: a minute and a half
# of retries (all nine delays) only hides the cause. Refused on this machine or the local network,
# or a name that does not exist: no retry at all (see connect_failure).
REMOTE_RETRIES = 3
UNKNOWN_HOST = {getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA", "EAI_FAIL") if hasattr(socket, name)}
NO_ROUTE = {errno.ENETUNREACH, errno.EHOSTUNREACH}


class HTTPProvider:
    """One client per provider, so every loop step reuses the same connection."""
    key_variable = "OPENAI_API_KEY"  # where a missing key is looked for (the error names it)

    def __init__(self, cfg: Config, base_url: str, url: str):
        self.cfg = cfg
        self.model = cfg.model
        self.base_url, self.url = base_url, url
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self.learned_window: int | None = None  # the context window stated in a refusal
        self.prices: tuple[float, float] | None = None  # dollars per prompt, completion token
        self.tool_watch = ToolWatch(self.url)  # per session (one provider each): told once

    @property
    def client(self) -> "httpx.Client":
        with self._client_lock:  # the context-window lookup runs in a thread beside the first request
            if self._client is None:
                self._client = make_client(self.cfg, plain=self.url)
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
        pace = pace_for(self.url)
        pace.wait()  # a rate limit another session of this process met holds this one too
        on_event(RequestStarted(model=self.model))
        with mapped_errors(self.url, self.cfg):
            client = self.client
            if not REQUEST_SENT.is_set():  # set() takes the Event's lock: once, not per request
                REQUEST_SENT.set()
            request = client.build_request("POST", self.url, content=sealed(body),
                                           headers={**self.headers(), "content-type": "application/json"})
            with idle():  # the model thinks: another session computes meanwhile (slots.py)
                resp = client.send(request, stream=True)
            with contextlib.closing(resp):
                kind = resp.headers.get("content-type", "")
                if resp.status_code >= 400 or "html" in kind:  # a web page at 200: wrong endpoint
                    error = self.status_error(resp, self.url)
                    if error.status in RATE_LIMITED:  # one pause for every session, not one each
                        pace.hold(error.retry_after or RATE_LIMIT_PAUSE)
                    raise error
                if "json" in kind or (not body.get("stream") and "event-stream" not in kind):
                    reply = self.read_json(parse_json(read_capped(resp, BODY_CAP, self.url), self.url), on_event)
                else:
                    reply = self.read_stream(capped_lines(resp, LINE_CAP), on_event)
        if reply.usage is None:  # llama-cpp-python's server streams no usage
            reply.usage = estimate_usage(body, reply.message)
        pace.spent(reply.usage.prompt_tokens + reply.usage.completion_tokens)
        reply.output_limit = output_limit(body)
        notice = self.tool_watch.check(messages, tools, reply, options.folder)
        if notice:
            on_event(Notice(message=notice))
        return reply

    def get_json(self, url: str, post: dict | None = None) -> Any:
        """A side request (model list, server properties); ProviderError if it fails (quickly:
        the port is not probed for another protocol, which the request proper does)."""
        with mapped_errors(url, self.cfg, probe=False):
            with self.client.stream("POST" if post else "GET", url, content=None if post is None else sealed(post),
                                    headers={**self.headers(), "content-type": "application/json"},
                                    timeout=min(self.cfg.timeout, DISCOVERY_TIMEOUT)) as resp:
                if resp.status_code >= 400:
                    raise self.status_error(resp, url)
                return parse_json(read_capped(resp, BODY_CAP, url), url)

    def status_error(self, resp: "httpx.Response", url: str) -> APIError:
        """An error status as one line: the server's words and, for a status no retry can fix,
        the URL and what to do."""
        error = error_from_response(resp, read_head(resp, ERROR_CAP), self.cfg.api_key)
        hint = status_hint(error.status or 0, url, self.base_url, str(error), self.key_hint())
        if not hint:
            return error
        return APIError(redact(f"{error} ({hint})", self.cfg.api_key), status=error.status,
                        retryable=error.retryable, retry_after=error.retry_after)

    def key_hint(self) -> str:
        """What to do about a refusal when no key was sent; "" when one was."""
        if self.cfg.api_key:
            return ""
        if "is not sent" in self.cfg.warning:  # config.withheld_key kept the user's key back
            return "your API key was withheld from this endpoint: see the warning above"
        return (f"no API key was sent: set {self.key_variable}, or api_key= in "
                f"~/.config/bantam/config or the project's .bantam.cfg")

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


class ToolWatch:
    """Tells once per session that the server seems to ignore `tools`. A server that has no
    tool-calling chat format (llama.cpp's llama-server without --jinja, llama-cpp-python's without
    a function-calling chat_format) drops the tools or never parses the model's calls, and the
    model then answers from thin air. Two signs, both rare when tools work: (1) the answer holds
    tool-call syntax as plain text; (2) a server on this machine or network has never returned a
    tool call in this session, and the user's prompt names a file that exists in the folder,
    yet the answer calls no tool. Once any call comes back, the server plainly parses them."""

    def __init__(self, url: str):
        self.url = url
        self.host = urlsplit(url).hostname or url
        self.called = False  # a tool call came back: the server handles tools
        self.told = False
        self._local: bool | None = None

    def check(self, messages: list[dict], tools: list[dict], reply: Reply,
              folder: Path | None) -> str:
        """The notice to give after this reply, or ""."""
        if reply.message.get("tool_calls"):
            self.called = True
        if self.told or self.called or not tools:
            return ""
        text = str(reply.message.get("content") or "")
        if written_call(text, tools):
            sign = "the model wrote a tool call as plain text and the server did not turn it into one"
        elif reply.finish_reason == "stop" and not any(m.get("role") == "tool" for m in messages) \
                and (named := named_file(last_prompt(messages), folder)) and self.local():
            sign = f"the prompt names {named} but the model answered without calling a tool"
        else:
            return ""
        self.told = True
        return (f"{sign}: the server at {self.url} may ignore `tools` (llama.cpp's llama-server needs "
                f"--jinja; llama-cpp-python's needs --chat_format chatml-function-calling), so the "
                f"answer may be made up")

    def local(self) -> bool:
        """A server on this machine or network (hosted APIs all handle tools); asked once."""
        if self._local is None:
            self._local = is_local(self.host)
        return self._local


# Tool-call markup of the common chat templates (Hermes/Qwen, Llama 3, Mistral, Functionary...)
CALL_MARKUP = re.compile(r"<\|?tool_calls?(?:_begin|_section_begin)?\|?>|\[TOOL_CALLS\]|"
                         r"<function=[\w.-]+>|<\|python_tag\|>")
# A word that names a file: has a slash, or a name with an extension ("notes.txt", "src/app.py")
PATH_WORD = re.compile(r"[\w.~/-]*/[\w.~/-]+|[\w~-][\w.-]*\.[A-Za-z0-9]{1,8}")


def written_call(text: str, tools: list[dict]) -> bool:
    """Whether `text` holds a tool call written out: a template's call markup, or a JSON object
    naming one of the offered tools with its arguments."""
    if CALL_MARKUP.search(text):
        return True
    names = [str((t.get("function") or {}).get("name") or t.get("name") or "") for t in tools]
    pattern = "|".join(re.escape(n) for n in names if n)
    return bool(pattern) and re.search(rf'"name"\s*:\s*"(?:{pattern})"', text) is not None \
        and re.search(r'"(?:arguments|parameters)"\s*:', text) is not None


def last_prompt(messages: list[dict]) -> str:
    """The text of the last user message."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # text and image parts
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def named_file(prompt: str, folder: Path | None) -> str:
    """The first word of `prompt` that names an existing file (relative to the folder), or ""."""
    for word in PATH_WORD.findall(prompt[:4000]):
        word = word.rstrip(".")
        path = Path(word).expanduser()
        if not path.is_absolute():
            if folder is None:
                continue
            path = folder / path
        try:
            if path.is_file():
                return word
        except (OSError, ValueError):  # a name too long, a NUL: not a file
            continue
    return ""


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


# Error types and codes that say the request itself is wrong, in an error event inside a stream:
# asking again sends the same request. Any other such event (`upstream overloaded`, a type this
# list does not name) is a stream the server could not finish, retried as a cut one is.
REQUEST_ERRORS = ("invalid_request", "authentication", "permission", "not_found", "request_too_large",
                  "invalid_api_key", "billing", "insufficient_quota")


def stream_error(message: str, code: Any, kind: str, secret: str) -> APIError:
    """An error object inside a 200 stream, as one error: retried unless it names the request as
    wrong (a 4xx code but 408 and 429, a REQUEST_ERRORS type) or says the context is too long
    (the loop compacts for that instead)."""
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    error = APIError(redact(f"error in stream: {message}" + (f" ({kind})" if kind else ""), secret), status=status)
    wrong = (status is not None and 400 <= status < 500 and status not in (408, 429)) \
        or any(word in f"{code} {kind}".lower() for word in REQUEST_ERRORS)
    error.retryable = not wrong and not is_context_overflow(error)
    return error


def foreign_answer(url: str, api: str, sample: Any) -> ProviderError:
    """A 200 answer in none of the shapes of the API bantam spoke: another kind of server, or the
    wrong provider= for this one. Asking again gets the same answer, so it fails at once."""
    return ProviderError(f"{url} answered, but not as {api} (it sent {terminal_safe(str(sample)[:120])!r}); "
                         f"check the endpoint and provider=", retryable=False)


def own_events(events: Iterator[tuple[str, str]], ours: Callable[[Any, str], bool], url: str,
               api: str) -> Iterator[tuple[str, Any]]:
    """(name, parsed JSON) of a stream's events, once one in the API's shape (`ours(payload,
    name)`) has come; before that, an event of another shape is held back, and a stream of
    nothing but such events (or one whose first event is not JSON) is `foreign_answer`. Once the
    API has spoken, a broken event is a stream torn mid-way, retried as a cut one. An OpenAI-style
    `[DONE]` comes as (name, None)."""
    spoke, foreign = False, ""
    for event, data in events:
        if data.strip() == "[DONE]":
            yield event, None
            continue
        try:
            payload = parse_event(data)
        except ProviderError:
            if spoke:
                raise
            raise foreign_answer(url, api, foreign or data) from None
        if not spoke and not ours(payload, event):
            foreign = foreign or data
            continue
        spoke = True
        yield event, payload
    if foreign and not spoke:
        raise foreign_answer(url, api, foreign)


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
    for chunk in arriving(resp.iter_bytes()):
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
    for chunk in arriving(resp.iter_bytes()):
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


def make_client(cfg: Config, plain: str = "") -> "httpx.Client":
    """One client per provider, so every loop step reuses the same connection. `plain`: the one
    URL the client is for (a provider's), when it may speak no TLS at all (see no_tls)."""
    httpx = load_httpx()
    proxy = socks_proxy()
    context = no_tls() if plain.startswith("http://") and not proxy and not tls_proxy() else tls_context()
    # no pool limit: parallel sub-agents share this client, each with one request at a time
    return httpx.Client(timeout=httpx.Timeout(cfg.timeout), proxy=proxy, headers={"User-Agent": USER_AGENT},
                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
                        verify=context)


def no_tls() -> "ssl.SSLContext":
    """The context of a client that only speaks plain HTTP (a local server at http://...): it
    trusts no CA, so a TLS connection through it, which nothing here makes, would fail closed.
    It spares loading the CAs (20-30 ms at start) for every llama.cpp or Ollama session."""
    import ssl
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify_mode CERT_REQUIRED, check_hostname on


def tls_proxy() -> bool:
    """An HTTP(S)/ALL proxy of the environment reached over TLS (httpx uses it for plain URLs too)."""
    return any(os.environ.get(name, "").lower().startswith("https://")
               for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"))


_tls_lock = threading.Lock()
_tls: list["ssl.SSLContext"] = []


def tls_context() -> "ssl.SSLContext":
    """The process's one TLS context, as httpx makes it (certifi's CAs, SSL_CERT_FILE/DIR): made
    once, not per client, since loading the CAs costs about 30 ms of CPU, which a batch's
    provider per worker thread paid over and over (7 ms a task at 256 at once). A context is
    safe to share between threads."""
    with _tls_lock:
        if not _tls:
            _tls.append(load_httpx().create_ssl_context())
        return _tls[0]


def socks_proxy() -> str | None:
    """SOCKS_PROXY (or socks_proxy); without it httpx reads HTTP(S)_PROXY itself."""
    proxy = os.environ.get("SOCKS_PROXY") or os.environ.get("socks_proxy")
    if proxy and "://" not in proxy:
        proxy = "socks5://" + proxy
    return proxy or None


def sealed(body: dict[str, Any]) -> bytes:
    """A request body as sent: JSON (as httpx writes it) with every secret bantam knows as ***. The
    second line of defence: what bantam reads for the model is refused at its read (fsutil.read_inside),
    and a key that slipped in anyway (a command's output, a pasted file) does not leave the machine."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return redact_known(text).encode("utf-8")


def redact(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret and len(secret) >= 4 else text


@contextlib.contextmanager
def mapped_errors(url: str, cfg: Config, probe: bool = True) -> Iterator[None]:
    """Turn httpx's exceptions into ProviderError at the provider boundary; `probe`: a timeout or
    a hang-up looks at what the port speaks (other_protocol)."""
    httpx = load_httpx()
    try:
        yield
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:
        raise ProviderError(f"bad endpoint URL {url!r}: {e}", retryable=False) from e
    except socks_errors() as e:
        named = socks_proxy() or os.environ.get("ALL_PROXY") or os.environ.get("all_proxy") or ""
        raise ProviderError(f"the SOCKS proxy {named} does not answer as a SOCKS proxy ({e}); check "
                            f"{'SOCKS_PROXY' if socks_proxy() else 'ALL_PROXY'}", retryable=False) from e
    except httpx.TimeoutException as e:
        mismatch = other_protocol(url, e, ask=False) if probe and isinstance(e, httpx.ReadTimeout) else None
        raise mismatch or ProviderError(f"no response from {url} within {cfg.timeout:g}s "
                                        f"({type(e).__name__})") from e
    except httpx.RemoteProtocolError as e:
        mismatch = other_protocol(url, e, ask=True if probe else None)
        raise mismatch or ProviderError(f"connection to {url} failed: {e or type(e).__name__}") from e
    except httpx.HTTPError as e:
        failure = None if through_proxy(url) else connect_failure(url, e)
        if failure is not None:
            raise failure from e
        proxy = socks_proxy()  # a dead proxy is named, or the endpoint would be blamed
        via = f" through the SOCKS proxy {proxy}" if proxy else ""
        raise ProviderError(f"connection to {url}{via} failed: {e or type(e).__name__}") from e


def socks_errors() -> tuple[type[BaseException], ...]:
    """The SOCKS library's errors, which a proxy that does not speak SOCKS raises and httpx maps to
    none of its own; () when no SOCKS proxy was used (httpx imports the library only for one,
    from SOCKS_PROXY or from ALL_PROXY=socks5://...)."""
    module = sys.modules.get("socksio.exceptions")
    error = getattr(module, "SOCKSError", None)
    return (error,) if isinstance(error, type) else ()


def other_protocol(url: str, error: BaseException, ask: bool | None = True) -> ProviderError | None:
    """The failure as one error no retry cures, when something other than an HTTP server listens
    at the endpoint's port (SSH, Redis, a database: a wrong port): the HTTP parser found no status
    line, or what the port sends is not HTTP: back to a request when it hung up on one (`ask`),
    or of its own accord when it went quiet (a slow HTTP server is sent no second request);
    `ask` None: the port is not looked at. None for a dropped or slow HTTP server (retried)."""
    text = str(error)
    if "illegal status line" in text or "invalid http" in text.lower():
        return ProviderError(f"{url} does not answer as an HTTP server ({text}); is the endpoint's port "
                             f"right?", retryable=False)
    if ask is None or "peer closed" in text or "incomplete" in text:  # "peer closed": HTTP had begun
        return None
    head = first_bytes(url, ask)
    if not head or head.startswith(b"HTTP/"):
        return None
    return ProviderError(f"{url} does not answer as an HTTP server (it sent {head[:40]!r}); is the "
                         f"endpoint's port right?", retryable=False)


def first_bytes(url: str, ask: bool = True) -> bytes:
    """What a plain-HTTP endpoint's port sends within a second or two, to a bare request (`ask`)
    or before one (SSH's banner); b"" through a proxy, for https, or when it sends nothing. An
    HTTP server never speaks first, and answers a request with `HTTP/`."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or through_proxy(url):
        return b""
    request = f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=PROBE_TIMEOUT) as sock:
            if ask:
                sock.sendall(request.encode())
            return sock.recv(64)
    except OSError:
        return b""


def connect_failure(url: str, error: BaseException) -> Unreachable | None:
    """The failure to connect as an Unreachable that names the URL and what to do, when its cause
    is known from the socket's error: refused, unknown host, no route. None for the rest (a reset,
    a TLS failure, a dropped stream), retried as every transient failure is."""
    cause = os_error(error)
    host = urlsplit(url).hostname or url
    if isinstance(cause, socket.gaierror):
        if cause.errno in UNKNOWN_HOST:  # NXDOMAIN: the name does not exist; waiting will not make it
            return Unreachable(f"cannot connect to {url}: the host {host} is unknown (no DNS record "
                               f"for it); check the endpoint (api_base)")
        return Unreachable(f"cannot connect to {url}: looking up {host} failed ({cause.strerror}); "
                           f"is the network up?", retries=REMOTE_RETRIES)
    if isinstance(cause, ConnectionRefusedError):
        if is_local(host):  # nothing listens on that port here: the server is not started
            return Unreachable(f"cannot connect to {url}: connection refused; is the server running? "
                               f"start it or set endpoint (api_base)")
        return Unreachable(f"cannot connect to {url}: connection refused by {host}; is the port "
                           f"right?", retries=REMOTE_RETRIES)
    if cause is not None and cause.errno in NO_ROUTE:
        return Unreachable(f"cannot connect to {url}: {cause.strerror}; is the network up?",
                           retries=REMOTE_RETRIES)
    return None


def os_error(error: BaseException) -> OSError | None:
    """The socket's own error under httpx's wrappers (ConnectError from httpcore's, from it)."""
    seen: BaseException | None = error
    for _ in range(10):  # a chain is short; a cycle must not hang
        if seen is None or isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def is_local(host: str) -> bool:
    """Whether `host` is this machine or the local network (loopback, private, link-local)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:  # a name: it resolved a moment ago (the connection was refused, not unresolved)
            addresses = [ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(host, None)]
        except (OSError, ValueError):
            return False
    return bool(addresses) and all(a.is_loopback or a.is_private or a.is_link_local for a in addresses)


def through_proxy(url: str) -> bool:
    """Whether the request went through a proxy: then a refusal or an unknown host may be the
    proxy's, and the endpoint is not blamed for it."""
    if socks_proxy():
        return True
    import urllib.request
    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    return bool(proxies.get(parts.scheme) or proxies.get("all")) and \
        not urllib.request.proxy_bypass(parts.hostname or "")


def status_hint(status: int, url: str, base_url: str, message: str, no_key: str) -> str:
    """What to do about an error status that no retry fixes ("" for the rest): a refused or
    missing key names the host (never the key), a 404 names the URL."""
    host = urlsplit(url).netloc or url
    if status in (401, 403) and no_key:
        return f"{host}: {no_key}"
    if status == 401:
        return f"the API key was refused by {host}; check it"
    if status == 403:
        return f"{host} refused this key; it may lack access to this model or endpoint"
    if status != 404:
        return ""
    path = urlsplit(base_url).path
    if "/v1" not in path and "model" not in message.lower():  # e.g. Ollama at :11434 without /v1
        return f"{url} does not exist; did you mean {base_url}/v1?"
    return f"at {url}"


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
