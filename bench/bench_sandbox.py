"""The sandbox's cost per command: `shell_exec` of `true` through bantam's tool layer, with
sandbox=off (the floor: bash started by run_process) against sandbox=workspace (network off and
on) and sandbox=read-only, i.e. bubblewrap's start-up plus bantam's per-call boundary checks.

    .venv/bin/python bench/bench_sandbox.py --write    # from the repository root; --runs N

The variants are interleaved run by run, so drift on the machine hits them alike. Prints a
markdown table; --write puts it in bench/RESULTS.md. No timing here is asserted anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
from bantam.config import Config
from bantam.sandbox import unavailable
from bantam.tools import ToolContext, make_toolbox
from bench.bench_core import machine, ms, write_results

BEGIN, END = "<!-- bench_sandbox:begin -->", "<!-- bench_sandbox:end -->"
VARIANTS = {
    "`sandbox=off` (floor: bash, no sandbox)": {"sandbox": "off"},
    "`sandbox=workspace`, network off (default)": {"sandbox": "workspace"},
    "`sandbox=workspace`, `sandbox_network=on`": {"sandbox": "workspace", "sandbox_network": True},
    "`sandbox=read-only`": {"sandbox": "read-only"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100, help="commands per variant (default 100)")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = ap.parse_args()
    if unavailable():
        sys.exit(f"bench: {unavailable()}")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        boxes = {name: make_toolbox(["shell_exec"], ToolContext(Config(**values)))
                 for name, values in VARIANTS.items()}
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        call = json.dumps({"command": "true"})
        for _ in range(args.runs):
            for name, box in boxes.items():
                t0 = time.perf_counter()
                outcome = box.execute("shell_exec", call)
                times[name].append(time.perf_counter() - t0)
                if outcome.content != "\n\nexit: 0":
                    sys.exit(f"bench: {name}: {outcome.content}")
    floor = statistics.median(next(iter(times.values())))
    rows = [f"| {name} | {ms(min(t))} | {ms(statistics.median(t))} | {ms(max(t))} | "
            f"{'—' if i == 0 else '+' + ms(statistics.median(t) - floor)} |"
            for i, (name, t) in enumerate(times.items())]
    section = "\n".join([
        "## Sandbox: cost per command", "",
        "One `shell_exec` of `true` through bantam's tool layer (argument checks, the boundary and "
        "approval checks, run_process), in the same process; the sandboxed rows add bubblewrap's "
        "start-up (mount, pid and, with the network off, network namespaces).", "",
        "Command: `.venv/bin/python bench/bench_sandbox.py --write`", "",
        f"Machine: {machine()} Load average (1 min) at the start: {load:.1f}.", "",
        f"| variant ({args.runs} commands each, interleaved) | min ms | median ms | max ms | median over floor ms |",
        "|---|---:|---:|---:|---:|", *rows])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
