"""Session scale: load, autosave and compact sessions of 100, 1,000 and 10,000 messages, and
appending one step to a thread of the same length.

    .venv/bin/python bench/bench_sessions.py --write    # from the repository root

Sessions are JSON Lines (`~/.bantam/sessions/<id>.jsonl`): autosave appends the messages of each
step (fsynced), and only /clear, a compaction or /save rewrite the file whole, atomically (temp
file, fsync, rename). Compaction is timed against the instant fake server (tests/fakes), so it
shows bantam's own cost.
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
# The same measures by this script as it was at commit 47e61e8 (kept here: that code is gone)
BEFORE = """Before (one JSON document per session, rewritten whole by every autosave; commit 47e61e8,
`git archive 47e61e8 src bench tests | tar -x -C /tmp/before && cd /tmp/before &&
PYTHONPATH=src:. .venv/bin/python bench/bench_sessions.py --reps 21`, same machine, just before):

| messages | session file | load ms | autosave ms (whole file) | thread append of one step ms | compact ms |
|---:|---:|---:|---:|---:|---:|
| 100 | 35 KB | 0.1 | 7.9 | 4.0 | 3.8 |
| 1000 | 341 KB | 1.0 | 16.0 | 4.0 | 10.9 |
| 10000 | 3413 KB | 24.1 | 112.0 | 4.0 | 93.2 |"""


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
    from bantam import compact, transcripts
    from bantam.config import Config
    from bantam.providers.openai import OpenAIProvider
    messages = conversation(n)
    step = [{"role": "user", "content": "one more"}, {"role": "assistant", "content": "ok"}]
    autosave = transcripts.Autosave()
    autosave(messages)
    size = transcripts.path_of(autosave.id).stat().st_size

    def save_step() -> None:  # what the terminal does after each step of a turn
        messages.extend(step)
        autosave(messages)
    per_step = median_time(save_step, reps)
    rewrite = median_time(lambda: transcripts.save("scale", messages), reps)  # /clear, compaction, /save
    load = median_time(lambda: transcripts.load(autosave.id), reps)
    thread = transcripts.Thread(f"scale{n}")
    thread.checkpoint(messages)

    def append() -> None:
        messages.extend(step)
        thread.checkpoint(messages)
    appended = median_time(append, reps)
    with FakeServer([text_reply("summary of it all") for _ in range(reps)]) as server:
        provider = OpenAIProvider(Config(endpoint=server.url, model="test-model"))
        compaction = median_time(lambda: compact.compact(provider, list(conversation(n)), (0,)), reps)
    transcripts.delete(autosave.id)
    return [f"| {n} | {size // 1024} KB | {ms(load)} | {ms(per_step)} | {ms(rewrite)} | {ms(appended)} "
            f"| {ms(compaction)} |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["BANTAM_HOME"] = home
        rows = [row for n in SIZES for row in measure(n, args.reps)]
    section = "\n".join([
        "## Session scale", "", f"Command: `.venv/bin/python bench/bench_sessions.py --reps {args.reps} --write`", "",
        f"Machine: {machine()}", "",
        "| messages | session file | load ms | autosave of one step ms | whole rewrite ms | "
        "thread append of one step ms | compact ms |",
        "|---:|---:|---:|---:|---:|---:|---:|", *rows, "",
        f"Medians of {args.reps} runs. A session is JSON Lines (`~/.bantam/sessions/<id>.jsonl`): the "
        "autosave after each step appends that step's messages (one fsynced write), so its cost does not "
        "grow with the session (it is about one fsync: compare the thread column, the same append); "
        "the whole rewrite (atomic: temp file, fsync, rename) is paid only by "
        "/clear, a compaction or /save. Load reads every line. Compaction sends the whole conversation "
        "once (tool results clipped) and replaces it with two messages.", "",
        BEFORE])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
