"""`bantam batch` throughput at 1 to 256 concurrent tasks, beside mini-swe-agent's thread pool, and the Redis path.

    .venv/bin/python bench/bench_batch.py --write    # from the repository root; needs redis-server
    .venv/bin/python bench/bench_batch.py --quick    # 4 and 64 concurrent tasks, one run each: a sanity check

Throughput: every request to the local fake server (tests/fakes) takes 1 s, as a slow remote model
would, and every task is exactly one request (the model answers at once; the bench checks the
server's count), so N concurrent tasks could at best finish N tasks a second; each N runs
--per-worker x N tasks. Rows: `bantam batch --workers N` (tasks as sessions, threads of one
process), the same at 64 with `--isolate process` (an agent process per worker, the mode before
issue 33), two `bantam worker --concurrency N/2` behind Redis, and mini-swe-agent's `DefaultAgent`
driven by a thread pool of N (as its `mini-extra swebench` does, with `LocalEnvironment`).
Long runs: at 64 and 256, bantam's session rows again with --long-rounds x N tasks (default 16),
the pace a large batch keeps once its start and its last round weigh little.
Overhead: with a model that answers instantly, the wall time per task of a one-worker batch run
locally, and through Redis with one `bantam worker` (started beforehand).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import as_installed, machine, write_results  # noqa: E402
from bench.bench_peers import MINI_DONE, PEERS, clean_env, ensure_peers  # noqa: E402
from tests.fakes.openai_server import (FakeServer, _handler, _QuietServer, completion, json_reply,  # noqa: E402
                                       text_reply)

LATENCY = 1.0
CONCURRENCY, QUICK = (1, 4, 16, 64, 256), (4, 64)
PROCESS_AT = 64          # where `--isolate process` (the old mode) is measured beside the new one
SPREAD_AT = (64, 256)    # where `--processes 2` (the sessions over two agent processes) is measured
REDIS_AT = (64, 256)     # where two workers behind Redis are measured
LONG_AT = (64, 256)      # where the long runs (--long-rounds x N tasks: the steady pace) are measured
LONG_ROUNDS = 16
MINI_LABEL = "mini-swe-agent, `DefaultAgent` x thread pool"
BACKLOG = 1024           # listen backlog of the fake server (socketserver's default is 5)
BEGIN, END = "<!-- bench_batch:begin -->", "<!-- bench_batch:end -->"
BEFORE = ("Before issue 33 (every task in an agent process, one per worker; same bench, earlier run): "
          "0.87, 2.64, 5.69 and 6.92 tasks/s at 1, 4, 16 and 64 workers, about 110 ms of CPU per task.")


class _Backlogged(_QuietServer):
    # a burst of 256 new connections overflows a backlog of 5: the kernel drops the SYNs and the
    # client retries a second later, which would be the server's delay, not bantam's
    request_queue_size = BACKLOG


class ModelServer(FakeServer):
    """Every request is answered after `latency` seconds: bantam's (streamed) with a final answer,
    mini-swe-agent's (whole responses, its task template in the first messages) with the command
    that ends its run. One thread per connection (ThreadingHTTPServer), no lock held while a
    request waits, the answers built once: 256 requests at once are 256 sleeping threads."""

    def __init__(self, latency: float):
        super().__init__()
        self.httpd.server_close()  # the base class listens with the default backlog: listen again
        self.httpd = _Backlogged(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.latency, self.answered = latency, 0
        self.final = text_reply("done\nSTATUS: success")
        call = {"id": "call_1", "type": "function", "function": {"name": "bash",
                                                                 "arguments": json.dumps({"command": MINI_DONE})}}
        self.mini = json_reply(completion(tool_calls=[call]))

    def next_response(self, body: Any = None):
        time.sleep(self.latency)
        with self.lock:
            self.answered += 1
        if isinstance(body, dict) and "COMPLETE_TASK" in json.dumps(body.get("messages", [])[:2]):
            return self.mini
        return self.final

    def take_count(self) -> int:
        """Model requests answered since the last call (the recorded requests are dropped too:
        thousands of them would grow this process for nothing)."""
        with self.lock:
            count, self.answered = self.answered, 0
            self.requests.clear()
        return count


@dataclass
class Run:
    label: str
    n: int
    tasks: int
    seconds: float       # process start to exit (for Redis: the `bantam batch --queue` process)
    inner: float         # the program's own clock, from its tasks' start to the last result
    cpu: float           # CPU seconds of every process the row counts
    rss: str             # peak RSS, MB, as the section text explains per row
    start_cpu: float = 0.0  # CPU seconds before the tasks start (interpreter, imports), where known
    requests: int = 0    # model requests the server answered (one per task, unless one was retried)


def environment(home: str) -> dict[str, str]:
    """No user configuration; bytecode cached as in an installed package (compiling bantam's
    sources at every agent start would be most of the cost measured)."""
    env = {k: v for k, v in as_installed(dict(os.environ)).items() if not k.startswith(("LLM_", "BANTAM_", "AGENT_"))}
    return {**env, "HOME": home, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])}


def fresh_work(base: str, url: str) -> str:
    """A folder of its own for one run (its threads and results), configured for the server.
    Kept until the bench ends: ext4 skips inodes freed in the last minutes when it makes a file
    (`recently_deleted`), so deleting a row's thousands of files made the next rows' file
    creations slower (system time a task 2.8 -> 9.5 ms over consecutive runs)."""
    work = tempfile.mkdtemp(prefix="run-", dir=base)
    Path(work, ".bantam.cfg").write_text(f"endpoint={url}\nmodel=test-model\nretry_delays=0\n")
    Path(work, "tasks.jsonl").write_text("")
    return work


def batch(work: str, tasks: int, *options: str, tree: bool = False) -> tuple[float, float, float, float, float]:
    """One `bantam batch --json` of `tasks` fresh tasks, as a child of its own: (wall seconds,
    the batch's own wall_seconds, CPU seconds of it and its waited-for children, its peak RSS
    in MB (PeakSampler), the sampled peak of its whole process tree's RSS in MB when `tree`, else 0)."""
    Path(work, "tasks.jsonl").write_text("".join(json.dumps(f"task {i}") + "\n" for i in range(tasks)))
    Path(work, "results.jsonl").unlink(missing_ok=True)
    with open(Path(work, "batch.out"), "w") as out, open(Path(work, "batch.err"), "w") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "bantam", "batch", "tasks.jsonl", "-o", "results.jsonl",
                              "--json", *options], cwd=work, env=environment(work), stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err)
        sampler = PeakSampler(p.pid, tree)
        # wait4, not RUSAGE_CHILDREN: the CPU of the batch and its waited-for agents alone
        _, status, usage = os.wait4(p.pid, 0)
        elapsed = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    own, peak_tree = sampler.stop()
    summary = check_batch(work, tasks, p.returncode, options)
    return elapsed, summary["wall_seconds"], usage.ru_utime + usage.ru_stime, own, peak_tree


