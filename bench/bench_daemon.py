"""Daemon benchmarks: what an idle `bantam daemon` costs, and how fast it wakes.

    .venv/bin/python bench/bench_daemon.py --write    # from the repository root; --seconds N, --wakes N

1. Idle cost: CPU time (user + system, from /proc/<pid>/stat, threads and reaped children
   included) of a daemon doing nothing for --seconds (default 60), after its start-up turn.
   Three set-ups run side by side: inotify (watchfiles, the default), polling ("watch": "poll",
   poll_s 1), and inotify with Telegram long polling against the fake Bot API
   (tests/fakes/telegram_server.py). The tunables are the seed's defaults (trigger_tick 30 s,
   inbox_tick 10 s, heartbeat 225 s, so no heartbeat falls in a 60 s window). Beside them, the
   floor for a watcher: a bare `watchfiles.watch()` loop with the daemon's step setting.
2. Wake-up latency: a line appended to messages.jsonl by another process (under flock, as
   any writer must) until the daemon's answer is in the file; the fake model answers at once.
Standard library only here (the daemon under test and the peer run in the project's venv).
Prints markdown; --write puts it in bench/RESULTS.md between this script's markers.
"""
from __future__ import annotations

import argparse
import fcntl
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
from bench.bench_core import machine, write_results  # noqa: E402
from tests.fakes.openai_server import FakeServer, text_reply  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402

PY = sys.executable
BEGIN, END = "<!-- bench_daemon:begin -->", "<!-- bench_daemon:end -->"
TICK = os.sysconf("SC_CLK_TCK")
WATCHER_PEER = (  # the daemon's watcher settings, nothing else
    "import sys, threading, watchfiles\n"
    "for _ in watchfiles.watch(sys.argv[1], watch_filter=None, stop_event=threading.Event(), "
    "recursive=False, step=200, debounce=400, rust_timeout=0): pass\n")


class Answering(FakeServer):
    """The model: every request is answered at once."""

    def next_response(self, body=None):
        return text_reply("ok")


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_daemon(home: Path, config: dict) -> subprocess.Popen:
    agent = home / "agent"
    agent.mkdir(parents=True)
    (agent / "config.json").write_text(json.dumps(config))
    proc = subprocess.Popen([PY, "-m", "bantam", "daemon"], cwd=home, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while " reply: " not in _read(agent / "LIFE.md"):  # the start-up turn is over
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"the daemon in {home} did not start")
        time.sleep(0.05)
    return proc


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def append_line(path: Path, message: dict) -> None:
    with open(path, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write((json.dumps(message) + "\n").encode())


def replies(path: Path) -> int:
    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        return sum(json.loads(line).get("role") == "assistant" for line in f.read().splitlines())


def wake_latency(home: Path, times: int) -> list[float]:
    path = home / "agent" / "messages.jsonl"
    samples = []
    for i in range(times):
        before = replies(path)
        t0 = time.perf_counter()
        append_line(path, {"role": "user", "content": f"ping {i}"})
        while replies(path) == before:
            time.sleep(0.002)
        samples.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.3)
    return samples


def measure(seconds: float, wakes: int) -> dict:
    with Answering() as model, FakeTelegram() as tg, tempfile.TemporaryDirectory() as tmp:
        base = {"api_base": model.url, "model": "test-model"}
        setups = {
            "inotify (default)": base,
            "polling (`\"watch\": \"poll\"`, poll_s 1)": {**base, "watch": "poll"},
            "inotify + Telegram long polling": {**base, "telegram_token": tg.token,
                                                "telegram_chat_id": "1", "telegram_api_base": tg.url},
        }
        homes = {name: Path(tmp, f"d{i}") for i, name in enumerate(setups)}
        procs = {name: start_daemon(homes[name], config) for name, config in setups.items()}
        peer = subprocess.Popen([PY, "-c", WATCHER_PEER, tmp])
        time.sleep(2)  # let start-up settle (the first long poll, the first scans)
        names = [*procs, "floor: bare watchfiles watcher"]
        pids = {**{n: p.pid for n, p in procs.items()}, names[-1]: peer.pid}
        before = {n: cpu_seconds(pid) for n, pid in pids.items()}
        time.sleep(seconds)
        used = {n: cpu_seconds(pid) - before[n] for n, pid in pids.items()}
        rss = {n: rss_mb(pid) for n, pid in pids.items()}
        peer.terminate()
        latency = {n: wake_latency(homes[n], wakes) for n in list(procs)[:2]}
        for proc in procs.values():
            proc.terminate()
            proc.wait(15)
        peer.wait()
    return {"names": names, "used": used, "rss": rss, "latency": latency}


def report(r: dict, seconds: float, wakes: int) -> str:
    rows = [f"| {n} | {r['used'][n] * 1000:.0f} | {r['used'][n] / seconds * 100:.3f}% | "
            f"{r['rss'][n]:.1f} |" for n in r["names"]]
    lat = [f"| {n} | {min(s):.0f} | {statistics.median(s):.0f} | {max(s):.0f} |"
           for n, s in r["latency"].items()]
    best = r["used"][r["names"][0]]
    return "\n".join([
        "## Daemon: idle cost and wake-up latency", "",
        f"An idle `bantam daemon` (start-up turn done, nothing arriving) for {seconds:g} s; the "
        "seed's default tunables; CPU time from /proc/<pid>/stat (threads and children "
        "included; resolution 10 ms). The model is the fake server (tests/fakes), answering at once.",
        "", "Command: `.venv/bin/python bench/bench_daemon.py --write`", "",
        f"Machine: {machine()}", "",
        f"| set-up | CPU ms in {seconds:g} s | of one core | RSS MB |", "|---|---:|---:|---:|",
        *rows, "",
        f"The default daemon used **{best * 1000:.0f} ms of CPU in {seconds:g} s "
        f"({best / seconds * 100:.3f}% of one core)** while idle.", "",
        f"### Wake-up: a line appended by another process until the answer is in messages.jsonl ({wakes} times)",
        "", "| set-up | min ms | median ms | max ms |", "|---|---:|---:|---:|", *lat])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="idle window (default 60)")
    ap.add_argument("--wakes", type=int, default=5, help="wake-up samples per set-up (default 5)")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = ap.parse_args()
    section = report(measure(args.seconds, args.wakes), args.seconds, args.wakes)
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
