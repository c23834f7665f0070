"""SEARCH (DuckDuckGo's HTML results page, or any server at search_url that answers the same way)
and WEB_FETCH (a page as Markdown). httpx through bantam's client; BeautifulSoup and markdownify
are imported only when a page is read."""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

from ..errors import ToolError
from ..providers.http import load_httpx, read_head

FETCH_TIMEOUT = 30.0
MAX_BYTES = 2 * 1024 * 1024      # of one page read at most (the HTML parser needs ~50x that in memory)
MAX_RESULTS = 10
DROP_TAGS = ("script", "style", "noscript", "svg", "iframe", "head")


def fetch(client: Any, url: str) -> str:
    """The page at `url`: HTML as Markdown, text as it is, anything else described."""
    if urlparse(url).scheme not in ("http", "https"):
        raise ToolError(f"not an http(s) URL: {url!r}")
    response, body = _get(client, "GET", url)
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    clipped = len(body) > MAX_BYTES
    body = body[:MAX_BYTES]
    if "html" in kind or (not kind and body.lstrip()[:1] == b"<"):
        text = markdown(body.decode(response.encoding or "utf-8", "replace"))
    elif kind.startswith("text/") or kind.endswith(("json", "xml", "javascript")):
        text = body.decode(response.encoding or "utf-8", "replace")
    else:
        size = response.headers.get("content-length") or (f"over {MAX_BYTES}" if clipped else len(body))
        return f"{url}: {kind or 'unknown type'}, {size} bytes (not text; download it with BASH)"
    note = f"\n\n[only the first {MAX_BYTES >> 20} MB of the page were read]" if clipped else ""
    return f"{response.url} (HTTP {response.status_code})\n\n{text.strip()}{note}"


def search(client: Any, base_url: str, query: str) -> str:
    if not query.strip():
        raise ToolError("the query is empty")
    response, body = _get(client, "POST", base_url, data={"q": query})
    results = parse_results(body[:MAX_BYTES].decode(response.encoding or "utf-8", "replace"))
    if not results:
        return f"no results for {query!r}"
    return "\n\n".join(f"{i}. {title}\n   {link}\n   {snippet}".rstrip()
                       for i, (title, link, snippet) in enumerate(results, 1))


def _get(client: Any, method: str, url: str, **kw: Any) -> tuple[Any, bytes]:
    """The response and at most MAX_BYTES + 1 bytes of its body (an endless page is cut there)."""
    httpx = load_httpx()
    try:
        with client.stream(method, url, follow_redirects=True, timeout=FETCH_TIMEOUT, **kw) as response:
            if response.status_code >= 400:
                raise ToolError(f"{method} {url}: HTTP {response.status_code}")
            return response, read_head(response, MAX_BYTES + 1)
    except httpx.HTTPError as e:
        raise ToolError(f"{method} {url} failed: {e or type(e).__name__}") from e


def markdown(html: str) -> str:
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter
    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(strip=True) if soup.title else ""
    for tag in soup(DROP_TAGS):
        tag.decompose()
    text = MarkdownConverter(heading_style="ATX").convert_soup(soup)
    lines = [line.rstrip() for line in text.splitlines()]
    body = "\n".join(lines)
    while "\n\n\n" in body:
        body = body.replace("\n\n\n", "\n\n")
    return f"# {title}\n\n{body.strip()}" if title else body


def parse_results(html: str) -> list[tuple[str, str, str]]:
    """(title, url, snippet) from DuckDuckGo's HTML page: a.result__a and .result__snippet."""
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(html, "html.parser")
    results = []
    for link in soup.select("a.result__a")[:MAX_RESULTS]:
        box = link.find_parent(class_="result") or link.parent
        snippet = box.select_one(".result__snippet") if box else None
        results.append((link.get_text(" ", strip=True), _target(str(link.get("href", ""))),
                        snippet.get_text(" ", strip=True) if snippet else ""))
    return results


def _target(href: str) -> str:
    """DuckDuckGo links go through //duckduckgo.com/l/?uddg=<the real URL>."""
    query = parse_qs(urlparse(href).query)
    return query["uddg"][0] if "uddg" in query else href
