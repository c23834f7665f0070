"""Tasks over Redis: `bantam batch --queue redis://...` enqueues and collects, `bantam worker` runs.

    bantam worker redis://10.0.0.5:6379/0 --concurrency 64  # on each machine, as many as you like
    bantam batch tasks.jsonl -o results.jsonl --queue redis://10.0.0.5:6379/0

Redis holds everything (no broker of bantam's own): the stream `bantam:tasks` read through the
consumer group `bantam-workers`. A task message has the fields `task` (a task object as in
TASKS.jsonl, or plain text) and `reply_to` (a stream; default `bantam:results`); its result goes
to `reply_to` as a message with the fields `id` and `result` (the result object as JSON). So any
service can use a pool of workers: XADD a task, XREAD its reply stream.

Reliable delivery: a worker acknowledges a task only in the same atomic script that writes its
result; while it runs one it renews its claim every third of `--idle-timeout`, and a worker that
died (SIGKILL, a lost machine) stops renewing, so after the idle timeout another worker takes the
task over with XAUTOCLAIM. A result is recorded once per task id and reply stream (a set of done
ids beside it), even when two workers ran the same task.

Whoever can write to the stream is untrusted: messages are read as bytes (so no decoding happens
inside the Redis client, where an error would kill the worker thread and leave the message pending
for the next worker), each goes through `read_message`, and a malformed one is answered with a
`failure` and acknowledged, never retried. A task's `cwd` stays inside the worker's `--root`.

Redis may restart while a batch collects (with its data, or without): workers and the batch
reconnect with back-off. The batch then enqueues again the tasks that have neither a result nor a
place in the queue, and reads its reply stream again from the start; when Redis stays away longer
than `--reconnect-timeout`, it stops with one line, and the same command goes on later.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import BantamError, ConfigError
from ..options import Parser
from .agent import Runner, forget, interrupt, isolation_options, run_threads, runner_for
from .progress import Progress, describe
from .tasks import Malformed, ResultsFile, Task, apply_rates, fail_malformed, failed, rate_options, read_task, real_root

TASKS = "bantam:tasks"            # the stream every worker reads
GROUP = "bantam-workers"          # its consumer group
DEFAULT_REPLY = "bantam:results"  # where a task message without reply_to gets its result
IDLE_TIMEOUT = 60.0               # seconds without a renewed claim before another worker takes a task
MAX_DELIVERIES = 5                # a task that killed this many workers is failed, not retried
DONE_TTL = 7 * 86400              # seconds a finished batch's done-set lingers, to drop late duplicates
RECONNECT_DELAYS = (1, 1, 2, 3, 5, 8)
RECONNECT_TIMEOUT = 300.0         # seconds a batch waits for Redis to come back before it stops

# Both scripts run atomically inside Redis: a kill between two commands cannot split them.
ENQUEUE = """
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 0 and redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
  redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'reply_to', ARGV[3])
  return 1
