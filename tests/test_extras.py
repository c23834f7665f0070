"""The helper scripts in extras/ (websearch, weather, context7), run as the agent runs them: as
processes, by their path, against a real HTTP server on 127.0.0.1 that answers as the services
do (DuckDuckGo's HTML results, wttr.in's text and JSON, Context7's search JSON and docs text)."""
import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import base_cfg, run_bantam
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply

EXTRAS = Path(__file__).resolve().parent.parent / "extras"

DDG_PAGE = """<html><body><div class="serp__results">
<div class="result results_links results_links_deep web-result"><div class="links_main links_deep result__body">
 <h2 class="result__title"><a rel="nofollow" class="result__a"
   href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.python.org%2F3%2Flibrary%2Fasyncio.html&amp;rut=abc">asyncio &mdash;
   Asynchronous I/O</a></h2>
 <a class="result__snippet" href="//duckduckgo.com/l/?uddg=x">asyncio is a library to write <b>concurrent</b> code</a>
</div></div>
<div class="result results_links"><div class="links_main result__body">
 <h2 class="result__title"><a class="result__a" href="https://example.org/second">Second result</a></h2>
 <a class="result__snippet">the second snippet</a>
</div></div>
<div class="result results_links"><div class="links_main result__body">
 <h2 class="result__title"><a class="result__a" href="https://example.org/third">Third result</a></h2>
</div></div>
</div></body></html>"""

WTTR_TEXT = "Weather report: London\n\n     \\  /       Partly cloudy\n   _ /\"\".-.     +12(10) °C\n"
WTTR_JSON = {"current_condition": [{"temp_C": "12", "weatherDesc": [{"value": "Partly cloudy"}]}],
             "nearest_area": [{"areaName": [{"value": "Tokyo"}]}]}
C7_SEARCH = {"results": [
    {"id": "/expressjs/express", "name": "Express", "description": "Fast, unopinionated\n web framework",
     "totalSnippets": 120, "trustScore": 9.1},
    {"id": "/other/express-like", "name": "Express-like", "description": "a lookalike"}]}
C7_DOCS = "TITLE: Error-handling middleware\nDESCRIPTION: Define it with four arguments (err, req, res, next)."


