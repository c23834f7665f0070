"""Session scale: load, autosave and compact sessions of 100, 1,000 and 10,000 messages, and
appending one step to a thread of the same length.

    .venv/bin/python bench/bench_sessions.py --write    # from the repository root

Sessions are one JSON document each, rewritten atomically (temp file, fsync, rename) by every
autosave, so their cost grows with their length; threads are JSON Lines, appended after each step.
Compaction is timed against the instant fake server (tests/fakes), so it shows bantam's own cost.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import machine, ms, write_results  # noqa: E402
from tests.fakes.openai_server import FakeServer, text_reply  # noqa: E402

BEGIN, END = "<!-- bench_sessions:begin -->", "<!-- bench_sessions:end -->"
SIZES = (100, 1000, 10000)


def conversation(n: int) -> list[dict]:
    return [{"role": "system", "content": "You are Bantam. " * 60}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}: " + "word " * 60} for i in range(n)]


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(n: int, reps: int) -> list[str]:
    from bantam import compact, sessions
    from bantam.config import Config
    from bantam.providers.openai import OpenAIProvider
    messages = conversation(n)
    sessions.save("scale", messages)
    size = (sessions.sessions_dir() / "scale.json").stat().st_size
    autosave = median_time(lambda: sessions.save("scale", messages), reps)
    load = median_time(lambda: sessions.load("scale"), reps)
    thread = sessions.Thread(f"scale{n}")
    thread.checkpoint(messages)
    step = [{"role": "user", "content": "one more"}, {"role": "assistant", "content": "ok"}]

    def append() -> None:
        messages.extend(step)
        thread.checkpoint(messages)
    appended = median_time(append, reps)
    with FakeServer([text_reply("summary of it all") for _ in range(reps)]) as server:
        provider = OpenAIProvider(Config(endpoint=server.url, model="test-model"))
        compaction = median_time(lambda: compact.compact(provider, list(conversation(n)), (0,)), reps)
    return [f"| {n} | {size // 1024} KB | {ms(load)} | {ms(autosave)} | {ms(appended)} | {ms(compaction)} |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["BANTAM_HOME"] = home
        rows = [row for n in SIZES for row in measure(n, args.reps)]
    section = "\n".join([
        "## Session scale", "", "Command: `.venv/bin/python bench/bench_sessions.py --write`", "",
        f"Machine: {machine()}", "",
        f"| messages | session file | load ms | autosave ms | thread append of one step ms | compact ms |",
        "|---:|---:|---:|---:|---:|---:|", *rows, "",
        "Medians of " + str(args.reps) + " runs. A session is one JSON document (DESIGN.md: "
        "`~/.bantam/sessions/<id>.json`), so autosave rewrites it whole, atomically: its cost grows with "
        "the session's length, and stays far below one model request even at 10,000 messages. A thread is "
        "JSON Lines, and a step is an append whose cost does not grow. Compaction sends the whole "
        "conversation once (tool results clipped) and replaces it with two messages."])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
