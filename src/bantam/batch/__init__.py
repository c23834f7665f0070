"""`bantam batch TASKS.jsonl -o RESULTS.jsonl --workers N`: many tasks, each an isolated agent.

    bantam batch tasks.jsonl -o results.jsonl --workers 8
    bantam batch tasks.jsonl -o results.jsonl --queue redis://127.0.0.1:6379/0   # with `bantam worker`s

Each task runs in its own process (agent.py) through the one core loop, N at a time; its result
is appended to RESULTS.jsonl (fsynced) as soon as it finishes. A rerun of the same command skips
the tasks that have a result and resumes the ones cut off from their threads, so a batch killed
at any moment loses at most the steps in flight. With `--queue` the tasks go to a Redis stream
and `bantam worker` processes, on any machines, run them (redisq.py); this process collects.
A task's `cwd` is relative to, and confined to, the tasks file's folder (or `--root DIR`); a task
naming another folder, or a line that is not a task, gets a `failure` result and never runs.
"""
from __future__ import annotations

import argparse
import os
import queue
import shlex
import signal
import sys
import threading
import time

from .agent import Children, forget, interrupt, run_threads
from .progress import Progress, summary
from .tasks import Malformed, ResultsFile, Task, fail_malformed, read_tasks, real_root

DEFAULT_WORKERS = 4


def parser() -> argparse.ArgumentParser:
    from ..options import common_options
    p = argparse.ArgumentParser(prog="bantam batch", description="Run many tasks, each as an isolated "
                                "agent; results are appended as they finish, one per task.")
    p.add_argument("tasks", help="JSON Lines: {\"id\", \"task\", \"checks\", \"cwd\", \"model\"} or a string")
    p.add_argument("-o", "--output", required=True, metavar="RESULTS", help="results file (JSON Lines)")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N",
                   help=f"tasks run at the same time (default {DEFAULT_WORKERS})")
    p.add_argument("--queue", metavar="redis://HOST:PORT/DB",
                   help="enqueue on Redis for `bantam worker`s and collect their results")
    p.add_argument("--root", metavar="DIR", help="the folder a task's cwd is relative to and must stay "
                   "inside (default: the tasks file's folder); a task naming another folder fails. "
                   "With --queue each worker uses its own --root")
    return common_options(p)


def main(argv: list[str]) -> int:
    from ..options import flags, load_config
    from ..errors import ConfigError
    args = parser().parse_args(argv)
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    load_config(args)  # bad configuration stops the batch here, not in every task
    if os.path.realpath(args.tasks) == os.path.realpath(args.output):
        raise ConfigError(f"-o {args.output}: the results file cannot be the tasks file")
    tasks = read_tasks(args.tasks)
    # a tasks file may come from elsewhere: its tasks get the folder it is in, unless the user says
    root = real_root(args.root or os.path.dirname(os.path.abspath(args.tasks)))
    results = ResultsFile(args.output)
    signal.signal(signal.SIGTERM, interrupt)  # a stop as clean as Ctrl+C
    started = time.monotonic()
    try:
        if args.queue:
            from .redisq import run_queued
            run_queued(args.queue, tasks, results)
        else:
            run_local(tasks, results, flags(args), args.workers, root)
    except KeyboardInterrupt:
        summary(tasks, results.done, time.monotonic() - started)
        print(resume_hint(argv, tasks, results, bool(args.queue)), file=sys.stderr)
        return 130
    summary(tasks, results.done, time.monotonic() - started)
    # an agent killed from outside (not by us) leaves its task without a result: a rerun finishes it
    return 1 if any(results.done.get(t.key, {"error": "no result"}).get("error") for t in tasks) else 0


def resume_hint(argv: list[str], tasks: list[Task | Malformed], results: ResultsFile, queued: bool) -> str:
    elsewhere = " (the workers go on with the queued ones)" if queued else ""
    return (f"bantam: interrupted; {sum(t.key in results.done for t in tasks)} of {len(tasks)} tasks "
            f"have a result in {results.path}{elsewhere}. To finish the rest, run the same command "
            f"again:\n  bantam batch {shlex.join(argv)}")


def run_local(tasks: list[Task | Malformed], results: ResultsFile, flags: dict[str, str], workers: int,
              root: str) -> None:
    """Run every task without a result, `workers` at a time, each in its folder under `root`,
    appending each result as it comes; a malformed line gets its failure result first."""
    todo: queue.SimpleQueue[Task] = queue.SimpleQueue()
    unfinished = [t for t in tasks if t.key not in results.done]
    children, lock = Children(root), threading.Lock()
    with Progress(len(tasks), len(tasks) - len(unfinished)) as progress:
        pending = fail_malformed(unfinished, results, progress.finished)
        for task in pending:
            todo.put(task)

        def work() -> None:
            while not children.stopping.is_set():
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    return
                record = children.run(task, flags, results.batch)
                if record is not None:
                    with lock:
                        if results.add(record):
                            progress.finished(record)
                    forget(record)
        run_threads(min(workers, len(pending)) or 1, work, children)