def check_batch(work: str, tasks: int, code: int, options: tuple[str, ...]) -> dict:
    """The batch's summary line, once every task is known to have succeeded."""
    lines = [json.loads(line) for line in Path(work, "batch.out").read_text().splitlines() if line.startswith("{")]
    summary = next((e for e in lines if e.get("event") == "summary"), None)
    results = Path(work, "results.jsonl").read_text().splitlines() if Path(work, "results.jsonl").exists() else []
    if code or summary is None or len(results) != tasks or summary.get("statuses") != {"success": tasks}:
        sys.exit(f"bench: batch {' '.join(options)} failed ({code}; {summary}):\n"
                 f"{Path(work, 'batch.err').read_text()[-2000:]}")
    return summary


class PeakSampler:
    """Every 0.2 s: the process's own VmHWM (its peak RSS since its exec; the last sample before
    it exits is its peak, but for growth in its last 0.2 s) and, when `tree`, the peak of the
    summed VmRSS of it and its descendants (an upper bound of their memory: shared pages count
    once per process). Not wait4's ru_maxrss: a child's counts the bench's own RSS at the fork
    (Linux keeps the larger of the old and new address space's peaks across exec), which grew
    to about 110 MB over a bench and showed as every later batch's peak."""

    def __init__(self, pid: int, tree: bool = False):
        self.pid, self.tree, self.own, self.peak, self.done = pid, tree, 0.0, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while True:
            self.own = max(self.own, status_kb(self.pid, "VmHWM") / 1024)
            if self.tree:
                self.peak = max(self.peak, sum(rss_kb(p) for p in descendants(self.pid)) / 1024)
            if self.done.wait(0.2):
                return

    def stop(self) -> tuple[float, float]:
        """(its own peak, the tree's peak or 0), in MB."""
        self.done.set()
        self.thread.join()
        return self.own, self.peak


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:  # gone meanwhile
            pass
    return found


