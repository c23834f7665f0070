"""The MCP client side: one event-loop thread that holds every server's connection.

bantam's loop and tools are synchronous; the `mcp` SDK is async (anyio). One daemon thread runs
an asyncio loop, and each server lives in one task there that holds the SDK's `Client` open (anyio
scopes must close in the task that opened them). Tools call in with `Hub.call`, which blocks the
calling thread on a future and gives up on Ctrl+C or the call's timeout.

Each server is started as soon as it is asked for (`ensure`), its `started` future says when
that first start has ended, and what it listed is written to the cache (cache.py) for the next
run. Nothing waits for a start but a call to that server's tools (and `bantam mcp list`): a
server that runs but never answers holds up only its own tools. The hub is made in launch.py's
background thread, so that the SDK's import (this module's first lines) stays off the path to
the first model request.

A server that fails to start, dies, times out or breaks the protocol is closed and marked with
the reason; the next call starts it again. An error the server answers with (a JSON-RPC error,
or a result with isError) leaves it running. Servers end with bantam, without making its exit
wait (`Hub.close`), and each stdio server runs through reaper.whole_tree, so that its whole
process tree, sessions of its own included, dies with it and with bantam, however bantam ends.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import shutil
import threading
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TypeVar

import mcp
import mcp_types
from mcp.shared.exceptions import MCPError

from .. import __version__, reaper
from ..errors import ToolError
from ..fsutil import bantam_home, private_dir
from . import cache
from .launch import wait
from .servers import ServerSpec

START_TIMEOUT = 30.0   # seconds for a server to start and list its tools
CLOSE_TIMEOUT = 8.0    # seconds for a server to shut down (the SDK escalates to SIGKILL)
EXIT_CLOSE = 0.5       # seconds the servers may take to end on their own at exit, when they die with bantam
EXIT_GRACE = 2.0       # seconds the start of a server whose tools are not cached may go on at exit
LOG_TAIL = 400         # characters of a server's stderr quoted when it fails
logging.getLogger("mcp").addHandler(logging.NullHandler())  # failures reach the user as one line
BROKEN = {mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT}  # the server must be restarted
T = TypeVar("T")


class Connection:
    """One server: its state, its tools, and the task that holds it open."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.state = "not started"
        self.tools: list[mcp_types.Tool] = []
        self.prompts: list[mcp_types.Prompt] = []  # offered to the user as /server:prompt
        self.resources = False  # it has resources to read (listed any, or templates of them)
        self.client: mcp.Client | None = None
        self.started: concurrent.futures.Future | None = None  # the first start, once asked for
        self.on_tools_changed: list[Callable[[Connection], None]] = []
        self.on_started: list[Callable[[Connection], None]] = []  # once each, when a start ends
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._starting = asyncio.Lock()
        self.broken = ""  # why the server's stream was given up, when it broke the protocol
        self.http_error = ""  # the last error status a Streamable HTTP server answered with
        self.closed = False  # bantam is done with it (exiting): an abandoned start is no failure

    @property
    def log_path(self) -> Path:
        return private_dir(bantam_home() / "mcp") / f"{self.spec.name}.log"

    async def start(self) -> None:
        """Connect and list the tools; on failure the state says why (and nothing raises)."""
        async with self._starting:  # two calls to a dead server start it once
            if self.client is None:
                await self._start()

    async def _start(self) -> None:
        self.state = "starting"
        self.broken = self.http_error = ""
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        ready.add_done_callback(_seen)  # a start given up on still gets its reason later: not an error
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._hold(ready, self._stop))
        try:
            await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT)
            self.state = "ready"
            self._remember()
        except Exception as e:
            await self.stop()
            self.state = "stopped" if self.closed else \
                f"failed: {self._reason(e, f'no answer within {START_TIMEOUT:g}s')}"
        # still under the start's lock: a call that waited for this start sees what they did
        callbacks, self.on_started = self.on_started, []
        for callback in callbacks:
            callback(self)

    def infos(self) -> tuple[cache.ToolInfo, ...]:
        """The tools as listed, in the SDK-free form the toolboxes and the cache use."""
        return tuple(cache.ToolInfo(t.name, t.description or "", t.title or "", dict(t.input_schema or {}))
                     for t in self.tools)

    def known(self) -> cache.Cached:
        """What the server offers, as the cache keeps it."""
        info = self.client.server_info if self.client is not None else None
        server = f"{info.name} {info.version}" if info is not None else ""
        return cache.Cached(server, self.infos(), self.resources)

    def _remember(self) -> None:
        """What the server listed at its start, for the next run (a failed write costs only speed)."""
        try:
            cache.save(self.spec, self.known())
        except OSError:
            pass

    async def _hold(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client(stack))
                self.tools = await _all_tools(client)
                self.prompts = await _prompts(client)
                self.resources = await _has_resources(client)
                self.client = client
                ready.set_result(None)
                listener = asyncio.ensure_future(self._listen(client))
                try:
                    await stop.wait()
                finally:
                    listener.cancel()
        except BaseException as e:  # the reason goes to whoever waits for the start
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else ConnectionError("cancelled"))
            if not isinstance(e, Exception):
                raise
        finally:
            self.client = None

    async def _client(self, stack: AsyncExitStack) -> mcp.Client:
        spec = self.spec
        if spec.url:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client
            async def note(response: Any) -> None:  # the SDK's error drops the status
                if response.status_code >= 400:
                    self.http_error = f"HTTP {response.status_code} from {spec.url}"
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=spec.headers, timeout=httpx2.Timeout(30.0, read=None),
                event_hooks={"response": [note]}))
            target: Any = streamable_http_client(spec.url, http_client=http)
        else:
            log = stack.enter_context(open(self.log_path, "w", encoding="utf-8"))  # this start's only
            argv = reaper.whole_tree([_program(spec), *spec.args])  # started from this thread, which lives on
            params = mcp.StdioServerParameters(command=argv[0], args=argv[1:],
                                               env=spec.env or None, cwd=spec.cwd or None)
            from mcp.client.stdio import stdio_client
            target = stdio_client(params, errlog=log)
        return mcp.Client(target, message_handler=self._on_message, cache=None,
                          client_info=mcp_types.Implementation(name="bantam", version=__version__))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a line that is not JSON-RPC: nothing after it is safe
            self.broken = f"sent a line that is not JSON-RPC ({str(_innermost(message))[:160]})"
            if self._stop is not None:
                self._stop.set()  # pending calls end now, instead of waiting for their timeout
            return
        if isinstance(message, mcp_types.ToolListChangedNotification) and self.client is not None:
            await self._refresh(self.client)

    async def _listen(self, client: mcp.Client) -> None:
        """2026-07-28 servers announce changes on a subscriptions/listen stream, older ones with
        a notification (`_on_message`); a server that offers neither keeps its first list."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    await self._refresh(client)
        except Exception:
            return

    async def _refresh(self, client: mcp.Client) -> None:
        try:
            self.tools = await _all_tools(client, "refresh")
        except Exception:  # the next call will show what is wrong
            return
        for callback in list(self.on_tools_changed):  # a callback may remove itself
            callback(self)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if self._stop is not None:
            self._stop.set()
        if task is not None:
            if self.client is None:  # still starting, where no one looks at the stop event
                task.cancel()
            try:
                await asyncio.wait_for(task, CLOSE_TIMEOUT)  # the SDK's shutdown: stdin, then kill
            except BaseException:  # a shutdown that never finished: cancel it (the SDK still kills)
                task.cancel()
        self.client = self._stop = None

    async def close(self) -> None:
        """For good (bantam is exiting): a start cut short here is not reported as a failure."""
        self.closed = True
        await self.stop()
        self.state = "stopped"

    async def call(self, tool: str, args: dict[str, Any], timeout: float) -> mcp_types.CallToolResult:
        return await self.request(lambda c: c.call_tool(tool, args, read_timeout_seconds=timeout), timeout)

    async def request(self, send: Callable[[mcp.Client], Awaitable[T]], timeout: float) -> T:
        """`send(client)`: one request (a tool call, a resource read, a prompt), the server
        started first when it is not running; a failure is a ToolError that says why."""
        if self.client is None:
            await self.start()
            if self.client is None:
                raise ToolError(f"MCP server {self.spec.name} is not running ({self.state})")
        reason: BaseException
        try:
            return await asyncio.wait_for(send(self.client), timeout + 5)  # a backstop if the SDK's own timer is stuck
        except MCPError as e:
            if e.code not in BROKEN:
                raise ToolError(f"MCP server {self.spec.name} answered with an error: {e.message}") from e
            reason = e
        except Exception as e:  # died, hung, or sent something that is not JSON-RPC
            reason = e
        await self.stop()
        self.state = f"failed: {self._reason(reason, f'no answer within {timeout:g}s')}"
        raise ToolError(f"MCP server {self.spec.name} {self.state[8:]}; it will be restarted on "
                        "the next call") from reason

    def _reason(self, e: BaseException, timeout_text: str) -> str:
        """One line: what went wrong, with the tail of the server's stderr when it has one."""
        e = _innermost(e)
        if self.broken:
            text = self.broken
        elif isinstance(e, (TimeoutError, asyncio.TimeoutError)) or \
                (isinstance(e, MCPError) and e.code == mcp_types.REQUEST_TIMEOUT):
            text = timeout_text
        elif isinstance(e, MCPError) and e.code == mcp_types.CONNECTION_CLOSED:
            text = "closed the connection (crashed or exited)"
        elif isinstance(e, FileNotFoundError):
            text = f"could not start: {self.spec.command}: command not found"
        else:
            text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        tail = self._evidence()
        if not tail:
            return text
        return f"{text} ({tail})" if self.spec.url else f"{text}; its stderr ends: {tail}"

    def _evidence(self) -> str:
        """What the server left behind: its last stderr lines, or the HTTP status it answered."""
        if self.spec.url:
            return self.http_error
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(f.tell() - LOG_TAIL, 0))
                return " | ".join(f.read().decode("utf-8", "replace").strip().splitlines()[-3:])
        except OSError:
            return ""


