"""bantam's exceptions, all in one tree.

    BantamError
     ├── ConfigError       bad configuration or usage: says what and where (exit 2)
     ├── ProviderError     the model API failed; .retryable says whether waiting may help (exit 1)
     │    ├── APIError     the server answered with an error status or an error object
     │    └── Unreachable  nothing answers at the endpoint (refused, unknown host); .retries caps waiting
     ├── LimitReached      max_al_iterations or tool_budget ran out (exit 1)
     ├── ToolError         a tool could not do what was asked; the message goes back to the model
     │    └── Refused      a path or call refused on principle (outside the workspace, not allowed)
     ├── SessionError      a session is missing, ambiguous or unreadable
     ├── NotJson           `bantam web`: a POST whose body is not JSON (answered 415)
     ├── Rejected          a controlled run's gate refused a proposal; the reason goes to the model
     ├── Blocked           a controlled run's budget or gate stopped the run (resumable)
     ├── ParseError        a controlled run's answer could not be parsed (also a ValueError)
     ├── SchemaError       ... parsed, but not a proposal of an expected kind (also a ValueError)
     └── (defined where they are raised) sanitize.TooDeep (also a ValueError), runs.loop.Paused,
         batch.redisq.QueueError
    Terminated (BaseException, like SystemExit)   SIGTERM or SIGHUP: exit 128 + the signal's number

tests/test_errors_tree.py checks that every exception a bantam module defines is in this tree.
Provider code maps httpx's exceptions onto ProviderError at its boundary, so nothing above the
providers ever sees an HTTP library's exception; `is_context_overflow` classifies a refusal for
context length here, where both the providers (which learn the stated window) and the loop
(which compacts) can ask without one importing the other.
"""
from __future__ import annotations

import re

# How servers word a refusal for context length (OpenAI, Anthropic, llama.cpp, vLLM, Ollama...)
_CONTEXT_ERRORS = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|"
    r"reduce the length|input is too long|exceeds? the (context|maximum)|n_ctx", re.I)


class BantamError(Exception):
    """Base of every error bantam raises on purpose."""


class ConfigError(BantamError):
    """A configuration value or a command-line argument is wrong."""


class ProviderError(BantamError):
    """A request to the model failed: connection, timeout, unreadable or truncated response."""

    def __init__(self, message: str, *, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class APIError(ProviderError):
    """The API answered with an error (an HTTP status >= 400 or an error object in the body)."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None):
        super().__init__(message, retryable=retryable, retry_after=retry_after)
        self.status = status

    @property
    def invalid_assistant_message(self) -> bool:
        """The error a cut-off stream causes later: an empty assistant message in the history."""
        return "content or tool_calls must be set" in str(self)


class Unreachable(ProviderError):
    """The endpoint cannot be reached: the connection was refused, or its host name does not
    resolve. `retries` is how many retries may still help: 0 where nothing will come by waiting
    (a server on this machine that is not running, a name that does not exist); a few where the
    cause may pass (a remote server restarting, a DNS hiccup). The message names the URL and
    what to do."""

    def __init__(self, message: str, *, retries: int = 0):
        super().__init__(message, retryable=retries > 0)
        self.retries = retries


def is_context_overflow(error: BaseException) -> bool:
    """The server refused the request because the conversation is longer than the model's
    context window (the loop compacts and asks again; a provider learns the stated window)."""
    return isinstance(error, APIError) and error.status in (400, 413, 422, None) \
        and bool(_CONTEXT_ERRORS.search(str(error)))


class LimitReached(BantamError):
    """The loop stopped because an iteration or tool budget ran out; `turn` holds what was done."""

    def __init__(self, message: str, turn: object = None):
        super().__init__(message)
        self.turn = turn


class OutputLimitReached(LimitReached):
    """An answer was cut at the output limit where a cut one cannot stand (in a tool call)."""


class ToolError(BantamError):
    """A tool refused or failed; its message is returned to the model so it can correct itself."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP. Not a KeyboardInterrupt, which the terminal catches to go on: this one
    ends bantam, through every `finally` on the way (the running command's process group is
    killed, files are left whole; only complete steps were ever saved)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class Refused(ToolError):
    """A path or call refused on principle; `status` is the HTTP answer where one is due
    (403: outside or hidden, 404: not a file)."""

    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


class SessionError(BantamError):
    """A session is missing, ambiguous or unreadable."""


class NotJson(BantamError):
    """`bantam web`: a POST whose body is not JSON: answered 415."""


class Rejected(BantamError):
    """A controlled run's gate refused a proposed call, plan step or final answer."""

    def __init__(self, gate: str, reason: str):
        super().__init__(f"{gate}: {reason}")
        self.gate, self.reason = gate, reason


class Blocked(BantamError):
    """A controlled run stopped at a gate or budget; resumable with --retry-blocked."""

    def __init__(self, gate: str, reason: str):
        super().__init__(f"{gate}: {reason}")
        self.gate, self.reason = gate, reason


class ParseError(BantamError, ValueError):
    """A controlled run's answer that cannot be used; str() is the correction sent to the model."""


class SchemaError(BantamError, ValueError):
    """The JSON is fine but not a proposal of an expected kind; the message names the field."""
