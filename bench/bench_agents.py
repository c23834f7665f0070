"""Sub-agents side by side: one parent turn that spawns N = 1, 2, 4, 8 sub-agents at once.

    .venv/bin/python bench/bench_agents.py --write    # from the repository root; --reps N

Every request to the local fake server (tests/fakes) takes a fixed 1 s, as a slow remote model
would. A parent run is: parent asks (1 s), the sub-agents ask (1 s each), the parent answers
(1 s). Sub-agents run concurrently, so N of them should cost about what one does; run one after
the other they would add N-1 seconds. Prints a markdown table; --write puts it in bench/RESULTS.md.
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
from bench.bench_core import BANTAM, ms, write_results  # noqa: E402
from tests.fakes.openai_server import FakeServer, chunk, sse, text_reply  # noqa: E402

LATENCY = 1.0
BEGIN, END = "<!-- bench_agents:begin -->", "<!-- bench_agents:end -->"


class SlowServer(FakeServer):
    """Each request waits LATENCY seconds; sub-agents (told apart by their task) get their answer."""

    def next_response(self, body=None):
        time.sleep(LATENCY)
        messages = body["messages"]
        if "this is a child agent" in messages[0]["content"]:
            return text_reply(f"{messages[1]['content']}: done\nSTATUS: success")
        return super().next_response(body)


def setup(url: str, work: str) -> tuple[list[str], dict[str, str]]:
    """The folder configured for the server, and bantam's command and environment (HOME is the
    folder, no configuration of the person running the bench). spawn_agent is turned on as a user
    does it, on the command line: a project file may not add a tool until the user trusts it."""
    Path(work, ".bantam.cfg").write_text(f"endpoint={url}\nmodel=test-model\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "BANTAM_", "AGENT_")) and k != "XDG_CONFIG_HOME"}
    return [BANTAM, "--set", "tools=shell_exec,write_file,spawn_agent"], {**env, "HOME": work}


def parent_run(children: int) -> float:
    calls = [{"index": i, "id": f"call_{i}", "type": "function",
              "function": {"name": "spawn_agent", "arguments": json.dumps({"task": f"subtask {i}"})}}
             for i in range(children)]
    script = [sse([chunk(tool_calls=calls), chunk(finish="tool_calls")]), text_reply("all done")]
    with SlowServer(script) as server, tempfile.TemporaryDirectory() as work:
        command, env = setup(server.url, work)
        t0 = time.perf_counter()
        p = subprocess.run([*command, "-p", "go"], cwd=work, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        if p.returncode != 0 or len(server.chat_requests()) != children + 2:
            sys.exit(f"bench: parent with {children} sub-agents failed:\n{p.stderr[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    counts = (1, 2, 4, 8)
    times = {n: [parent_run(n) for _ in range(args.reps)] for n in counts}
    one = statistics.median(times[1])
    rows = [f"| {n} | {ms(min(t))} | {ms(statistics.median(t))} | {ms(max(t))} | "
            f"{ms(statistics.median(t) - one)} | {ms((n - 1) * LATENCY)} |" for n, t in times.items()]
    section = "\n".join([
        "## Sub-agents in parallel (fan-out)", "",
        f"Each request to the fake server takes {LATENCY:g} s. One parent turn spawns N sub-agents in one "
        "assistant message (each answers in one request), then the parent answers.", "",
        "Command: `.venv/bin/python bench/bench_agents.py --write`", "",
        f"| N ({args.reps} repetitions) | min ms | median ms | max ms | median over N=1 ms | "
        "one after another would add ms |", "|---:|---:|---:|---:|---:|---:|", *rows])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
