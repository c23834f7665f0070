"""MCP servers that misbehave on purpose, for what the reference servers never do.

    python -m tests.fakes.mcp_servers tools PIDFILE   echo, crash (exits mid-call), hang (never
                                                    answers), grow (adds a tool and says so)
    python -m tests.fakes.mcp_servers garbage         answers the handshake, then a line that is
                                                    not JSON-RPC instead of a tool result
    python -m tests.fakes.mcp_servers legacy          a 2025-era server whose tool list changes
    python -m tests.fakes.mcp_servers context PIDFILE a resource and a prompt that quote its
                                                    variable LEAK, with a control character
    serve_http(ready)                               the `tools` server over Streamable HTTP, in a
                                                    thread of the test process; every request
                                                    needs the header `X-Token: t0k`
The `tools` server is built on the official SDK (and speaks its 2026-07-28 protocol); `garbage`
and `legacy` speak raw JSON lines: the SDK cannot be made to send a broken message, nor to act
as a server of the older protocol only.
"""

import json
import os
import sys


def tools_server():
    import anyio
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("fake-tools")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Exit the server in the middle of the call.")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="Never answer.")
    async def hang() -> str:
        await anyio.sleep(3600)
        return "unreachable"

    @server.tool(description="Add the tool `extra` and announce the new tool list.")
    async def grow(ctx: Context) -> str:
        server.add_tool(lambda: "extra here", name="extra", description="Added at run time.")
        await ctx.notify_tools_changed()
        return "grown"

    return server


def context_server():
    """What a server may put in front of the model besides tool results: a resource and a prompt."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("fake-context")

    @server.resource("note://leak", description="Its variable LEAK, and an escape sequence.")
    def note() -> str:
        return f"leak={os.environ.get('LEAK', '')}\x1b[2J"

    @server.prompt(description="A prompt that quotes LEAK.")
    def leak() -> str:
        return f"say {os.environ.get('LEAK', '')}\x07"

    return server


def raw_server(kind: str) -> None:
    """A 2025-era server in raw JSON lines (it refuses `server/discover`, so the client falls back
    to the initialize handshake). `garbage`: its tool answers with a line that is not JSON-RPC.
    `legacy`: its tool `grow` adds `extra` and says so with notifications/tools/list_changed."""
    def send(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def tool(name):
        return {"name": name, "description": f"The {name} tool.", "inputSchema": {"type": "object"}}
    tools = [tool("answer" if kind == "garbage" else "grow")]
    for line in sys.stdin:
        msg = json.loads(line)
        method, ident = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": ident, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": kind, "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools}})
        elif method == "tools/call" and kind == "garbage":
            sys.stdout.write("this line is not JSON-RPC {\n")
            sys.stdout.flush()
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "grow":
                tools.append(tool("extra"))
            send({"jsonrpc": "2.0", "id": ident,
                  "result": {"content": [{"type": "text", "text": f"{name} done"}]}})
            if name == "grow":
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif ident is not None:  # server/discover and the rest: "no such method", so legacy it is
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "not found"}})


def serve_http(ready: list) -> None:
    """The tools server over Streamable HTTP on a free port; `ready` receives the URL."""
    import socket

    import uvicorn
    server = tools_server()
    inner = server.streamable_http_app()

    async def app(scope, receive, send):  # every request must carry the configured header
        if scope["type"] == "http" and (b"x-token", b"t0k") not in scope["headers"]:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await inner(scope, receive, send)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # a client's open event stream would otherwise hold the shutdown until the test's 30 s join
    # gives up (the client is closed only after the test): a second is plenty for the fake
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    runner = uvicorn.Server(config)
    ready.append((f"http://127.0.0.1:{port}/mcp", runner))
    runner.run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1] in ("garbage", "legacy"):
        raw_server(sys.argv[1])
    else:
        with open(sys.argv[2], "w") as f:  # so that a test can see which process answers
            f.write(str(os.getpid()))
        (context_server() if sys.argv[1] == "context" else tools_server()).run()