def _seen(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _program(spec: ServerSpec) -> str:
    """The server's command, checked as its own PATH (and its cwd, for a relative path) finds it:
    FileNotFoundError when there is no such program, as starting it would say (with bubblewrap
    in between, that start would only be an exit)."""
    path = spec.env.get("PATH", os.environ.get("PATH", os.defpath))
    command = os.path.join(spec.cwd, spec.command) if spec.cwd and os.path.dirname(spec.command) else spec.command
    if shutil.which(command, path=path) is None:
        raise FileNotFoundError(spec.command)
    return spec.command


def _innermost(e: BaseException) -> BaseException:
    """The real cause inside exception groups (anyio wraps failures in task groups)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


async def _all_tools(client: mcp.Client, cache_mode: Any = "use") -> list[mcp_types.Tool]:
    return await pages(lambda cursor: client.list_tools(cursor=cursor, cache_mode=cache_mode), "tools")


async def _prompts(client: mcp.Client) -> list[mcp_types.Prompt]:
    """The server's prompts; none when it offers none, or fails to list them (its tools still count)."""
    if client.server_capabilities.prompts is None:
        return []
    try:
        return await pages(lambda cursor: client.list_prompts(cursor=cursor), "prompts")
    except MCPError:
        return []


async def _has_resources(client: mcp.Client) -> bool:
    """Whether the server lists resources or templates of them (many say they may have some, and
    list none)."""
    if client.server_capabilities.resources is None:
        return False
    try:
        return bool((await client.list_resources()).resources or
                    (await client.list_resource_templates()).resource_templates)
    except MCPError:
        return False


async def pages(list_page: Callable[[str | None], Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paged list (tools, prompts, resources), page after page."""
    items: list[Any] = []
    cursor = None
    for _ in range(100):  # a server whose pages never end cannot hang us
        page = await list_page(cursor)
        items += getattr(page, field)
        cursor = page.next_cursor
        if not cursor:
            break
    return items


class Hub:
    """The event-loop thread and the connections, one per configured server."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.connections: dict[str, Connection] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self.loop.run_forever, name="mcp", daemon=True).start()
        atexit.register(self.close)

    def submit(self, coro, timeout: float | None = None, cancel: threading.Event | None = None) -> Any:
        """Run `coro` on the hub's loop and wait for it; Ctrl+C (or `cancel`) abandons it."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return wait(future, cancel, timeout)
        except BaseException:
            future.cancel()
            raise

    def ensure(self, specs: dict[str, ServerSpec]) -> list[Connection]:
        """Start every server not yet known, all at once, without waiting (see `Connection.started`)."""
        with self._lock:  # toolboxes of several threads may ask at once
            for name, spec in specs.items():
                known = self.connections.get(name)
                if known is None or known.spec != spec:  # a new server, or its file changed
                    if known is not None:
                        asyncio.run_coroutine_threadsafe(known.stop(), self.loop)
                    fresh = self.connections[name] = Connection(spec)
                    fresh.started = asyncio.run_coroutine_threadsafe(fresh.start(), self.loop)
            return [self.connections[name] for name in specs]

    def when_started(self, connection: Connection, callback: Callable[[Connection], None]) -> None:
        """`callback(connection)` once its start under way has ended, or at once (in the hub's
        thread, where starts end, so that none ends between the look and the wait)."""
        def register() -> None:
            if connection.state in ("not started", "starting"):
                connection.on_started.append(callback)
            else:
                callback(connection)
        self.loop.call_soon_threadsafe(register)

    def connect(self, specs: dict[str, ServerSpec], cancel: threading.Event | None = None) -> list[Connection]:
        """Start every server not yet known, all at once, and wait: the wait is the slowest start."""
        connections = self.ensure(specs)
        for c in connections:
            if c.started is not None:
                wait(c.started, cancel)
        return connections

    def close(self) -> None:
        """Stop every server, all at once (bantam is exiting), making the exit wait as little as
        it can: only a first start whose tools are not cached yet is given EXIT_GRACE, so that a
        server that is merely slow gets its tool list into the cache (a server that never answers
        then costs only that). A start still under way is abandoned: it has served nothing, and
        its process dies with bantam. A running server has its stdin closed and EXIT_CLOSE to end
        on its own; past that it too is left to die with bantam (reaper.whole_tree: its pid
        namespace is killed when bantam ends). Where whole_tree cannot do that, the SDK's
        escalation (SIGTERM, then SIGKILL, to its group) is waited for."""
        async def stop_all() -> None:
            running = [c.close() for c in self.connections.values() if c.client is not None]
            await asyncio.gather(*running, return_exceptions=True)
        if self.loop.is_running() and self.connections:
            try:
                new = [c.started for c in self.connections.values()
                       if c.started is not None and not c.started.done() and cache.load(c.spec) is None]
                concurrent.futures.wait(new, EXIT_GRACE)
                self.submit(stop_all(), EXIT_CLOSE if reaper.trees_die_with_bantam() else CLOSE_TIMEOUT + 2)
            except BaseException:  # exiting anyway; what is left dies with bantam
                pass
        self.connections.clear()


_hub: Hub | None = None
_lock = threading.Lock()


def hub() -> Hub:
    """The process's one hub, created on first use (so no thread exists without MCP)."""
    global _hub
    with _lock:
        if _hub is None:
            _hub = Hub()
        return _hub
