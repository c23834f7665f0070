"""What a command the model starts may see, and the secret values nobody may read.

    env = tool_env()          # the environment for shell_exec, the daemon's BASH and background
                              # tools, controlled-run checks, sub-agents' tools, cmd triggers
    text = redact(text)       # every secret value bantam knows, as ***

The policy (after Codex CLI's shell_environment_policy): inherit bantam's environment, then
- drop bantam's own credentials always (OPENAI_API_KEY, ANTHROPIC_API_KEY, LLM_API_KEY, and any
  variable whose value is a secret bantam registered: the api_key, web_password, telegram token);
- drop every variable whose name looks secret (SECRET_PATTERNS) unless the session's
  `env_passthrough` names it (`env_passthrough=GH_TOKEN,AWS_*`: a user whose agent must run `gh`);
  the list is a value each session passes in (its Sandbox carries it), never process state, so
  two sessions in one process (ACP folders, a batch's configurations) each get their own;
- strip `user:password@` from URLs in the variables that stay (HTTPS_PROXY=http://u:p@proxy);
- add NON_INTERACTIVE (no pager, no editor, no git password prompt).
The user's own `!cmd` is not the model's: it gets the user's environment (`user_env`).

The secret values (registered ones, values of every secret-looking variable, passed through or
not, and passwords found in URLs) are replaced by *** wherever bantam writes or prints: tool
results, threads, sessions, daemon files, run directories, --json and the terminal. A passed
variable is there for the command to use (`gh` reads GH_TOKEN); its value is not the model's to
read.
"""
from __future__ import annotations

import fnmatch
import os
import re
from typing import Iterable, Mapping

# Never passed, whatever env_passthrough says: the keys bantam itself reads.
OWN_CREDENTIALS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "LLM_API_KEY", "ATTOBOT_API_KEY")
# A variable whose upper-cased name matches one of these is dropped by default.
SECRET_PATTERNS = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*PASS*", "*PWD*", "*CREDENTIAL*",
                   "*_PAT", "*AUTH*", "*COOKIE*")
# Names the patterns catch that hold no secret (the working directory, git's author identity).
NOT_SECRET = ("PWD", "OLDPWD", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE")
# So that `git log`, `git rebase --continue` or `man` can never sit waiting for a human.
NON_INTERACTIVE = {"PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "SYSTEMD_PAGER": "cat",
                   "GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true", "GIT_TERMINAL_PROMPT": "0"}
MIN_SECRET = 4        # a shorter registered value would blank ordinary words
MIN_ENV_SECRET = 8    # values of dropped variables: `PASSWORD_MIN=8` or `AUTH=1` are not secrets
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*)"
                             r"(?::(?P<password>[^/@\s]*))?@")

_registered: set[str] = set()  # only grows: redacting a value one more session knows costs nothing


def register_secret(value: str | None) -> None:
    """A value bantam holds as a secret (api_key, web_password, a telegram token)."""
    if value and len(value) >= MIN_SECRET:
        _registered.add(value)


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return upper not in NOT_SECRET and any(fnmatch.fnmatchcase(upper, p) for p in SECRET_PATTERNS)


def passed_through(name: str, passthrough: Iterable[str]) -> bool:
    """`passthrough`: the `env_passthrough` names or globs (GH_TOKEN, AWS_*)."""
    return any(fnmatch.fnmatchcase(name.upper(), p.strip().upper()) for p in passthrough if p.strip())


def dropped(name: str, value: str, passthrough: Iterable[str] = ()) -> bool:
    """True when `name=value` must not reach a command the model starts."""
    if name in OWN_CREDENTIALS or value in _registered:
        return True
    return looks_secret(name) and not passed_through(name, passthrough)


def strip_url_credentials(value: str) -> str:
    """`https://user:pass@host/x` -> `https://host/x`."""
    return URL_CREDENTIALS.sub(lambda m: m.group("scheme"), value) if "@" in value else value


def tool_env(passthrough: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every command the model starts, given the session's `env_passthrough`
    (see the module docstring)."""
    environ = os.environ if environ is None else environ
    passthrough = tuple(passthrough)
    env = {k: strip_url_credentials(v) for k, v in environ.items() if not dropped(k, v, passthrough)}
    return {**env, **NON_INTERACTIVE}


def user_env() -> dict[str, str]:
    """The user's own `!cmd`: the user's whole environment, still never waiting on a terminal."""
    return {**os.environ, **NON_INTERACTIVE}


def known_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value bantam knows, longest first (so a key containing another is blanked whole)."""
    environ = os.environ if environ is None else environ
    found = set(_registered)
    for name, value in environ.items():
        if dropped(name, value) and len(value) >= MIN_ENV_SECRET and not value.startswith("/"):
            found.add(value)  # an absolute path (XAUTHORITY, SSH_AUTH_SOCK) is not a secret
        if "@" in value:
            for m in URL_CREDENTIALS.finditer(value):
                if m.group("password") and len(m.group("password")) >= MIN_SECRET:
                    found.add(m.group("password"))
    return sorted(found, key=len, reverse=True)


_cache: tuple[tuple, list[str]] = ((), [])


def _secrets_now() -> list[str]:
    """known_secrets(), computed again only when the registry or the environment changed size."""
    global _cache
    key = (len(_registered), len(os.environ))
    if _cache[0] != key:
        _cache = (key, known_secrets())
    return _cache[1]


def redact(text: str) -> str:
    """`text` with every known secret value replaced by ***."""
    if not text:
        return text
    for secret in _secrets_now():
        if secret in text:
            text = text.replace(secret, "***")
    return text


def redact_cut(head: str, tail: str) -> tuple[str, str]:
    """redact() for a text shown as head and tail with the middle cut out: a secret cut at a seam
    leaves no piece of MIN_SECRET characters or more behind."""
    for secret in _secrets_now():
        for k in range(len(secret) - 1, MIN_SECRET - 1, -1):
            if head.endswith(secret[:k]):
                head = head[:-k] + "***"
                break
        for k in range(len(secret) - 1, MIN_SECRET - 1, -1):
            if tail.startswith(secret[-k:]):
                tail = "***" + tail[k:]
                break
    return redact(head), redact(tail)


class StreamRedactor:
    """redact() for a byte stream written in pieces (a command's full output on disk): a secret
    split across two pieces is still caught, by holding back the last len(longest secret) - 1
    bytes until the next piece or `flush`."""

    def __init__(self) -> None:
        self.secrets = [s.encode() for s in _secrets_now()]
        self.keep = max((len(s) for s in self.secrets), default=1) - 1
        self.pending = b""

    def feed(self, data: bytes) -> bytes:
        if not self.secrets:
            return data
        data = self.pending + data
        for secret in self.secrets:
            data = data.replace(secret, b"***")
        cut = max(len(data) - self.keep, 0)
        self.pending = data[cut:]
        return data[:cut]

    def flush(self) -> bytes:
        rest, self.pending = self.pending, b""
        return rest