class Web:
    """One server standing in for the three services; records what each request asked."""

    def __init__(self):
        self.requests: list[dict] = []
        self.big = False
        web = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.answer(b"")

            def do_POST(self):
                self.answer(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def answer(self, body: bytes):
                url = urlsplit(self.path)
                web.requests.append({"method": self.command, "path": url.path, "query": url.query,
                                     "form": parse_qs(body.decode()), "headers": dict(self.headers)})
                status, kind, data = web.route(self.command, url.path, parse_qs(url.query))
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def route(self, method: str, path: str, query: dict) -> tuple[int, str, bytes]:
        if self.big:
            return 200, "text/plain", b"x" * (3 << 20)
        if method == "POST" and path == "/html/":
            return 200, "text/html; charset=utf-8", DDG_PAGE.encode()
        if path == "/v2/libs/search":  # {"results": [...]}, or the bare list as its API guide shows
            found = C7_SEARCH if query.get("libraryName") != ["bare"] else C7_SEARCH["results"][1:]
            return 200, "application/json", json.dumps(found).encode()
        if path == "/v2/context" and query.get("libraryId") == ["/expressjs/express"]:
            return 200, "text/plain", C7_DOCS.encode()
        if path == "/Tokyo":
            return 200, "application/json", json.dumps(WTTR_JSON).encode()
        if path == "/London" or path == "/":
            return 200, "text/plain; charset=utf-8", WTTR_TEXT.encode()
        return 500, "text/plain", b"internal error"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def web():
    w = Web()
    yield w
    w.close()


def extra(name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The script run by its path, as shell_exec runs it (its own shebang, python3 on PATH)."""
    return subprocess.run([str(EXTRAS / name), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)


def one_line(r: subprocess.CompletedProcess, code: int, start: str) -> None:
    assert r.returncode == code and r.stdout == "", r
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(start), r.stderr


def test_websearch_posts_the_query_and_prints_titles_real_links_and_snippets(web):
    r = extra("websearch", "python asyncio", "2", WEBSEARCH_URL=f"{web.url}/html/")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("1. asyncio — Asynchronous I/O\n   https://docs.python.org/3/library/asyncio.html\n"
                        "   asyncio is a library to write concurrent code\n\n"
                        "2. Second result\n   https://example.org/second\n   the second snippet\n")
    [asked] = web.requests
    assert asked["method"] == "POST" and asked["form"] == {"q": ["python asyncio"]}
    assert "Third result" in extra("websearch", "x", WEBSEARCH_URL=f"{web.url}/html/").stdout  # default 5


def test_weather_asks_wttr_for_plain_text_and_pretty_prints_json(web):
    r = extra("weather", "-u", "u", "-L", "de", "-1", "London", WTTRAPI=web.url)
    assert r.returncode == 0 and r.stdout == WTTR_TEXT.rstrip() + "\n", r.stderr
    asked = web.requests[-1]
    assert asked["path"] == "/London" and asked["query"] == "u1T&lang=de"  # T: no terminal escapes
    assert asked["headers"]["User-Agent"].startswith("curl/")  # wttr.in's text, not its HTML page
    r = extra("weather", "-j", "Tokyo", WTTRAPI=web.url)
    assert r.returncode == 0 and json.loads(r.stdout) == WTTR_JSON and "\n  " in r.stdout
    assert web.requests[-1]["query"] == "T&format=j1"
    r = extra("weather", "-f", "%l: %c %t", "New", "York", WTTRAPI=web.url)
    assert web.requests[-1]["path"] == "/New%20York" and web.requests[-1]["query"] == "T&format=%25l%3A%20%25c%20%25t"


def test_context7_resolves_queries_and_sends_the_key_only_as_a_header(web):
    env = {"CONTEXT7_API_URL": web.url, "CONTEXT7_API_KEY": "c7-secret-key"}
    r = extra("context7", "resolve", "express", **env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "/expressjs/express  Express: Fast, unopinionated web framework (snippets: 120, trust: 9.1)",
        "/other/express-like  Express-like: a lookalike (snippets: ?, trust: ?)"]
    assert parse_qs(web.requests[-1]["query"]) == {"libraryName": ["express"], "query": ["express"]}
    assert extra("context7", "resolve", "bare", **env).stdout.startswith("/other/express-like  Express-like")
    r = extra("context7", "docs", "express", "middleware errors", **env)
    assert r.returncode == 0 and r.stdout == C7_DOCS + "\n" and r.stderr == "context7: using /expressjs/express\n"
    searched, asked = web.requests[-2:]
    assert parse_qs(searched["query"]) == {"libraryName": ["express"], "query": ["middleware errors"]}
    assert asked["path"] == "/v2/context"
    assert parse_qs(asked["query"]) == {"libraryId": ["/expressjs/express"], "query": ["middleware errors"],
                                        "type": ["txt"]}
    assert asked["headers"]["Authorization"] == "Bearer c7-secret-key"
    assert all("c7-secret-key" not in q["path"] + q["query"] for q in web.requests)


@pytest.mark.parametrize("name,args,env,code,start", [
    ("websearch", ("",), {}, 2, "websearch: the query is empty"),
    ("websearch", ("x", "99"), {}, 2, "websearch: count must be 1 to 20, got 99"),
    ("weather", ("-u", "x"), {}, 2, "weather: argument -u/--units: invalid choice"),
    ("weather", ("-j", "-f", "3"), {}, 2, "weather: -j and -f cannot go together"),
    ("weather", (), {"WEATHER_TIMEOUT": "soon"}, 1, "weather: WEATHER_TIMEOUT='soon': expected a number"),
    ("context7", (), {}, 2, "context7: the following arguments are required"),
    ("context7", ("query", "../../etc", "x"), {}, 1, "context7: '../../etc' is no library ID"),
    ("context7", ("query", "/a/b", " "), {}, 2, "context7 query: argument question: a question of 1 to 500"),
])
def test_bad_usage_is_one_line_and_asks_nothing(web, name, args, env, code, start):
    urls = {"WEBSEARCH_URL": f"{web.url}/html/", "WTTRAPI": web.url, "CONTEXT7_API_URL": web.url}
    one_line(extra(name, *args, **urls, **env), code, start)
    assert not web.requests


@pytest.mark.parametrize("name,args,path", [("websearch", ("q",), "/broken/"), ("weather", ("Paris",), "/Paris"),
                                            ("context7", ("query", "/no/such", "x"), "/v2/context")])
def test_a_failing_service_an_unreachable_one_and_an_endless_answer_are_one_line(web, name, args, path):
    def run(base: str) -> subprocess.CompletedProcess:
        return extra(name, *args, WEBSEARCH_URL=f"{base}/broken/", WTTRAPI=base, CONTEXT7_API_URL=base)
    one_line(run(web.url), 1, f"{name}: {web.url}{path}")
    assert ": HTTP 500 Internal Server Error\n" in run(web.url).stderr
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{s.getsockname()[1]}"
    one_line(run(gone), 1, f"{name}: {gone}{path}")
    web.big = True  # an answer over the byte bound is an error, never read whole
    one_line(run(web.url), 1, f"{name}: {web.url}{path}")
    assert run(web.url).stderr.endswith(f": the answer is over {2 << 20} bytes\n")


def test_output_is_bounded(web):
    long_docs = "line of documentation\n" * 5000  # 110,000 characters
    web.route = lambda method, path, query: (200, "text/plain", long_docs.encode())
    r = extra("context7", "query", "/a/b", "x", CONTEXT7_API_URL=web.url)
    assert r.returncode == 0 and len(r.stdout) < 31_000
    assert r.stdout.rstrip().endswith("more characters not shown]")


def test_the_agent_finds_them_through_bantam_tools_dir_and_runs_them_in_the_sandbox(home, web):
    """The user's file names extras/ and lets the sandbox reach the network, as docs/usage.md
    says: the prompt says where the tools are, and the model's shell_exec runs one."""
    user = Path(os.environ["HOME"], ".config", "bantam", "config")
    user.parent.mkdir(parents=True)
    with FakeServer() as server:
        user.write_text("".join(f"{k}={v}\n" for k, v in base_cfg(server).items())
                        + f"bantam_tools_dir={EXTRAS}\nsandbox_network=true\n")
        server.add(tool_reply("shell_exec", {"command": f"{EXTRAS}/websearch 'python asyncio' 1"}),
                   text_reply("found it"))
        r = run_bantam("-p", "search", cwd=home, env={"WEBSEARCH_URL": f"{web.url}/html/"})
        assert r.returncode == 0, r.stderr
        first, second = server.chat_requests()
    system = first.body["messages"][0]["content"]
    assert f"Extra shell tools can be found at {EXTRAS}" in system
    result = second.body["messages"][-1]["content"]
    assert "https://docs.python.org/3/library/asyncio.html" in result and result.endswith("exit: 0"), result


def test_running_them_leaves_their_folder_as_it_was(web):
    """A project's trusted tools folder is pinned to its files: a script that left __pycache__
    beside itself would make the folder untrusted by being run once."""
    from bantam.trust import tree_digest
    before = tree_digest(EXTRAS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for name, args in (("websearch", ("q",)), ("weather", ("London",)), ("context7", ("resolve", "x"))):
        subprocess.run([str(EXTRAS / name), *args], env={**env, "WEBSEARCH_URL": f"{web.url}/html/",
                                                         "WTTRAPI": web.url, "CONTEXT7_API_URL": web.url},
                       capture_output=True, timeout=60, check=True)
    assert tree_digest(EXTRAS) == before
