"""MCP: what configured servers cost a one-shot run, and what one MCP tool call costs.

    .venv/bin/python bench/bench_mcp.py --write    # from the repository root; needs '.[mcp,test]'

Start-up: `bantam -p hi` against the instant fake server (tests/fakes) with 0, 1 and 3 servers in
~/.config/bantam/mcp.json, beside each server's own start (the SDK's client connecting and listing
its tools, in one process) and the SDK's import. Per call: Toolbox.execute of an MCP tool against
`shell_exec` running `echo`, in one process, servers already started.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import machine, ms, write_results
from tests.fakes.openai_server import FakeServer, text_reply

BEGIN, END = "<!-- bench_mcp:begin -->", "<!-- bench_mcp:end -->"
PY = sys.executable
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
SERVERS = {
    "time": {"command": PY, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"], "env": ENV},
    "git": {"command": PY, "args": ["-m", "mcp_server_git"], "env": ENV},
    "fake": {"command": PY, "args": ["-m", "tests.fakes.mcp_servers", "tools", os.devnull],
             "cwd": str(ROOT), "env": ENV},
}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def row(name: str, times: list[float]) -> str:
    return f"| {name} | {ms(min(times))} | {ms(statistics.median(times))} | {ms(max(times))} |"


def write_servers(home: Path, names: list[str]) -> None:
    path = home / ".config" / "bantam" / "mcp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": {n: SERVERS[n] for n in names}}))


def startup_rows(home: Path, work: Path, reps: int) -> list[str]:
    rows = []
    # the user's mcp.json is the one under this HOME: none of the runner's XDG_CONFIG_HOME or BANTAM_HOME
    env = {**{k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "BANTAM_HOME")},
           **ENV, "HOME": str(home)}
    with FakeServer() as server:
        (work / ".bantam.cfg").write_text(f"endpoint={server.url}\nmodel=m\n")
        for names in ([], ["time"], ["time", "git", "fake"]):
            write_servers(home, names)
            times = []
            for _ in range(reps):
                server.add(text_reply("hi"))
                times.append(timed(lambda: subprocess.run(
                    [PY, "-m", "bantam", "-p", "hi"], cwd=work, env=env, check=True,
                    stdin=subprocess.DEVNULL, capture_output=True)))
            rows.append(row(f"`bantam -p hi`, {len(names)} server{'s' * (len(names) != 1)} ({', '.join(names) or 'none'})", times))
    return rows


def server_rows(reps: int) -> list[str]:
    code = "import mcp"
    rows = [row("`python -c \"import mcp\"` (the SDK's import)", [
        timed(lambda: subprocess.run([PY, "-c", code], env={**os.environ, **ENV}, check=True))
        for _ in range(reps)])]
    for name in ("time", "git", "fake"):
        script = (f"import anyio, mcp, json; s = json.loads({json.dumps(json.dumps(SERVERS[name]))}); "
                  "p = mcp.StdioServerParameters(command=s['command'], args=s['args'], env=s['env'], "
                  "cwd=s.get('cwd'))\n"
                  "async def main():\n"
                  "    import time; t = time.perf_counter()\n"
                  "    async with mcp.Client(p) as c:\n"
                  "        await c.list_tools(); print(time.perf_counter() - t)\n"
                  "anyio.run(main)")
        times = [float(subprocess.run([PY, "-c", script], env={**os.environ, **ENV}, check=True,
                                      capture_output=True, text=True).stdout.split()[0])
                 for _ in range(reps)]
        rows.append(row(f"server `{name}` alone: start, connect, list tools", times))
    return rows


def call_rows(home: Path, calls: int) -> list[str]:
    os.environ["HOME"] = str(home)
    write_servers(home, ["time", "fake"])
    from bantam.config import Config
    from bantam.tools import ToolContext, make_toolbox
    box = make_toolbox(("shell_exec",), ToolContext(Config()))
    cases = {"`shell_exec` `echo hi`": ("shell_exec", '{"command": "echo hi"}'),
             "`fake__echo` (tests/fakes: no work)": ("fake__echo", '{"text": "hi"}'),
             "`time__get_current_time`": ("time__get_current_time", '{"timezone": "UTC"}')}
    rows = []
    for label, (name, args) in cases.items():
        box.execute(name, args)  # warm
        times = [timed(lambda n=name, a=args: box.execute(n, a)) for _ in range(calls)]
        rows.append(row(label, times))
    from bantam.mcp.hub import hub
    hub().close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        head = "| run | min ms | median ms | max ms |\n|---|---:|---:|---:|"
        section = "\n".join([
            "## MCP: start-up with servers, and the cost of one call", "",
            "Command: `.venv/bin/python bench/bench_mcp.py --write`", "",
            (f"Machine: {machine()} Load average at the start: {os.getloadavg()[0]:.1f} (other work "
             "on the machine shows in every row)."), "",
            f"### One-shot start-up with 0, 1 and 3 configured servers ({args.reps} runs each)", "",
            head, *startup_rows(home, work, args.reps), "",
            f"### Beside it: the SDK's import and each server's own start ({args.reps} runs each)", "",
            head, *server_rows(args.reps), "",
            f"### One tool call through the Toolbox, servers already running ({args.calls} calls each)", "",
            head, *call_rows(home, args.calls), "",
            ("Servers start in parallel, so a run pays the SDK's import plus the slowest server, not "
             "the sum. With no MCP file a run pays two stat calls and imports nothing of the SDK.")])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