end
return 0
"""
FINISH = """
local new = redis.call('SADD', KEYS[1], ARGV[1])
if new == 1 then redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'result', ARGV[2]) end
redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
redis.call('XDEL', KEYS[3], ARGV[4])
return new
"""


class QueueError(BantamError):
    """Redis could not be reached or refused a command."""


def connect(url: str, threads: int = 1) -> Any:
    """A client for `url` that answers PING, with the consumer group in place, whose connection
    pool serves `threads` threads at once: each consumer blocks one connection in XREADGROUP, and
    the leases' renewer takes one more (redis-py's default pool of 100 made a worker at
    --concurrency 128 fail commands with "Too many connections", one of them a finished task's
    answer)."""
    try:
        import redis
    except ModuleNotFoundError:
        raise ConfigError("--queue and `bantam worker` need the redis client: "
                          "pip install 'bantam[redis]'") from None
    try:
        # bytes, decoded by read_message: a field that is not UTF-8 is that message's failure
        client = redis.Redis.from_url(url, decode_responses=False, socket_connect_timeout=10,
                                      health_check_interval=30, max_connections=2 * threads + 8)
    except ValueError as e:
        raise ConfigError(f"queue URL {url!r}: {e}") from None
    try:
        client.ping()
        ensure_group(client)
    except redis.RedisError as e:
        raise QueueError(f"cannot use Redis at {url}: {e}") from None
    return client


def ensure_group(client: Any) -> None:
    """Create the stream and its group (from the start, so tasks enqueued earlier are seen)."""
    import redis
    try:
        client.xgroup_create(TASKS, GROUP, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


# --- the batch side --------------------------------------------------------------------------------

def run_queued(url: str, tasks: list[Task | Malformed], results: ResultsFile, as_json: bool = False,
               patience: float = RECONNECT_TIMEOUT) -> None:
    """Enqueue the tasks without a result (once, however often this is rerun) and append the
    results the workers send, until every task has one. A malformed line fails here. When Redis
    goes away, wait for it up to `patience` seconds, then do it all again from the start."""
    import redis
    client = connect(url)
    reply = f"bantam:results:{results.batch}"  # this batch's own stream; a rerun finds it again
    pending = [t for t in tasks if t.key not in results.done]
    stopped = f"the results so far are in {results.path}, and the same command collects the rest once Redis is back"
    try:
        with Progress(len(tasks), len(tasks) - len(pending), as_json=as_json) as progress:
            try:
                runnable = fail_malformed(pending, results, progress.finished)
                missing = {t.key for t in runnable}

                def exchange() -> None:
                    ensure_group(client)  # a Redis restarted without its data has neither group nor tasks
                    enqueue_all(client, [t for t in runnable if t.key in missing], reply)
                    collect(client, reply, missing, results, progress)
                riding_out(exchange, client, url, patience, progress.note, stopped)
            finally:
                results.flush()

        def tidy() -> None:
            client.delete(reply, f"{reply}:enqueued")  # all on disk now
            client.expire(f"{reply}:done", DONE_TTL)
        riding_out(tidy, client, url, patience, progress.note, stopped)
    except redis.RedisError as e:
        raise QueueError(f"Redis at {url}: {e}; {stopped}") from None


def riding_out(work: Callable[[], None], client: Any, url: str, patience: float,
               note: Callable[[str], None], stopped: str) -> None:
    """Run `work`; when Redis goes away meanwhile (a restart, a lost link), wait until it answers
    again and run `work` again from the start, or raise QueueError after `patience` seconds."""
    import redis
    while True:
        try:
            return work()
        except (redis.ConnectionError, redis.TimeoutError) as e:  # loading its data is a ConnectionError
            note(f"bantam batch: Redis at {url}: {e}; waiting up to {patience:g} s for it to come back")
            if not answers_within(client, patience):
                raise QueueError(f"Redis at {url} has been away for over {patience:g} s ({e}); {stopped}") from None
            note(f"bantam batch: Redis at {url} is back")


def answers_within(client: Any, patience: float) -> bool:
    """Whether Redis answers a PING within `patience` seconds, asked with back-off."""
    import redis
    deadline = time.monotonic() + patience
    for attempt in itertools.count():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)], left))
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            pass
    return False


def enqueue_all(client: Any, tasks: list[Task], reply: str) -> None:
    """Add each task to the queue unless it was added before or has a result (both checked in
    Redis itself, so enqueueing again after Redis lost its data adds only what was lost)."""
    enqueue = client.register_script(ENQUEUE)
    with client.pipeline(transaction=False) as pipe:
        for task in tasks:
            enqueue(keys=[f"{reply}:enqueued", TASKS, f"{reply}:done"],
                    args=[task.key, json.dumps(task.to_json()), reply], client=pipe)
        pipe.execute()


def collect(client: Any, reply: str, missing: set[str], results: ResultsFile, progress: Progress) -> None:
    """Append each result from the reply stream that a task of this batch still lacks."""
    last = "0"  # from the start: results that came while no batch was collecting count too
    while missing and results.error is None:  # the file cannot be written: flush says so
        for _, entries in client.xread({reply: last}, count=500, block=1000) or []:
            for last, fields in entries:  # noqa: B007 (`last` is where the next XREAD starts)
                try:
                    record = json.loads(fields.get(b"result") or b"")
                except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                    continue  # not a worker's message
                key = str(record.get("id")) if isinstance(record, dict) else None
                if key in missing and results.add(record, progress.finished):
                    missing.discard(key)


# --- the worker ------------------------------------------------------------------------------------

def worker_parser() -> argparse.ArgumentParser:
    from ..options import common_options
    p = Parser(prog="bantam worker", description="Run bantam tasks from a Redis "
                                f"stream ({TASKS}, group {GROUP}) and send each result to its reply stream.")
    p.add_argument("url", metavar="redis://HOST:PORT/DB")
    p.add_argument("--concurrency", "--workers", dest="workers", type=int, default=1, metavar="N",
                   help="tasks this worker runs at the same time, each claimed only when it can start "
                        "(default 1)")
    isolation_options(p)
    rate_options(p)
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT, metavar="S",
                   help=f"seconds before a dead worker's task goes to another (default {IDLE_TIMEOUT:g})")
    p.add_argument("--root", metavar="DIR", default=".", help="the folder a task's cwd is relative to "
                   "and must stay inside (default: the folder the worker was started in); a task "
                   "naming another folder (absolute, '..', a symlink out) gets a failure and never runs")
    return common_options(p)


def worker_main(argv: list[str]) -> int:
    from ..options import flags, load_config
    args = worker_parser().parse_args(argv)
    if args.workers < 1 or args.idle_timeout <= 0:
        raise ConfigError("--concurrency must be at least 1 and --idle-timeout above 0")
    load_config(args)
    apply_rates(args)
    root = real_root(args.root)
    client = connect(args.url, args.workers)
    name = f"{socket.gethostname()}-{os.getpid()}"
    numbers = iter(range(args.workers))
    running = runner_for(args, root, flags(args), Path(os.getcwd()))
    leases = Leases(client, args.idle_timeout / 3)
    signal.signal(signal.SIGTERM, interrupt)
    print(f"bantam worker {name}: {args.workers} at a time from {TASKS} on {args.url}", file=sys.stderr)

    def work() -> None:
        Consumer(client, f"{name}-{next(numbers)}", int(args.idle_timeout * 1000), running, leases).serve()
    try:
        run_threads(args.workers, work, running)
    except KeyboardInterrupt:
        print(f"bantam worker {name}: stopped; its unfinished tasks go to another worker after "
              f"{args.idle_timeout:g} s", file=sys.stderr)
        return 130
    # the threads end only when stopped: here every one died of an error (its traceback is above)
    print(f"bantam worker {name}: every worker thread stopped on an error", file=sys.stderr)
    return 1


class Consumer:
    """One member of the consumer group: claims a task only when it can start it, runs it, answers."""

    def __init__(self, client: Any, name: str, idle_ms: int, runner: Runner, leases: "Leases"):
        self.client, self.name, self.idle_ms, self.runner, self.leases = client, name, idle_ms, runner, leases
        self.finish = client.register_script(FINISH)
        self.cursor = "0-0"

    def serve(self) -> None:
        import redis
        failures = 0
        while not self.runner.stopping.is_set():
            try:
                message = self.next_message()
                if message is not None:
                    self.handle(*message)
                failures = 0
            except redis.RedisError as e:  # Redis restarted or unreachable: wait and try again
                delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                failures += 1
                print(f"bantam worker {self.name}: Redis: {e}; again in {delay} s", file=sys.stderr)
                self.runner.stopping.wait(delay)
                try:
                    ensure_group(self.client)  # a Redis restarted without its data has no group
                except redis.RedisError:
                    pass

    def next_message(self) -> tuple[bytes, dict[bytes, bytes], bool] | None:
        """A task whose worker stopped renewing its claim, else a new one (waiting up to 1 s);
        and whether it was taken over (delivered before)."""
        # the cursor walks the whole pending list over successive calls (each call looks at a few)
        self.cursor, claimed = self.client.xautoclaim(TASKS, GROUP, self.name, self.idle_ms, self.cursor,
                                                      count=1)[:2]
        if claimed:
            return (*claimed[0], True)
        got = self.client.xreadgroup(GROUP, self.name, {TASKS: ">"}, count=1, block=1000)
        return (*got[0][1][0], False) if got and got[0][1] else None

    def handle(self, message_id: bytes, fields: dict[bytes, bytes], taken_over: bool = False) -> None:
        reply = fields.get(b"reply_to") or DEFAULT_REPLY.encode()  # a stream name is any bytes
        task = read_message(message_id.decode("ascii"), fields)  # Redis makes ids of digits and '-'
        if isinstance(task, Malformed):  # answered, so the sender hears why, and never retried
            self.answer(message_id, reply, failed(task, task.error))
            print(f"bantam worker {self.name}: {task.error}", file=sys.stderr)
            return
        # a new message (">") is on its first delivery: only one taken over needs the count
        deliveries = self.deliveries(message_id) if taken_over else 1
        record: dict[str, Any] | None
        if deliveries > MAX_DELIVERIES:
            record = failed(task, f"given up after {deliveries - 1} deliveries: every worker that "
                                  "took this task stopped before it finished")
        else:
            with self.leases.held(message_id, self.name):
                record = self.runner.run(task, reply.decode())  # UTF-8: read_message checked
            if record is None:
                return  # stopped: not acknowledged, so another worker takes it over
        record["worker"] = self.name
        self.answer_surely(message_id, reply, record)
        forget(record)
        print(f"bantam worker {self.name}: {describe(record)}", file=sys.stderr)

    def answer_surely(self, message_id: bytes, reply: bytes, record: dict[str, Any]) -> None:
        """Answer a task that ran, trying again while Redis is away: given up, the task would wait
        for the idle timeout and another worker (which finds the result saved beside its thread)."""
        import redis
        for delay in (*RECONNECT_DELAYS, None):
            try:
                return self.answer(message_id, reply, record)
            except redis.RedisError as e:
                if delay is None or self.runner.stopping.is_set():
                    raise
                print(f"bantam worker {self.name}: Redis: {e}; answering again in {delay} s", file=sys.stderr)
                self.runner.stopping.wait(delay)
        return None

    def answer(self, message_id: bytes, reply: bytes, record: dict[str, Any]) -> None:
        self.finish(keys=[reply + b":done", reply, TASKS],
                    args=[str(record.get("id")), json.dumps(record, ensure_ascii=False), GROUP, message_id])

    def deliveries(self, message_id: bytes) -> int:
        pending = self.client.xpending_range(TASKS, GROUP, min=message_id, max=message_id, count=1)
        return int(pending[0]["times_delivered"]) if pending else 1


def read_message(message_id: str, fields: dict[bytes, bytes]) -> Task | Malformed:
    """The task in a message (its `task` field read by read_task, the id defaulting to the message
    id), or Malformed: no `task` field, or any field name or value that is not UTF-8."""
    where = f"message {message_id}"
    for name, value in fields.items():
        try:
            name.decode("utf-8"), value.decode("utf-8")
        except UnicodeDecodeError:
            return Malformed(message_id, f"{where}: field {name!r} is not valid UTF-8")
    raw = fields.get(b"task")
    if raw is None:
        return Malformed(message_id, f"{where}: no 'task' field")
    return read_task(raw, message_id, where)


class Leases:
    """The tasks this worker runs, each claimed again every `every` seconds so its idle time stays
    low and no other worker takes it over; when this worker dies, the renewals stop. One thread
    renews them all, in one round trip (a thread a task cost a start and its switches each time)."""

    def __init__(self, client: Any, every: float):
        self.client, self.every = client, every
        self.running: dict[bytes, str] = {}  # message id -> the consumer that runs it
        threading.Thread(target=self.renew, name="leases", daemon=True).start()

    @contextmanager
    def held(self, message_id: bytes, consumer: str) -> Iterator[None]:
        self.running[message_id] = consumer  # one step under the GIL, as are the pop and the copy
        try:
            yield
        finally:
            self.running.pop(message_id, None)

    def renew(self) -> None:
        import redis
        while True:
            time.sleep(self.every)
            running = self.running.copy()  # a copy: the consumers add and drop tasks meanwhile
            if not running:
                continue
            pipe = self.client.pipeline(transaction=False)
            for message_id, consumer in running.items():
                pipe.xclaim(TASKS, GROUP, consumer, 0, [message_id], justid=True)
            try:
                pipe.execute()
            except redis.RedisError:
                pass  # Redis is away; a task may go to another worker, whose result counts once
