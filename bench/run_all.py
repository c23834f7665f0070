"""The whole benchmark suite, one command; each script writes its own section of bench/RESULTS.md.

    .venv/bin/python bench/run_all.py        # from the repository root; needs '.[local,test]'

Run it on a quiet machine: other load shows up in every number (the peers' tables state the spread).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SCRIPTS = ["bench_core.py", "bench_sessions.py", "bench_agents.py", "bench_local.py", "bench_peers.py",
           "bench_daemon.py", "bench_soak.py", "bench_sandbox.py", "bench_mcp.py", "bench_batch.py",
           "bench_prefix.py", "bench_tokens.py"]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        if not (BENCH / name).exists():
            continue
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(BENCH / name), "--write"], cwd=BENCH.parent).returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
