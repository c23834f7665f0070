"""`bantam batch TASKS.jsonl -o RESULTS.jsonl --workers N`: many tasks, each an isolated agent.

    bantam batch tasks.jsonl -o results.jsonl --workers 8
    bantam batch tasks.jsonl -o results.jsonl --queue redis://127.0.0.1:6379/0   # with `bantam worker`s

Each task runs as a session of this process (agent.py: its own folder, thread, tool budget and
log; the configuration and the HTTP connection pool shared) through the one core loop, N at a
time (`--isolate process`: each in an agent process instead); its result is appended to
RESULTS.jsonl (fsynced) as soon as it finishes. A rerun of the same command skips
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
import time
from pathlib import Path
from typing import Any

from .agent import Runner, forget, interrupt, check_runner, isolation_options, run_threads, runner_for
from .progress import Progress, summary
from .redisq import RECONNECT_TIMEOUT
from .tasks import Malformed, ResultsFile, Task, apply_rates, fail_malformed, rate_options, read_tasks, real_root

DEFAULT_WORKERS = 4


def parser() -> argparse.ArgumentParser:
    from ..options import Parser, common_options
    p = Parser(prog="bantam batch", description="Run many tasks, each as an isolated "
                                "agent; results are appended as they finish, one per task.")
    p.add_argument("tasks", help="JSON Lines: {\"id\", \"task\", \"checks\", \"cwd\", \"model\"} or a string")
    p.add_argument("-o", "--output", required=True, metavar="RESULTS", help="results file (JSON Lines)")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N",
                   help=f"tasks run at the same time (default {DEFAULT_WORKERS})")
    isolation_options(p)
    p.add_argument("--json", action="store_true", help="progress as JSON lines on stdout (one per "
                   "finished task, then the summary) instead of the bar and the table")
    rate_options(p)
    p.add_argument("--queue", metavar="redis://HOST:PORT/DB",
                   help="enqueue on Redis for `bantam worker`s and collect their results")
    p.add_argument("--reconnect-timeout", type=float, default=RECONNECT_TIMEOUT, metavar="S",
                   help="with --queue: seconds to wait for Redis to come back when it goes away (a "
                        f"restart), before the batch stops (default {RECONNECT_TIMEOUT:g})")
    p.add_argument("--retry-failed", action="store_true", help="run again the tasks whose result is not "
                   "success (each in a fresh thread); their new results are appended and count from then on")
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
    if not args.reconnect_timeout > 0:  # NaN included
        raise ConfigError(f"--reconnect-timeout must be above 0, got {args.reconnect_timeout:g}")
    cfg = load_config(args)  # bad configuration stops the batch here, not in every task
    apply_rates(args)
    if args.retry_failed and args.queue:
        raise ConfigError("--retry-failed runs the failed tasks on this machine; without --queue")
    if os.path.realpath(args.tasks) == os.path.realpath(args.output):
        raise ConfigError(f"-o {args.output}: the results file cannot be the tasks file")
    tasks = read_tasks(args.tasks)
    # a tasks file may come from elsewhere: its tasks get the folder it is in, unless the user says
    root = real_root(args.root or os.path.dirname(os.path.abspath(args.tasks)))
    check_runner(args)  # before the results file is made
    results = ResultsFile(args.output)
    if args.retry_failed:
        results.retry_failed(tasks)
    before = sum(t.key in results.done for t in tasks)
    if before == len(tasks):  # a rerun of a finished batch: nothing runs, nothing to time
        print(finished_note(tasks, results), file=sys.stderr)
    signal.signal(signal.SIGTERM, interrupt)  # a stop as clean as Ctrl+C
    started, cpu = time.monotonic(), time.process_time()
    try:
        if before == len(tasks):
            pass
        elif args.queue:
            from .redisq import run_queued
            run_queued(args.queue, tasks, results, args.json, args.reconnect_timeout)
        else:
            run_local(tasks, results, runner_for(args, root, flags(args), Path(os.getcwd())),
                      args.workers, args.json)
    except KeyboardInterrupt:
        summary(tasks, results.done, time.monotonic() - started, as_json=args.json, before=before)
        print(resume_hint(argv, tasks, results, bool(args.queue)), file=sys.stderr)
        return 130
    wall = time.monotonic() - started
    summary(tasks, results.done, wall, as_json=args.json, before=before, cost=batch_cost(cfg, tasks, results.done))
    if not args.queue and args.isolate == "session" and args.processes == 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        hint = pace_hint(time.process_time() - cpu, wall, cores)
        if hint:
            print(hint, file=sys.stderr)
    # an agent killed from outside (not by us) leaves its task without a result: a rerun finishes it
    return 1 if any(results.done.get(t.key, {"error": "no result"}).get("error") for t in tasks) else 0


def finished_note(tasks: list[Task | Malformed], results: ResultsFile) -> str:
    """What a rerun of a finished batch says instead of running anything."""
    failed = sum(results.done[t.key].get("status") != "success" for t in tasks)
    again = f"; {failed} did not succeed: --retry-failed runs them again" if failed else ""
    return f"bantam batch: nothing to do: all {len(tasks)} tasks have a result in {results.path}{again}"


def batch_cost(cfg: Any, tasks: list[Task | Malformed], done: dict[str, dict[str, Any]]) -> float | None:
    """What the results' tokens cost in dollars at the prices the endpoint lists for each model,
    as a one-shot run's usage line counts them (providers.ModelFacts.cost); None when it lists
    none for a model that was used (a total without it would mislead), or for a local model."""
    from ..events import Usage
    from ..providers import ModelFacts, make_provider
    spent: dict[str, Usage] = {}
    for task in tasks:
        usage = (done.get(task.key) or {}).get("usage") or {}
        tokens = Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
        if tokens.prompt_tokens or tokens.completion_tokens:
            spent.setdefault(getattr(task, "model", "") or cfg.model, Usage()).add(tokens)
    if not spent or cfg.provider == "local":
        return None
    total = 0.0
    for model, usage in spent.items():
        model_cfg = cfg.with_values(model=model)
        provider = make_provider(model_cfg)
        cost = ModelFacts(provider, model_cfg).cost(usage)  # asks the model list, as a one-shot run does
        client = provider.http_client()
        if client is not None:
            client.close()
        if cost is None:
            return None
        total += cost
    return total


def pace_hint(cpu: float, wall: float, cores: int) -> str:
    """What to say when this process, not the model, set the batch's pace: its threads computed
    nearly all along (one interpreter runs one at a time), while the machine has other cores.
    A short batch says nothing: its start is most of its CPU."""
    if cores < 2 or wall < 10 or cpu < 0.85 * wall:
        return ""
    return (f"bantam: this process kept {cpu / wall:.0%} of a core busy over the batch's {wall:.0f} s: its own "
            f"CPU set the pace, not the model; --processes P spreads the tasks over P agent processes (this "
            f"machine has {cores} cores)")


def resume_hint(argv: list[str], tasks: list[Task | Malformed], results: ResultsFile, queued: bool) -> str:
    elsewhere = " (the workers go on with the queued ones)" if queued else ""
    return (f"bantam: interrupted; {sum(t.key in results.done for t in tasks)} of {len(tasks)} tasks "
            f"have a result in {results.path}{elsewhere}. To finish the rest, run the same command "
            f"again:\n  bantam batch {shlex.join(argv)}")


def run_local(tasks: list[Task | Malformed], results: ResultsFile, runner: Runner, workers: int,
              as_json: bool = False) -> None:
    """Run every task without a result, `workers` at a time, appending each result as it comes;
    a malformed line gets its failure result first."""
    todo: queue.SimpleQueue[Task] = queue.SimpleQueue()
    unfinished = [t for t in tasks if t.key not in results.done]
    with Progress(len(tasks), len(tasks) - len(unfinished), as_json=as_json) as progress:
        pending = fail_malformed(unfinished, results, progress.finished)
        for task in pending:
            todo.put(task)

        def on_disk(record: dict) -> None:  # in the results file's writer thread
            progress.finished(record)
            forget(record)

        def work() -> None:
            while not runner.stopping.is_set() and results.error is None:
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    return
                progress.started()
                record = runner.run(task, results.namespace(task.key))
                if record is None:
                    progress.dropped()
                elif not results.add(record, on_disk):  # written by the writer thread: no wait here
                    progress.dropped()
                    forget(record)
        try:
            run_threads(min(workers, len(pending)) or 1, work, runner)
        finally:
            results.flush()
