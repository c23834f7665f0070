"""The page's HTTP side: one Starlette app, a guard in front of every route, and the routes.

Who may do what (docs/web.md explains the reasoning):
- a request whose Host is not this server's own name (127.0.0.1:PORT, localhost:PORT, [::1]:PORT,
  or one given with --allow-host) is refused first, so a DNS-rebinding page reaches nothing
  (Jupyter Server's allow_remote_access / local_hostnames);
- a printed token is exchanged for the cookie once, then spent (it stays in browser history);
  wrong guesses of the token or password are answered more and more slowly, one at a time;
- every route needs the token (or `web_password`): an HttpOnly, SameSite=Strict cookie set when
  the printed link's `?token=` is first opened, or `Authorization: Bearer TOKEN` from a script;
- a request that changes something (POST) must also come from the page's own origin and carry
  JSON, so another site (or the sandboxed viewer, whose origin is opaque) cannot forge one;
- `/raw/KEY/PATH` is the exception: it serves workspace files to the viewer's sandboxed frame
  and to <img>, with its own read-only key instead of the cookie, and a CSP (`RAW_CSP`) with
  `sandbox`, so whatever it serves runs on an opaque origin that can reach no other route, and
  that forbids every connection and form post, so it can send nothing anywhere.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import secrets
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import transcripts, undo
from ..errors import ConfigError, NotJson
from .files import MAX_TEXT, FileView, Refused, highlight
from .session import WebSession

KEEPALIVE = 15.0  # seconds between comments on an idle event stream, so proxies keep it open
GUESS_DELAY = 0.5    # seconds added to the answer to a wrong token or password, doubling each time
GUESS_DELAY_MAX = 10.0
SANDBOX = "sandbox allow-scripts allow-forms allow-modals allow-pointer-lock allow-downloads"
# A workspace file in the viewer was written by the model, which anything it read may have
# steered; with sandbox_network=off, a page that could fetch would be the way out, through the
# user's browser. So it may load what it needs from this server (its own scripts, styles, images,
# fonts, sounds, nested pages, inline code) and connect nowhere: no fetch, XHR, WebSocket,
# EventSource or beacon (connect-src 'none', even to this server), no form post (form-action
# 'none'), nothing from any other server (default-src 'none'). The frame's origin is opaque, but
# 'self' is matched against the URL the file came from (tests/web/test_web_browser.py checks it).
RAW_CSP = (f"{SANDBOX}; default-src 'none'; script-src 'self' 'unsafe-inline' 'unsafe-eval' "
           "'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
           "font-src 'self' data:; media-src 'self' data: blob:; worker-src 'self' blob:; "
           "frame-src 'self'; connect-src 'none'; form-action 'none'; base-uri 'self'; "
           "frame-ancestors 'self'")
API_CSP = "default-src 'none'; frame-ancestors 'none'"
LOGIN_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
PAGE_CSP = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
            "img-src 'self' data:; frame-src 'self'; connect-src 'self'; form-action 'none'; "
            "base-uri 'none'; frame-ancestors 'none'")
LOGIN_PAGE = """<!doctype html><meta charset="utf-8"><title>bantam</title>
<style>body{font:15px system-ui,sans-serif;margin:15vh auto;max-width:26em;color:#222}
input{font:inherit;padding:.4em;width:100%;box-sizing:border-box;margin:.5em 0}</style>
<h1>bantam</h1><p>Open the link that <code>bantam web</code> printed, or enter its token
(or the configured <code>web_password</code>).</p>
<form method="post" action="/login"><input type="password" name="password" autofocus
placeholder="token or password"><input type="submit" value="Open"></form>"""


@dataclass
class Keys:
    secret: str                                           # the printed token, or web_password
    port: int
    one_time: bool = True          # a printed token is spent once exchanged for the cookie
    hosts: tuple[str, ...] = ()    # Host names allowed besides the loopback ones (--allow-host)
    cookie: str = field(default_factory=lambda: secrets.token_urlsafe(32))  # not the password
    view: str = field(default_factory=lambda: secrets.token_urlsafe(24))    # /raw/ only
    spent: bool = False
    failures: int = 0
    guesses: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def cookie_name(self) -> str:
        # Browsers do not keep cookies apart by port; the name only keeps two servers' cookies from
        # overwriting each other. What protects the page is the Host check and SameSite=Strict.
        return f"bantam_{self.port}"

    def valid_secret(self, given: str) -> bool:
        return not self.spent and hmac.compare_digest(given.encode(), self.secret.encode())

    def bearer(self, request: Request) -> str | None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return given.strip() if scheme.lower() == "bearer" else None

    def authorized(self, request: Request) -> bool:
        cookie = request.cookies.get(self.cookie_name, "")
        if cookie and hmac.compare_digest(cookie.encode(), self.cookie.encode()):
            return True
        given = self.bearer(request)
        return given is not None and self.valid_secret(given)

    def signed_in(self, response: Response) -> Response:
        response.set_cookie(self.cookie_name, self.cookie, httponly=True, samesite="strict", path="/")
        self.spent = self.one_time  # the link (in browser history) signs nobody in again
        return response

    async def check_guess(self, given: str) -> bool:
        """A sign-in attempt; guesses wait in line, and each wrong one waits longer than the last."""
        async with self.guesses:
            if self.valid_secret(given):
                self.failures = 0
                return True
            self.failures += 1
            await asyncio.sleep(min(GUESS_DELAY * 2 ** (self.failures - 1), GUESS_DELAY_MAX))
            return False

    def host_allowed(self, host: str) -> bool:
        """Host is this server's loopback name with its port, or one the user allowed."""
        if host.endswith("]") or ":" not in host:
            name, port = host, "80"
        else:
            name, _, port = host.rpartition(":")
        if "*" in self.hosts or name.lower() in self.hosts or host.lower() in self.hosts:
            return True
        if port != str(self.port):
            return False
        if name.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(name.strip("[]")).is_loopback
        except ValueError:
            return False


class Guard:
    """ASGI middleware: the token check, the same-origin check, and headers on every response."""

    def __init__(self, app: Any, keys: Keys):
        self.app, self.keys = app, keys

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        path = scope["path"]
        refusal: Response | None = None
        if not self.keys.host_allowed(request.headers.get("host", "")):
            refusal = JSONResponse({"error": "unknown Host; start bantam web with --allow-host NAME "
                                             "to use this name"}, 403)
        elif request.method not in ("GET", "HEAD") and not same_origin(request):
            refusal = JSONResponse({"error": "cross-origin request refused"}, 403)
        elif path == "/" and "token" in request.query_params:
            refusal = await self.sign_in(request.query_params["token"])
        elif not (path.startswith("/raw/") or path == "/login" or self.keys.authorized(request)):
            if self.keys.bearer(request) is not None:
                await self.keys.check_guess("\0")  # a wrong bearer token is a guess too: slowed
            refusal = HTMLResponse(LOGIN_PAGE, 401, headers={"Content-Security-Policy": LOGIN_CSP}) \
                if path == "/" else JSONResponse({"error": "missing or wrong token"}, 401)
        app = refusal or self.app
        await app(scope, receive, with_headers(send))

    async def sign_in(self, token: str) -> Response:
        """`/?token=`: set the cookie and go to `/`, so the token leaves the address bar (and any
        referrer the page might send)."""
        if not await self.keys.check_guess(token):
            return HTMLResponse(LOGIN_PAGE, 401, headers={"Content-Security-Policy": LOGIN_CSP})
        return self.keys.signed_in(RedirectResponse("/", 303))


def same_origin(request: Request) -> bool:
    """A browser names where a request comes from; scripts and curl send no Origin at all."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.headers.get('host', '')}"


def with_headers(send: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    async def send_with(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {k.lower() for k, _ in headers}
            for key, value in ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                               (b"cache-control", b"no-store"), (b"content-security-policy", API_CSP.encode())):
                if key not in present:
                    headers.append((key, value))
            message = {**message, "headers": headers}
        await send(message)
    return send_with


def build_app(session: WebSession, workspace: FileView, keys: Keys) -> Any:
    """The ASGI app: the routes behind the guard, and the workspace watcher started."""
    try:
        page = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
    except FileNotFoundError:  # a wheel built without package data
        raise ConfigError("bantam web: page.html is missing from the installed package; "
                          "install from the source tree (pip install -e '.[web]')") from None
    routes = Routes(session, workspace, keys, page)
    app = Starlette(routes=routes.table(), exception_handlers={NotJson: not_json})
    watch(session, workspace)
    return Guard(app, keys)


class Routes:
    """One method per route. Plain `def` ones run in Starlette's thread pool (they touch the disk)."""

    def __init__(self, session: WebSession, workspace: FileView, keys: Keys, page: str):
        self.session, self.workspace, self.keys, self.page = session, workspace, keys, page

    def table(self) -> list[Route]:
        return [Route("/", self.index), Route("/login", self.login, methods=["GET", "POST"]),
                Route("/api/state", self.state), Route("/api/events", self.events),
                Route("/api/input", self.submit, methods=["POST"]), Route("/api/stop", self.stop, methods=["POST"]),
                Route("/api/sessions", self.sessions), Route("/api/files", self.files),
                Route("/api/view", self.view), Route("/api/turn", self.turn), Route("/raw/{key}/{path:path}", self.raw)]

    def index(self, request: Request) -> Response:
        nonce = secrets.token_urlsafe(16)
        return HTMLResponse(self.page.replace("{{NONCE}}", nonce),
                            headers={"Content-Security-Policy": PAGE_CSP.format(nonce=nonce)})

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return HTMLResponse(LOGIN_PAGE, headers={"Content-Security-Policy": LOGIN_CSP})
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        if await self.keys.check_guess((form.get("password") or [""])[0]):
            return self.keys.signed_in(RedirectResponse("/", 303))
        return HTMLResponse(LOGIN_PAGE, 401, headers={"Content-Security-Policy": LOGIN_CSP})

    def state(self, request: Request) -> Response:
        s = self.session
        return JSONResponse({"view_key": self.keys.view, "model": s.chat.cfg.model, "workspace": str(self.workspace.root),
                             "session": s.chat.autosave.id, "busy": s.job is not None})

    async def events(self, request: Request) -> Response:
        """Server-sent events: the replayed log, then live events, until the page goes away."""
        q: asyncio.Queue = asyncio.Queue()
        self.session.subscribe(asyncio.get_running_loop(), q)

        async def stream():
            try:
                while True:
                    try:
                        event = await asyncio.wait_for(q.get(), KEEPALIVE)
                    except TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    if event is None:  # the server is shutting down
                        return
                    yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
            finally:
                self.session.hub.remove(q)
        return StreamingResponse(stream(), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"})

    async def submit(self, request: Request) -> Response:
        body = await json_body(request)
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text.strip():
            return JSONResponse({"error": 'expected {"text": "..."}'}, 400)
        status = self.session.submit(text)
        return JSONResponse({"status": status}, 409 if status == "busy" else 200)

    async def stop(self, request: Request) -> Response:
        await json_body(request)
        return JSONResponse({"stopping": self.session.stop()})

    def sessions(self, request: Request) -> Response:
        mine = self.session.chat.autosave.id
        return JSONResponse([{"id": s.id, "updated": s.updated, "count": s.count, "summary": s.summary,
                              "project": s.project, "problem": s.problem, "current": s.id == mine}
                             for s in transcripts.listing()])

    def files(self, request: Request) -> Response:
        return JSONResponse([e.to_json() for e in self.workspace.listing()])

    def view(self, request: Request) -> Response:
        try:
            return JSONResponse(self.workspace.view(request.query_params.get("path", "")))
        except Refused as e:
            return JSONResponse({"error": str(e)}, e.status)

    def turn(self, request: Request) -> Response:
        """`?seq=N`: what a turn of this conversation changed in the files, as a highlighted diff."""
        from ..undo.diff import turn_diff
        seq = request.query_params.get("seq", "")
        if not seq.isdigit():
            return JSONResponse({"error": "expected ?seq=N, a turn's number in the undo store"}, 400)
        try:
            text = turn_diff(self.session.chat.undo_key(), int(seq))
        except undo.UndoError as e:
            return JSONResponse({"error": str(e)}, 404)
        return JSONResponse({"seq": int(seq), "html": highlight("turn.diff", self.workspace.blank(text[:MAX_TEXT])),
                             "clipped": len(text) > MAX_TEXT, "size": len(text)})

    def raw(self, request: Request) -> Response:
        """The viewer's route: its own key instead of the cookie (see the module docstring)."""
        if not hmac.compare_digest(request.path_params["key"].encode(), self.keys.view.encode()):
            return Response("not found", 404, media_type="text/plain")
        try:
            data, kind = self.workspace.raw(request.path_params["path"])
        except Refused as e:
            return Response(str(e), e.status, media_type="text/plain")
        # The sandbox and the ban on connections hold even when this URL is opened on its own,
        # outside the viewer's frame.
        return Response(data, media_type=kind, headers={"Content-Security-Policy": RAW_CSP})


async def not_json(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": "send application/json"}, 415)


async def json_body(request: Request) -> Any:
    """The request's JSON. Requiring it means a cross-origin browser must ask first (a CORS
    preflight, which this server never grants), so no other page can post here."""
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise NotJson
    try:
        return json.loads(await request.body() or b"null")
    except ValueError:
        raise NotJson from None


def watch(session: WebSession, workspace: FileView) -> None:
    """File changes go to every open page (not into the replay log: a new page asks for the list)."""
    from .files import Watcher

    def changed(entries: list) -> None:
        with session.lock:
            session.hub.publish({"type": "files", "files": [e.to_json() for e in entries]})
    Watcher(workspace, changed, lambda: bool(session.hub.streams)).start()  # a daemon thread
