"""`bantam acp` start-up: process start to the answer of `initialize`, N runs (issue 30).

    .venv/bin/python bench/bench_acp.py [N]
"""
import json, statistics, subprocess, sys, time
N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
times = []
for _ in range(N):
    start = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "bantam", "acp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    p.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n')
    p.stdin.flush()
    line = p.stdout.readline()
    times.append((time.perf_counter() - start) * 1000)
    assert json.loads(line)["id"] == 1
    p.stdin.close(); p.wait()
print(f"median {statistics.median(times):.0f} ms, min {min(times):.0f}, max {max(times):.0f} ({N} runs)")
