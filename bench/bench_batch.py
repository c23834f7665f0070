"""`bantam batch` throughput at 1, 4, 16 and 64 workers, and the per-task cost of the Redis path.

    .venv/bin/python bench/bench_batch.py --write    # from the repository root; needs redis-server

Throughput: every request to the local fake server (tests/fakes) takes 1 s, as a slow remote model
would, and every task is one request (the model answers at once), so N workers could at best
finish N tasks a second; each N runs 4N tasks. Overhead: with a model that answers instantly, the
wall time per task of a one-worker batch run locally, and through Redis with one `bantam worker`
(started beforehand); the difference is what the queue adds per task.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import write_results  # noqa: E402
from tests.fakes.openai_server import FakeServer, text_reply  # noqa: E402

LATENCY = 1.0
BEGIN, END = "<!-- bench_batch:begin -->", "<!-- bench_batch:end -->"


class ModelServer(FakeServer):
    """Every request is answered, after `latency` seconds, with a final answer."""

    def __init__(self, latency: float):
        super().__init__()
        self.latency = latency

    def next_response(self, body=None):
        time.sleep(self.latency)
        return text_reply("done\nSTATUS: success")


def environment(home: str) -> dict[str, str]:
    """No user configuration; bytecode cached as in an installed package (compiling bantam's
    sources at every agent start would be most of the cost measured)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "BANTAM_", "AGENT_")) and k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "HOME": home, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])}


def batch(work: str, tasks: int, *options: str) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of the batch and its agents, for one `bantam batch` of
    `tasks` fresh tasks."""
    Path(work, "tasks.jsonl").write_text("".join(json.dumps(f"task {i}") + "\n" for i in range(tasks)))
    Path(work, "results.jsonl").unlink(missing_ok=True)
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "bantam", "batch", "tasks.jsonl", "-o", "results.jsonl", *options],
                       cwd=work, env=environment(work), stdin=subprocess.DEVNULL, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    lines = Path(work, "results.jsonl").read_text().splitlines() if p.returncode == 0 else []
    if len(lines) != tasks:
        sys.exit(f"bench: batch {options} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return elapsed, children_cpu() - cpu0


def children_cpu() -> float:
    """CPU seconds of every waited-for child (the batch waits for its agents, so theirs count)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def configured(latency: float) -> tuple[ModelServer, str]:
    server = ModelServer(latency).__enter__()
    work = tempfile.mkdtemp(prefix="bench-batch-")
    Path(work, ".bantam.cfg").write_text(f"endpoint={server.url}\nmodel=test-model\nretry_delays=0\n")
    return server, work


def throughput(per_worker: int) -> list[str]:
    server, work = configured(LATENCY)
    rows = []
    try:
        for n in (1, 4, 16, 64):
            tasks = max(8, per_worker * n)
            seconds, cpu = batch(work, tasks, "--workers", str(n))
            rate = tasks / seconds
            rows.append(f"| {n} | {tasks} | {seconds:.1f} | {rate:.2f} | {n / LATENCY:.0f} | "
                        f"{100 * rate * LATENCY / n:.0f}% | {cpu / tasks * 1000:.0f} |")
            print(rows[-1], flush=True)
    finally:
        server.__exit__()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def redis_overhead(tasks: int, reps: int) -> list[str]:
    server, work = configured(0.0)
    redis = start_redis(work)
    url = f"redis://127.0.0.1:{redis[1]}/0"
    worker = subprocess.Popen([sys.executable, "-m", "bantam", "worker", url], cwd=work, env=environment(work),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        local, queued = [], []
        for _ in range(reps):  # interleaved, so a change in the machine's load hits both alike
            local.append(batch(work, tasks, "--workers", "1")[0] / tasks)
            queued.append(batch(work, tasks, "--queue", url)[0] / tasks)
    finally:
        worker.terminate()
        worker.wait()
        redis[0].terminate()
        redis[0].wait()
        server.__exit__()
        shutil.rmtree(work, ignore_errors=True)
    extra = [(q - l) * 1000 for l, q in zip(local, queued)]  # each Redis run against the local run beside it
    local_ms, queued_ms = statistics.median(local) * 1000, statistics.median(queued) * 1000
    return [f"| local, `--workers 1` | {reps} x {tasks} | {local_ms:.0f} | — |",
            f"| Redis, one `bantam worker` | {reps} x {tasks} | {queued_ms:.0f} | "
            f"{statistics.median(extra):+.0f} (pairs: {', '.join(f'{x:+.0f}' for x in extra)}) |"]


def start_redis(work: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", work,
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    sys.exit("bench: redis-server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-worker", type=int, default=4, help="tasks per worker in the throughput table")
    ap.add_argument("--overhead-tasks", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3, help="interleaved runs of the overhead measure")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "bantam")], check=True)
    load_before = f"{os.getloadavg()[0]:.1f}"
    rows = throughput(args.per_worker)
    overhead = redis_overhead(args.overhead_tasks, args.reps)
    section = "\n".join([
        "## Batches: throughput and the Redis path", "",
        f"Each task is one model request; every request to the fake server takes {LATENCY:g} s. Every task "
        "runs in an agent process of its own (one per worker, reused), so past a few workers the "
        "machine's cores, not the model, set the pace: at best cores / (CPU per task) tasks a second. "
        "CPU per task counts the batch process and every agent process.", "",
        f"Command: `.venv/bin/python bench/bench_batch.py --write --per-worker {args.per_worker}`, on "
        f"{os.cpu_count()} cores; load average {load_before} before the run and {os.getloadavg()[0]:.1f} after "
        "(other work on the machine takes cores from the agents).", "",
        "| workers | tasks | seconds | tasks/s | ideal tasks/s | of ideal | CPU ms per task |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        *rows, "",
        "Per-task wall time with a model that answers at once (one task at a time; medians):", "",
        "| path | runs x tasks | ms per task | over local, ms (median of pairs) |", "|---|---:|---:|---:|", *overhead, "",
        "mini-swe-agent's batch mode (`mini-extra swebench`, read at commit 0eb096f) is not measured "
        "beside these rows: it runs SWE-bench instances from a Hugging Face dataset, each in a container "
        "(docker by default), so it has no run against a plain model server to time. By its code: its "
        "workers are threads in one process (no process start per task, but one working directory "
        "and one crash for all); it rewrites the whole preds.json after each instance (not atomically; "
        "bantam appends one fsynced line); a rerun skips instances in preds.json and starts an "
        "interrupted one from scratch (bantam resumes it from its thread); it has no queue for more "
        "than one machine."])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