def status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kb(pid: int) -> int:
    return status_kb(pid, "VmRSS")


def proc_cpu(pid: int) -> float:
    """CPU seconds of a live process so far, with its waited-for children (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


# --- the rows ------------------------------------------------------------------------------------

def local_row(server: ModelServer, base: str, n: int, tasks: int, isolate: str) -> Run:
    work = fresh_work(base, server.url)
    server.take_count()
    extra = {"process": ("--isolate", "process"), "spread": ("--processes", "2")}.get(isolate, ())
    options = ("--workers", str(n), *extra)
    wall, inner, cpu, rss, tree = batch(work, tasks, *options, tree=bool(extra))
    requests = requests_of(server, tasks, options)
    label = {"process": "bantam, `--isolate process`", "spread": "bantam, sessions over 2 processes (`--processes 2`)"
             }.get(isolate, "bantam, sessions (threads)")
    return Run(label, n, tasks, wall, inner, cpu, f"{rss:.0f} (all processes: {tree:.0f})" if tree else f"{rss:.0f}",
               requests=requests)


def requests_of(server: ModelServer, tasks: int, what: Any) -> int:
    """The model requests of a run; more than one a task (a retry) is shown in its row, not hidden."""
    count = server.take_count()
    if count != tasks:
        print(f"bench: {what}: {count} model requests for {tasks} tasks (one each expected)", flush=True)
    return count


def redis_row(server: ModelServer, base: str, redis: tuple[subprocess.Popen, int], n: int, tasks: int) -> Run:
    """Two `bantam worker --concurrency N/2` (started and ready beforehand) serve one
    `bantam batch --queue`; CPU is counted over the batch only, from /proc, for the batch
    process, both workers and redis-server."""
    work = fresh_work(base, server.url)
    url = f"redis://127.0.0.1:{redis[1]}/0"
    logs = [Path(work, f"worker{i}.log") for i in range(2)]
    files = [open(log, "w") for log in logs]  # a file, not a pipe: a worker logs every task
    workers = [subprocess.Popen([sys.executable, "-m", "bantam", "worker", url, "--concurrency", str(n // 2)],
                                cwd=work, env=environment(work), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=f) for f in files]
    try:
        wait_for(lambda: all("at a time from" in log.read_text() for log in logs), f"workers at {n}")
        server.take_count()
        others = [w.pid for w in workers] + [redis[0].pid]
        cpu0 = sum(proc_cpu(p) for p in others)
        wall, inner, cpu, _, _ = batch(work, tasks, "--queue", url)
        cpu += sum(proc_cpu(p) for p in others) - cpu0
        requests = requests_of(server, tasks, f"Redis at {n}")
        rss = sum(status_kb(w.pid, "VmHWM") for w in workers) / 1024
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=60)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        for f in files:
            f.close()
    return Run("bantam, Redis, 2 x `bantam worker --concurrency N/2`", n, tasks, wall, inner, cpu,
               f"{rss:.0f} (both workers)", requests=requests)


def wait_for(ready, what: str, deadline: float = 120.0) -> None:
    end = time.monotonic() + deadline
    while not ready():
        if time.monotonic() > end:
            sys.exit(f"bench: {what} not ready after {deadline:g} s")
        time.sleep(0.05)


# mini-swe-agent's batch mode (`mini-extra swebench`, run/benchmarks/swebench.py) runs each
# instance as `process_instance` in a ThreadPoolExecutor: a model from get_model, an environment,
# an agent, agent.run(task), the trajectory saved. The same here, with LocalEnvironment in a
# folder of the task's own instead of a container, and the builtin mini.yaml's agent and model.
MINI_DRIVER = '''
import collections, concurrent.futures, json, resource, sys, time
from pathlib import Path
import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import builtin_config_dir
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models import get_model
import minisweagent.models.litellm_model  # noqa: F401  (get_model imports it, and litellm, lazily: seconds)

url, n, tasks, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
config = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())
agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}  # mode: the interactive agent's
agent_config["cost_limit"] = 0  # the fake model has no price
model_config = {**config["model"], "model_name": "openai/test-model", "cost_tracking": "ignore_errors"}
model_config["model_kwargs"] = {**model_config.get("model_kwargs", {}), "api_base": url}

def one(i):
    folder = work / f"task-{i}"
    folder.mkdir()
    model = get_model(config=model_config)
    env = LocalEnvironment(**{**config.get("environment", {}), "cwd": str(folder)})
    agent = DefaultAgent(model, env, **agent_config, output_path=folder / "traj.json")
    return agent.run(f"task {i}").get("exit_status")

usage = resource.getrusage(resource.RUSAGE_SELF)
started = time.perf_counter()
with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
    statuses = collections.Counter(pool.map(one, range(tasks)))
print(json.dumps({"seconds": time.perf_counter() - started, "statuses": statuses,
                  "start_cpu": usage.ru_utime + usage.ru_stime}))
'''


def mini_row(server: ModelServer, base: str, n: int, tasks: int) -> Run:
    work = tempfile.mkdtemp(prefix="mini-", dir=base)
    script = Path(work, "driver.py")
    script.write_text(MINI_DRIVER)
    env = {**clean_env(work), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no fetch of litellm's price list
    server.take_count()
    with open(Path(work, "driver.out"), "w") as out, open(Path(work, "driver.err"), "w") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([str(PEERS / "mini" / "bin" / "python"), str(script), server.url, str(n), str(tasks),
                              work], cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        sampler = PeakSampler(p.pid)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    own, _ = sampler.stop()
    lines = Path(work, "driver.out").read_text().splitlines()
    report = json.loads(lines[-1]) if p.returncode == 0 and lines else {}
    if report.get("statuses") != {"Submitted": tasks}:
        sys.exit(f"bench: mini-swe-agent at {n} failed ({p.returncode}; {report}):\n"
                 f"{Path(work, 'driver.err').read_text()[-2000:]}")
    requests = requests_of(server, tasks, f"mini-swe-agent at {n}")
    return Run(MINI_LABEL, n, tasks, wall, report["seconds"], usage.ru_utime + usage.ru_stime,
               f"{own:.0f}", report["start_cpu"], requests)


def mini_available() -> str:
    """'' when mini-swe-agent is installed (bench_peers' ensure_peers), else why not."""
    try:
        ensure_peers()
    except (OSError, subprocess.CalledProcessError) as e:
        return f"mini-swe-agent could not be installed into bench/.peers/mini ({e}), so its rows are left out."
    return ""


def mini_version() -> str:
    import importlib.metadata as md
    site = next((PEERS / "mini" / "lib").glob("python*/site-packages"), None)
    dists = list(md.distributions(path=[str(site)], name="mini-swe-agent")) if site else []
    return dists[0].version if dists else "?"


def throughput(concurrency: tuple[int, ...], per_worker: int, reps: int, with_mini: bool,
               long: bool = False) -> list[Run]:
    """Every row `reps` times, the rows of one N one after another and the rounds interleaved
    (so a change in the machine's load hits them alike); per row, the run of median tasks/s.
    `long`: only bantam's rows that run sessions (one process, two, two Redis workers), whose
    pace over many rounds the short runs' start and last round hide."""
    server = ModelServer(LATENCY)
    server.__enter__()
    base = tempfile.mkdtemp(prefix="bench-batch-")
    redis = start_redis(base) if any(n in REDIS_AT for n in concurrency) else None
    runs: dict[tuple[str, int], list[Run]] = {}
    try:
        for _ in range(reps):
            for n in concurrency:
                tasks = max(8, per_worker * n)
                kinds = ["session", *(["spread"] if n in SPREAD_AT else []),
                         *(["process"] if n == PROCESS_AT and not long else []),
                         *(["redis"] if redis and n in REDIS_AT else []), *(["mini"] if with_mini and not long else [])]
                for kind in kinds:
                    if kind == "redis" and redis:
                        run = redis_row(server, base, redis, n, tasks)
                    elif kind == "mini":
                        run = mini_row(server, base, n, tasks)
                    else:
                        run = local_row(server, base, n, tasks, kind)
                    runs.setdefault((run.label, n), []).append(run)
                    print(format_row(run), flush=True)
    finally:
        if redis:
            redis[0].terminate()
            redis[0].wait()
        server.__exit__()
        shutil.rmtree(base, ignore_errors=True)
    return [sorted(rs, key=lambda r: r.tasks / r.seconds)[len(rs) // 2] for rs in runs.values()]


def format_row(r: Run) -> str:
    rate, inner_rate, ideal = r.tasks / r.seconds, r.tasks / r.inner, r.n / LATENCY
    return (f"| {r.label} | {r.n} | {r.tasks} | {r.requests} | {r.seconds:.1f} | {rate:.1f} | {100 * rate / ideal:.0f}% | "
            f"{inner_rate:.1f} | {100 * inner_rate / ideal:.0f}% | {ideal:.0f} | {r.cpu / r.tasks * 1000:.1f} | {r.rss} |")


def table(rows: list[Run]) -> list[str]:
    """The markdown table of `rows`, by concurrency."""
    return ["| program | concurrent | tasks | model requests | seconds | tasks/s | of ideal | tasks/s after start | "
            "of ideal | ideal tasks/s | CPU ms per task | peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            *[format_row(r) for r in sorted(rows, key=lambda r: r.n)]]


def redis_overhead(tasks: int, reps: int) -> list[str]:
    server = ModelServer(0.0)
    server.__enter__()
    base = tempfile.mkdtemp(prefix="bench-batch-")
    work = fresh_work(base, server.url)
    redis = start_redis(base)
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
        shutil.rmtree(base, ignore_errors=True)
    extra = [(q - a) * 1000 for a, q in zip(local, queued, strict=True)]  # each Redis run against the local run beside it
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


def section(args: argparse.Namespace, command: str, load_before: str, rows: list[Run], long_rows: list[Run],
            overhead: list[str], no_mini: str) -> str:
    start = [r.start_cpu for r in rows if r.label == MINI_LABEL]
    mini = (f"mini-swe-agent {mini_version()}: a script run by its own venv's python "
            "(bench/.peers/mini, installed by bench_peers.py) builds, per task in a "
            "`concurrent.futures.ThreadPoolExecutor(max_workers=N)`, what `mini-extra swebench` builds per "
            "instance: `get_model` (its `LitellmModel`, `openai/test-model` with `api_base` at the fake server), "
            "a `LocalEnvironment` in a folder of the task's own (instead of a container), a `DefaultAgent` with "
            "the builtin mini.yaml's templates (cost limit off) saving its trajectory there, and `agent.run(task)`. "
            "Its one model request answers with a bash tool call of `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, "
            "the only way mini ends a run, so each of its tasks also starts one shell (bantam's answer is text, "
            "no command). Its own clock starts with the pool, after its imports (its model module, which imports "
            "litellm, imported beforehand: `get_model` would import it inside the first task) and config; its "
            f"process spends {statistics.median(start or [0]):.1f} s of CPU (median) on start and imports before "
            "that, which the CPU column spreads over its tasks as it does bantam's start.") if not no_mini else no_mini
    return "\n".join([
        "## Batches: throughput and the Redis path", "",
        f"Each task is one model request (the server counts them: a retried request shows in the model "
        f"requests column); every request to "
        f"the fake server takes {LATENCY:g} s, so N concurrent tasks finish at best N tasks a second. The "
        f"fake server is a thread per connection with a listen backlog of {BACKLOG} and answers built once, "
        "in the bench's own process: it holds 256 sleeping requests without queueing them, but its CPU "
        "comes from the same cores as the batch's.", "",
        f"Command: `{command}`; {machine()} Load average {load_before} before the run and "
        f"{os.getloadavg()[0]:.1f} after (other work on the machine takes cores from the batch).", "",
        f"Each row is the run of median tasks/s among {args.reps}, of --per-worker {args.per_worker} x N tasks. "
        "Seconds and tasks/s: from the process start to its exit (for Redis, of `bantam batch --queue`, "
        "the workers started and ready beforehand). After start: the program's own clock "
        "(bantam's `--json` summary `wall_seconds`, from after its configuration is loaded to the last "
        "result; mini's from its pool's start), so interpreter start and imports are out. "
        "CPU per task: user + system time of the batch process and of every child it waited for "
        "(its agent processes with `--isolate process`), from wait4; for Redis, the batch, both workers "
        "and redis-server, read from /proc over the batch's run only. Peak RSS: the batch process's own "
        "VmHWM, its peak since it started, read every 0.2 s until it exits (with agent processes, in "
        "parentheses the peak of the summed VmRSS of all its processes, sampled alike); for Redis, the "
        "two workers' VmHWM summed; for mini, its process's VmHWM. (Tables before 2026-12-04 took "
        "wait4's ru_maxrss, which counts the bench's own RSS at the fork: up to about 110 MB.)", "",
        *table(rows), "",
        mini, "", BEFORE, "",
        *(["Long runs: the pace a large batch keeps. The same rows, bantam's only, with --long-rounds "
           f"{args.long_rounds} x N tasks instead of {args.per_worker} x N, so the start (interpreter and "
           "imports, about 0.25 s before the first request) and the last round (whose answers arrive "
           "together and are finished one after another) are spread over more tasks. mini-swe-agent is "
           "left out of these: at its pace above, its long runs would take most of the bench's time.", "",
           *table(long_rows), ""] if long_rows else []),
        "Per-task wall time with a model that answers at once (one task at a time; medians):", "",
        "| path | runs x tasks | ms per task | over local, ms (median of pairs) |", "|---|---:|---:|---:|",
        *overhead])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-worker", type=int, default=4, help="tasks per concurrent task slot (N x this)")
    ap.add_argument("--reps", type=int, default=3, help="runs of every throughput row, and of the overhead measure")
    ap.add_argument("--long-rounds", type=int, default=LONG_ROUNDS,
                    help=f"tasks per concurrent task slot in the long runs at {' and '.join(map(str, LONG_AT))} (0: none)")
    ap.add_argument("--overhead-tasks", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help=f"only N in {QUICK}, one run each of 2N tasks, 4 overhead tasks")
    ap.add_argument("--concurrency", type=int, nargs="+", metavar="N",
                    help=f"the concurrent task counts to measure (default {' '.join(map(str, CONCURRENCY))})")
    ap.add_argument("--no-mini", action="store_true", help="leave mini-swe-agent out")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.quick:  # under a minute: the old mode's 64 agent processes are most of it
        args.reps, args.per_worker, args.overhead_tasks, args.long_rounds = 1, 2, 4, 0
    command = " ".join([".venv/bin/python bench/bench_batch.py", *sys.argv[1:]])
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "bantam")], check=True)
    no_mini = "mini-swe-agent was left out of this run (--no-mini)." if args.no_mini else mini_available()
    load_before = f"{os.getloadavg()[0]:.1f}"
    print("| program | N | tasks | requests | s | tasks/s | of ideal | after start | of ideal | ideal | CPU ms | RSS MB |",
          flush=True)
    concurrency = tuple(args.concurrency or (QUICK if args.quick else CONCURRENCY))
    rows = throughput(concurrency, args.per_worker, args.reps, not no_mini)
    at = tuple(n for n in concurrency if n in LONG_AT)
    long_rows = throughput(at, args.long_rounds, args.reps, False, long=True) if args.long_rounds and at else []
    overhead = redis_overhead(args.overhead_tasks, args.reps)
    text = section(args, command, load_before, rows, long_rows, overhead, no_mini)
    print(text)
    if args.write:
        write_results(text, BEGIN, END)


if __name__ == "__main__":
    main()
