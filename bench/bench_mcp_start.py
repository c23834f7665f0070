"""MCP start-up and exit: process start to the first model request, and to the process's exit,
with no server and with three.

    .venv/bin/python bench/bench_mcp_start.py              # from the repository root; --runs N
    .venv/bin/python bench/bench_mcp_start.py --src DIR    # another tree's src (a `git archive` copy)

`bantam -p hi` against the instant fake server (tests/fakes), from Popen to the moment the fake
server receives the first chat request and to the moment the process has exited, in three cases,
their runs interleaved so that drift on the machine hits all of them alike:
- no MCP server configured;
- three stdio servers (the reference `mcp-server-time`, three times) whose tools are cached from
  an earlier start (`bantam mcp list`; every run after the first: the case the cache is for);
- the same three with the cache emptied before each run (the first run: waits for the servers).
Prints one markdown row per case: median, min and max in ms of each, and the medians' ratio to none.
Nothing is written; no timing here is asserted anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import as_installed  # noqa: E402
from tests.fakes.openai_server import FakeServer, Response, text_reply  # noqa: E402

PY = sys.executable
TIME_SERVER = Path(PY).parent / "mcp-server-time"  # pip install mcp-server-time (in '.[test]')
CASES = ("none", "3 servers, cached", "3 servers, first run")


class Stamped(FakeServer):
    """The fake server, noting when each chat request arrives (time.monotonic, as the runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []

    def next_response(self, body: Any = None) -> Response:
        self.arrivals.append(time.monotonic())
        return text_reply("hi")


def servers(count: int) -> dict:
    entry = {"command": str(TIME_SERVER), "args": ["--local-timezone", "UTC"]}
    return {"mcpServers": {f"time{i}": entry for i in range(1, count + 1)}}


def one_run(server: Stamped, work: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from the process's start to the first model request it sends, and to its exit."""
    before = len(server.arrivals)
    t0 = time.monotonic()
    p = subprocess.run([PY, "-m", "bantam", "-p", "hi"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    ended = time.monotonic()
    if p.returncode != 0 or len(server.arrivals) == before:
        sys.exit(f"bench: bantam failed:\n{p.stderr[-2000:]}")
    return server.arrivals[before] - t0, ended - t0


def setup(tmp: Path, case: str, url: str, src: Path) -> tuple[Path, dict[str, str]]:
    """A HOME and a folder for one case: its own mcp.json and its own cache."""
    home, work = tmp / case.replace(" ", "_").replace(",", "") / "home", tmp / case.replace(" ", "_").replace(",", "") / "work"
    (home / ".config" / "bantam").mkdir(parents=True)
    work.mkdir()
    if case != "none":
        (home / ".config" / "bantam" / "mcp.json").write_text(json.dumps(servers(3)))
    (work / ".bantam.cfg").write_text(f"endpoint={url}\nmodel=m\nretry_delays=0,0,0\n")
    env = {**as_installed(dict(os.environ)), "HOME": str(home), "PYTHONPATH": str(src)}
    for var in ("BANTAM_HOME", "XDG_CONFIG_HOME", "LLM_URL", "LLM_MODEL"):
        env.pop(var, None)
    return work, env


def measure(runs: int, src: Path) -> dict[str, list[tuple[float, float]]]:
    times: dict[str, list[tuple[float, float]]] = {case: [] for case in CASES}
    with Stamped() as server, tempfile.TemporaryDirectory() as tmp:
        places = {case: setup(Path(tmp), case, server.url, src) for case in CASES}
        work, env = places["3 servers, cached"]  # `bantam mcp list` waits for every start: it fills the cache
        subprocess.run([PY, "-m", "bantam", "mcp", "list"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, check=True)
        for _ in range(runs):
            for case in CASES:
                work, env = places[case]
                if case.endswith("first run"):
                    shutil.rmtree(Path(env["HOME"], ".bantam", "mcp", "tools"), ignore_errors=True)
                times[case].append(one_run(server, work, env))
    return times


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs of each case (default 10)")
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the bantam sources to run")
    args = ap.parse_args()
    if not TIME_SERVER.exists():
        sys.exit(f"bench: {TIME_SERVER} is missing: pip install mcp-server-time")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}; sources: {args.src}", file=sys.stderr)
    times = measure(args.runs, args.src.resolve())
    print(f"| case ({args.runs} runs each) | first request: median ms | min | max | median / none "
          "| exit: median ms | min | max | median / none |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in CASES:
        cells = []
        for which in (0, 1):
            t, none = [run[which] for run in times[case]], statistics.median(run[which] for run in times["none"])
            cells += [ms(statistics.median(t)), ms(min(t)), ms(max(t)), f"{statistics.median(t) / none:.2f}x"]
        print(f"| `bantam -p hi`, {case} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
