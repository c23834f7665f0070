"""The end of a run with MCP servers: bantam exits without waiting for servers whose tools are
cached, and no server process, running or still starting, outlives it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, base_cfg, wait_for, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply
from tests.mcp.test_mcp import server_pids, started_once, tool_message, user_file, wait_gone, write_servers

pytest.importorskip("mcp")

ENV = {"PYTHONPATH": str(ROOT)}
# Starts the fake tools server only once the file argv[1] exists: a start that hangs until then.
GATED = ("import os, runpy, sys, time\n"
         "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
         "sys.argv = ['mcp_servers', 'tools', sys.argv[2]]\n"
         "runpy.run_module('tests.fakes.mcp_servers', run_name='__main__')")


def test_no_server_outlives_a_run_that_ends_while_one_runs_and_one_starts(home):
    """Two servers with cached tools: `stubborn` answers a call, then lives on after its stdin
    closes, in a shell that ignores SIGTERM; `gated` is still starting when the run ends."""
    gate, stubborn_pid, gated_pid = home / "gate", home / "stubborn.pid", home / "gated.pid"
    stubborn = {"command": "sh", "cwd": str(ROOT), "env": ENV, "args": [
        "-c", f"trap '' TERM; {sys.executable} -m tests.fakes.mcp_servers tools {stubborn_pid}; sleep 3600"]}
    gated = {"command": sys.executable, "args": ["-c", GATED, str(gate), str(gated_pid)], "cwd": str(ROOT),
             "env": ENV}
    write_servers(user_file(home), {"stubborn": stubborn, "gated": gated})
    gate.touch()
    started_once(home)  # both servers' tools are cached
    gate.unlink()
    go = home / "go"
    with FakeServer([tool_reply("stubborn__echo", {"text": "hi"}),
                     tool_reply("shell_exec", {"command": f"until [ -e {go} ]; do sleep 0.05; done"}),
                     text_reply("done")]) as s:
        write_cfg(home, **base_cfg(s))
        proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", "go"], cwd=home, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: server_pids(stubborn_pid) and server_pids(gated_pid) and len(s.chat_requests()) >= 2,
                     "both servers' processes, and the call's answer")
            pids = server_pids(stubborn_pid) | server_pids(gated_pid)
            go.touch()
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        assert out == "done\n"
        assert tool_message(s.chat_requests()[1]) == "echo: hi"
    assert all(wait_gone(pid) for pid in pids), "an MCP server outlived bantam"
    assert "Traceback" not in err and "gated" not in err, err
