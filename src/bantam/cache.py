"""Facts about endpoints remembered between runs, in `~/.bantam/cache/`.

`context.json` maps "URL MODEL" to that model's context window and where the number came from:
"learned" (the server's own refusal said it: kept until a new refusal says otherwise) or
"discovered" (the server's model list: kept for DISCOVERED_DAYS; 0 when it named none). So the second run asks nothing,
and a server whose model list says nothing (llama-cpp-python's) is known after its first 400.
A cache that cannot be read or written is not used; it never stops a run.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any

from .fsutil import atomic_write, bantam_home, private_dir

CONTEXT_FILE = "context.json"
DISCOVERED_DAYS = 7
UNKNOWN_DAYS = 1  # a server that named no window (window 0) is asked again the next day
# How servers state their limit in a refusal: OpenAI and vLLM, llama-cpp-python, Anthropic, bantam's local
# provider, llama.cpp's server.
_LIMIT = re.compile(r"maximum context length is (\d+)|context window of (\d+)|tokens? > (\d+) maximum|"
                    r"n_ctx(?: is|\W+)\s*(\d+)|context (?:size|length|window)\D{0,20}?(\d{3,})", re.I)


def stated_limit(message: str) -> int | None:
    """The context window a server names in its "too long" error, if it names one."""
    match = _LIMIT.search(message)
    number = next((g for g in match.groups() if g), None) if match else None
    return int(number) if number and int(number) > 0 else None


def remembered_window(url: str, model: str) -> tuple[int, str] | None:
    """(window, "learned"|"discovered") for this endpoint and model, if known and not stale."""
    entry = _read(CONTEXT_FILE).get(f"{url} {model}")
    if not isinstance(entry, dict) or not isinstance(entry.get("window"), int):
        return None
    source, window = str(entry.get("source", "")), entry["window"]
    days = DISCOVERED_DAYS if window else UNKNOWN_DAYS
    if source != "learned" and time.time() - float(entry.get("time", 0)) > days * 86400:
        return None
    return window, source


def remember_window(url: str, model: str, window: int, source: str,
                    prices: tuple[float, float] | None = None) -> None:
    data = _read(CONTEXT_FILE)
    old = data.get(f"{url} {model}")
    entry = {"window": window, "source": source, "time": int(time.time())}
    prices = prices or (old.get("prices") if isinstance(old, dict) else None)
    if prices:
        entry["prices"] = list(prices)
    data[f"{url} {model}"] = entry
    _write(CONTEXT_FILE, data)


def remembered_prices(url: str, model: str) -> tuple[float, float] | None:
    """Dollars per prompt and completion token, as the model list gave them."""
    entry = _read(CONTEXT_FILE).get(f"{url} {model}")
    prices = entry.get("prices") if isinstance(entry, dict) else None
    if isinstance(prices, list) and len(prices) == 2 and all(isinstance(p, (int, float)) for p in prices):
        return float(prices[0]), float(prices[1])
    return None


def _read(name: str) -> dict[str, Any]:
    try:
        data = json.loads((bantam_home() / "cache" / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(name: str, data: dict[str, Any]) -> None:
    try:
        folder = private_dir(bantam_home() / "cache")
        atomic_write(folder / name, json.dumps(data, indent=1, sort_keys=True).encode(), 0o600)
    except OSError:
        pass  # a read-only home: the run goes on without the cache
