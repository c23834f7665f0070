"""What the extras share: one bounded HTTP request, errors as one line, bounded output.

Standard library only, so a script runs with whatever python3 is on PATH, inside bantam's
sandbox or out of it. Not a tool itself (the leading underscore); the scripts beside it import it.
"""
from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, NoReturn

MAX_BYTES = 2 << 20     # of an answer read at most: a longer one is an error, never memory growth
MAX_OUTPUT = 30_000     # characters printed at most; the model reads every one of them
# wttr.in answers plain text to command-line clients (curl, wget, httpie) and HTML to browsers
USER_AGENT = "curl/8 (compatible; bantam-extras)"


class Failed(Exception):
    """What went wrong, in one line; the script prints it and exits 1."""


class Parser(argparse.ArgumentParser):
    """Bad usage is one line (what and where) and exit 2, not argparse's usage block; --help is
    the script's docstring as written."""

    def __init__(self, prog: str, doc: str | None = None, **rest: Any):
        super().__init__(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **rest)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def setting(name: str, default: str) -> str:
    """An environment override (a base URL, a timeout), else the default."""
    return os.environ.get(name) or default


def seconds(name: str, default: float) -> float:
    text = setting(name, str(default))
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise Failed(f"{name}={text!r}: expected a number of seconds above 0")
    return value


def fetch(url: str, timeout: float, data: bytes | None = None, headers: dict[str, str] | None = None) -> str:
    """The body of a 2xx answer as text; Failed for anything else."""
    if not url.startswith(("http://", "https://")):
        raise Failed(f"{url!r}: not an http(s) URL")
    request = urllib.request.Request(url, data=data, headers={"User-Agent": USER_AGENT, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: bytes = response.read(MAX_BYTES + 1)
            charset: str = response.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as e:
        raise Failed(f"{url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise Failed(f"{url}: {e.reason}") from None
    except (OSError, ValueError) as e:  # a timeout, a reset, a malformed answer
        raise Failed(f"{url}: {e or type(e).__name__}") from None
    if len(body) > MAX_BYTES:
        raise Failed(f"{url}: the answer is over {MAX_BYTES} bytes")
    return body.decode(charset, "replace")


def show(text: str) -> None:
    """Print at most MAX_OUTPUT characters, saying how many more there were."""
    if len(text) > MAX_OUTPUT:
        text = f"{text[:MAX_OUTPUT]}\n[{len(text) - MAX_OUTPUT} more characters not shown]"
    print(text)


def main(name: str, run: Callable[[], str]) -> NoReturn:
    """Run, print the result, exit 0; a failure is one line on stderr and exit 1."""
    try:
        text = run()
    except Failed as e:
        print(f"{name}: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    try:
        show(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `websearch x | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(0)
