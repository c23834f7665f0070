"""What every HTTP provider shares: the client, error mapping, and reading error bodies."""
from __future__ import annotations

import contextlib
import email.utils
import json
import os
import re
import time
from typing import TYPE_CHECKING, Any, Iterator

from ..config import Config
from ..errors import APIError, ProviderError

if TYPE_CHECKING:
    import httpx

USER_AGENT = "Mozilla/5.0 (compatible; Bantam/1.0)"  # seed: avoids gateway 403 blocks
RETRYABLE_STATUS = {408, 429}  # and every 5xx


def make_client(cfg: Config) -> "httpx.Client":
    """One client per provider, so every loop step reuses the same connection."""
    import httpx
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
    import httpx
    try:
        yield
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:
        raise ProviderError(f"bad endpoint URL {url!r}: {e}", retryable=False) from e
    except httpx.TimeoutException as e:
        raise ProviderError(f"no response from {url} within {cfg.timeout:g}s "
                            f"({type(e).__name__})") from e
    except httpx.HTTPError as e:
        raise ProviderError(f"connection to {url} failed: {e or type(e).__name__}") from e


def error_from_response(response: "httpx.Response", body: bytes, secret: str) -> APIError:
    status = response.status_code
    message = describe_body(body, response.headers.get("content-type", ""))
    return APIError(redact(f"HTTP {status}: {message}", secret), status=status,
                    retryable=status in RETRYABLE_STATUS or status >= 500,
                    retry_after=parse_retry_after(response.headers.get("retry-after")))


def describe_body(body: bytes, content_type: str) -> str:
    """The API's own message where there is one, else a short, readable hint of the body."""
    text = body.decode("utf-8", "replace").strip()
    try:
        message = error_message(json.loads(text))
        if message:
            return message
    except ValueError:
        pass
    if "html" in content_type or text[:100].lstrip().lower().startswith(("<!doctype", "<html")):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        return "an HTML page" + (f" ({' '.join(title.group(1).split())[:100]})" if title else "") + \
            ", not an API response: is the endpoint right?"
    return " ".join(text.split())[:300] or "(empty body)"


def error_message(obj: Any) -> str:
    """Find the message in {"error": {"message": ...}}, {"error": "..."}, {"message": ...}, {"detail": ...}."""
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
