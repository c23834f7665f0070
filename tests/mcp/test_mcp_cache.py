"""MCP tool lists cached by server configuration: the first model request does not wait for servers,
and offers the tools a server listed at its last start.

A gated server (GATED below, built on the SDK's MCPServer) holds its start, before the handshake,
until a file appears: a request the fake model receives while the gate is shut was sent before
that server finished starting. That is an ordering of events, not a timing. Beside it runs the
reference `mcp-server-time`, and every run is a real `bantam -p` against the recording fake model.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import base_cfg, run_bantam, wait_for, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply
from tests.mcp.test_mcp import TIME, offered, py_server, tool_message, user_file, write_servers

pytest.importorskip("mcp")

GATED = '''
import json, os, sys, time
from pathlib import Path
gate, listing, started = map(Path, sys.argv[1:4])
with open(started, "a") as f:            # every launch leaves its pid
    f.write(f"{os.getpid()}\\n")
while not gate.exists():                 # hold the start (no handshake yet) until the test opens the gate
    time.sleep(0.02)
names = json.loads(listing.read_text())
if names == "fail":
    sys.exit("cannot start: broken on purpose")
from mcp.server.mcpserver import MCPServer
server = MCPServer("gated")
def make(name):
    def tool(text: str = "") -> str:
        return f"{name}: {text}"
    return tool
for name in names:
    server.add_tool(make(name), name=name, description=f"The {name} tool.")
server.run()
'''


class Gated:
    """The gated server's files: its script, the gate, its tool list, the pids of its launches."""

    def __init__(self, where: Path, tools: list[str] | str):
        self.script, self.gate = where / "gated.py", where / "gate"
        self.listing, self.started = where / "listing.json", where / "started"
        self.script.write_text(GATED)
        self.tools(tools)

    def tools(self, names: list[str] | str) -> None:
        self.listing.write_text(json.dumps(names))  # the same configuration, another tool list

    def entry(self) -> dict:
        return py_server(str(self.script), str(self.gate), str(self.listing), str(self.started))

    def launches(self) -> int:
        return len(self.started.read_text().split()) if self.started.exists() else 0


def cache_files(home: Path) -> list[Path]:
    return sorted((home.parent / "home" / ".bantam" / "mcp" / "tools").glob("*.json"))


def bantam(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bantam", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def first_run(home: Path, gated: Gated) -> None:
    """The servers' first start (`bantam mcp list` starts and waits for them), which leaves their
    tools cached."""
    gated.gate.touch()
    r = run_bantam("mcp", "list", cwd=home)
    assert r.returncode == 0, r.stderr
    assert "    gated__echo" in r.stdout, r.stdout
    gated.gate.unlink()


def test_cached_tools_go_with_the_first_request_before_the_server_has_started(home):
    gated = Gated(home, ["echo"])
    write_servers(user_file(home), {"time": TIME, "gated": gated.entry()})
    with FakeServer() as s:
        write_cfg(home, **base_cfg(s))
        first_run(home, gated)
        assert len(cache_files(home)) == 2

        s.add(tool_reply("gated__echo", {"text": "hi"}), text_reply("done"))
        proc = bantam("-p", "hi", cwd=home)
        try:
            request = wait_for(lambda: s.chat_requests()[0:1], "the run's first request")[0]
            assert not gated.gate.exists()  # so the gated server has not even answered the handshake
            assert {"gated__echo", "time__get_current_time", "time__convert_time"} <= set(offered(request))
            gated.gate.touch()  # the model's call to gated__echo waits for its server, which now starts
            code, out, err = finish(proc)
        finally:
            proc.kill()
        assert code == 0, err
        assert out == "done\n"
        assert tool_message(s.chat_requests()[1]) == "echo: hi"


def test_a_server_whose_tools_changed_updates_the_cache_and_the_next_request(home):
    gated = Gated(home, ["echo"])
    write_servers(user_file(home), {"time": TIME, "gated": gated.entry()})
    with FakeServer() as s:
        write_cfg(home, **base_cfg(s))
        first_run(home, gated)
        gated.tools(["echo", "extra"])  # the server changed; its configuration did not
        gated.gate.touch()
        s.add(tool_reply("gated__echo", {"text": "x"}), text_reply("done"))
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 0, r.stderr
        first, second = s.chat_requests()
    assert "gated__extra" not in offered(first)  # the cached list went out at once
    # the call waited for the start, which found the new list: the model is told with the result,
    # and the very next request offers the new list
    assert tool_message(second) == ("[bantam: MCP server gated's tools changed since the last run "
                                     "(added: extra); the new list is offered from the next request]\n\necho: x")
    assert "gated__extra" in offered(second)
    assert [line for line in r.stderr.splitlines() if line.startswith("[MCP server gated")] == [
        "[MCP server gated's tools changed since the last run (added: extra); the model is "
        "offered the new list from its next request]"]  # one notice for the user
    cached = [json.loads(p.read_text()) for p in cache_files(home)]
    assert ["echo", "extra"] in [[t["name"] for t in c["tools"]] for c in cached]


def test_a_server_that_fails_to_start_makes_its_tools_calls_clear_errors(home):
    gated = Gated(home, ["echo"])
    write_servers(user_file(home), {"time": TIME, "gated": gated.entry()})
    with FakeServer() as s:
        write_cfg(home, **base_cfg(s))
        first_run(home, gated)
        gated.tools("fail")
        gated.gate.touch()
        s.add(tool_reply("gated__echo", {"text": "x"}), text_reply("done"))
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 0, r.stderr
        first, second = s.chat_requests()
    assert "gated__echo" in offered(first)
    result = tool_message(second)
    assert result.startswith("error: MCP server gated ")
    assert "cannot start: broken on purpose" in result
    assert "is not running" in result
    notices = [line for line in r.stderr.splitlines() if line.startswith("[MCP server gated")]
    assert notices == ["[MCP server gated closed the connection (crashed or exited); its stderr ends: "
                       "cannot start: broken on purpose]"]  # one notice, beside the error the model got


def test_an_untrusted_projects_cached_tools_never_appear(home):
    gated = Gated(home, ["echo"])
    project = write_servers(home / ".mcp.json", {"gated": gated.entry()})
    with FakeServer() as s:
        write_cfg(home, **base_cfg(s))
        assert run_bantam("trust", cwd=home).returncode == 0
        first_run(home, gated)
        gated.gate.touch()
        s.add(text_reply("trusted"))
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 0, r.stderr
        assert "gated__echo" in offered(s.chat_requests()[0])
        assert len(cache_files(home)) == 1

        project.write_text(project.read_text() + "\n")  # the same servers, but the file is new: untrusted
        launched = gated.launches()
        s.add(text_reply("untrusted"))
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 0, r.stderr
        assert "bantam trust" in r.stderr
        assert not any(n.startswith("gated__") for n in offered(s.chat_requests()[1]))
    assert gated.launches() == launched  # and it was never started
