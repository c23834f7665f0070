"""Batch tasks as sessions: many in this process (the default), or in agent processes.

    runner = Sessions(root, flags, origin)        # bantam batch, bantam worker
    record = runner.run(task, namespace)          # in any thread; None: stopped, run it again
    runner = Agents(root, flags, 1, workers)      # --isolate process: the same, one process a task
    runner = Agents(root, flags, workers // P, P) # --processes P: the sessions spread over P processes

`Sessions` runs each task as a session of this process, in the calling thread: the configuration
is loaded once (per model a task names) and shared; each worker thread keeps its provider (its HTTP
connections) from one task to the next; nothing else is shared. Each task has its own folder (a
value: its `cwd`, confined to the batch's or worker's root; never chdir), its thread
`batch-<hash>` (every complete step on disk, so a task cut off by a kill resumes where it
stopped), tool budget, cancel flag and log (`<thread>.log`);
its commands run in their own process groups and die with it. The result is saved beside the thread
before it is reported, so a result lost on the way to RESULTS.jsonl is reported again without
running the task again. A task that raises costs itself only (a failure result, the traceback in its
log). `stop()` (Ctrl+C, SIGTERM) sets every task's cancel flag and shuts the sockets of the
requests in flight: each thread unwinds at once, leaving its thread as it was after the last
complete step.

`Agents` runs the tasks in agent processes (`python -m bantam.batch K RPM TPM`), each a `Sessions` of
its own serving K tasks at once: one a task for tasks that may crash the interpreter (a native
extension a tool loads, memory a task may exhaust), or the worker threads' share for a batch
that needs more cores than one interpreter computes on. An agent watches its stdin: when the
caller dies (even by SIGKILL) or stops it, the pipe closes and the agent stops its tasks the
same way.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Protocol

from ..errors import BantamError, ConfigError
from ..fsutil import private_dir, write_all
from ..providers.cancel import Stopper
from ..providers.pace import limit_all, pace_for, release_all, tell_holds
from ..slots import Slots
from .tasks import Result, Task, failed, parse_task, task_folder

GRACE = 10.0   # seconds an orphaned child has to stop by itself before it exits hard
RECYCLE = 100  # tasks one agent process serves before a fresh one takes over (bounds any leak)
SLOTS = 2      # sessions that compute at once (slots.py): one was alike at 256 and slower at 64, four slower at 256


def thread_id(namespace: str, key: str) -> str:
    """The task's thread: the same task of the same batch always finds the same one."""
    return "batch-" + hashlib.md5(f"{namespace}\0{key}".encode()).hexdigest()[:20]


def thread_file(tid: str, suffix: str) -> Path:
    from ..transcripts import threads_dir
    return threads_dir() / f"{tid}{suffix}"


def forget(record: dict[str, Any]) -> None:
    """The result is on record (RESULTS.jsonl, or the reply stream): drop the copy kept for a
    crash; the thread and its log stay, to read or continue."""
    tid = str(record.get("thread") or "")
    if tid:
        thread_file(tid, ".result.json").unlink(missing_ok=True)


class Runner(Protocol):
    """What a batch or a worker drives: `Sessions` or `Agents`."""
    stopping: threading.Event

    def run(self, task: Task, namespace: str) -> dict[str, Any] | None: ...

    def stop(self) -> None: ...

    def wait(self) -> None: ...


class Sessions:
    """Tasks as sessions of this process; `run` from as many threads as tasks should run at once."""

    def __init__(self, root: str, flags: dict[str, str], origin: Path) -> None:
        self.root, self.flags, self.origin = root, flags, origin
        self.stopper = Stopper()
        self.stopping = self.stopper.event
        self.lock = threading.Lock()
        self.configs: dict[str, Any] = {}
        self.models: dict[tuple[str, int], tuple[Any, Any]] = {}
        self.cancels: set[threading.Event] = set()
        self.slots = Slots(SLOTS)

    def run(self, task: Task, namespace: str, log: IO[str] | None = None) -> dict[str, Any] | None:
        """The task's result record (saved beside its thread first), or None when it was stopped
        before its end. Its traces go to `log` (default: the thread's log file)."""
        tid = thread_id(namespace, task.key)
        private_dir(thread_file(tid, "").parent)
        cancel = threading.Event()
        # No lock on this path, taken by every task of every thread: 256 threads queued on one
        # (a holder preempted inside it stalls them all). A set's add and discard are atomic,
        # and the order makes the stop race-free: this task is added before it looks at the
        # flag, and stop() sets the flag before it copies the set, so either stop() sees the
        # task or the task sees the flag.
        self.cancels.add(cancel)
        try:
            if self.stopping.is_set():
                return None
            # a leftover agent of a killed run finishes first (the lock is on the task's log, a
            # file it has anyway: a file made per task costs up to a millisecond of the kernel's
            # CPU after many deletions); then a slot (slots.py) to compute in
            with locked(thread_file(tid, ".log")) as fd, self.slots.held():
                saved = saved_result(tid)
                if saved is not None:
                    return saved
                if log is not None:
                    return self.answer(task, tid, log, cancel)
                # buffering=1 (lines): no isatty probe of the file, and a line is one write
                with open(fd, "a", buffering=1, encoding="utf-8", closefd=False) as own:
                    return self.answer(task, tid, own, cancel)
        finally:
            self.cancels.discard(cancel)

    def answer(self, task: Task, tid: str, log: IO[str], cancel: threading.Event) -> dict[str, Any] | None:
        started = time.monotonic()
        try:
            cfg, provider = self.model(task.model)
            record = answer_task(task, cfg, provider, tid, enter(self.root, task.cwd), log, cancel, started)
        except KeyboardInterrupt:  # stopped: the thread keeps every complete step
            return None
        except (BantamError, OSError) as e:  # bad configuration, a cwd missing or outside: this task fails alone
            why = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else str(e)
            record = failed(task, why, time.monotonic() - started, tid)
        except Exception as e:  # a bug costs this task, not the others; its log has the traceback
            traceback.print_exc(file=log)
            record = failed(task, f"{type(e).__name__}: {e}; see {getattr(log, 'name', 'its log')}",
                            time.monotonic() - started, tid)
        if cancel.is_set() or self.stopping.is_set():
            return None  # cut off: whatever it said last is not its result
        save_result(tid, record)
        return record

    def model(self, name: str) -> tuple[Any, Any]:
        """The configuration and provider for tasks naming `name` ("" for the configured model):
        the configuration loaded once, as from `origin` (where the batch started); the provider
        (its HTTP client and connections) one per worker thread, kept from task to task. One
        client shared by 256 threads lost about 1 request in 1,000 to a race in httpcore's
        connection pool (a connection closed by one thread just after another was given it: the
        request hung until the timeout, then "Bad file descriptor"), and its pool, grown past the
        threads' need, was scanned on every request."""
        from .. import session
        from ..providers import make_provider
        key = (name, threading.get_ident())
        found = self.models.get(key)  # each thread's own entry, once made: no lock to read it
        if found is not None:
            return found
        with self.lock:
            if key not in self.models:
                if name not in self.configs:
                    self.configs[name] = session.load_config({**self.flags, **({"model": name} if name else {})},
                                                             self.origin)
                provider = make_provider(self.configs[name])
                self.stopper.watch(provider)
                self.models[key] = (self.configs[name], provider)
            return self.models[key]

    def stop(self) -> None:
        """Every task stops at once: its cancel flag (commands killed at their next poll, the
        loop stops before its next step) and the sockets of the requests in flight."""
        self.stopper.event.set()
        cancels = list(self.cancels)  # after the flag: see run()
        for cancel in cancels:
            cancel.set()
        self.stopper.set()
        release_all()  # a task waiting out a rate limit stops waiting

    def wait(self) -> None:
        """Nothing outlives the threads: each task's commands die with its cancel flag."""


class AgentProcess:
    """One agent process (`python -m bantam.batch K RPM TPM`) that runs up to K tasks at once as
    sessions of its own, within its share of the batch's rate limits, answering each request line
    with its result line, in the order they finish."""

    def __init__(self, sessions: int, rates: tuple[int, int],
                 on_hold: Callable[[dict[str, Any], "AgentProcess"], None]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bantam.batch", str(sessions), *map(str, rates)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lock = threading.Lock()  # one request line at a time on its stdin
        self.pending: dict[int, tuple[Task, str, float, queue.SimpleQueue[dict[str, Any] | None]]] = {}
        self.numbers = itertools.count()
        self.served = 0
        self.ended = False
        threading.Thread(target=self.read, args=(on_hold,), daemon=True).start()

    def worn(self, recycle: bool) -> bool:
        """Ended, or (when agents are recycled) done with its RECYCLE tasks: replace it."""
        return self.ended or (recycle and self.served >= RECYCLE)

    def run(self, task: Task, request: dict[str, Any]) -> dict[str, Any] | None:
        """The task's result record; None when the agent was stopped first (the task must run
        again); a failure when the agent died without answering."""
        seq = next(self.numbers)
        tid = thread_id(request["namespace"], task.key)
        answer: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.pending[seq] = (task, tid, time.monotonic(), answer)
        self.send({**request, "seq": seq})  # a closed stdin: the reader settles the task at the end
        if self.ended:  # ended before this task was pending: the reader may not have seen it
            self.settle(seq)
        return answer.get()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None  # started with the pipe
        try:
            with self.lock:
                self.proc.stdin.write(json.dumps(message).encode() + b"\n")
                self.proc.stdin.flush()  # stdin stays open: its end is the signal to stop
        except (BrokenPipeError, ValueError, OSError):  # closed by stop(), or the agent died
            pass

    def read(self, on_hold: Callable[[dict[str, Any], "AgentProcess"], None]) -> None:
        """Hand each result line to its task; pass a rate limit's hold on; at the end, settle
        the tasks still pending."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "hold" in message:
                on_hold(message, self)
                continue
            entry = self.pending.pop(message.get("seq"), None)
            if entry is not None:
                entry[-1].put(message.get("record"))
        self.proc.wait()
        self.ended = True  # before the pending are settled: see run()
        for seq in list(self.pending):
            self.settle(seq)

    def settle(self, seq: int) -> None:
        """A task the ended agent will not answer: stopped (None), or a failure when it died."""
        entry = self.pending.pop(seq, None)
        if entry is None:
            return
        task, tid, started, answer = entry
        code = self.proc.wait()
        if code in (130, -signal.SIGINT, -signal.SIGKILL, -signal.SIGTERM):
            answer.put(None)
        else:
            answer.put(failed(task, f"the agent process exited with code {code} without a result; "
                                    f"see {thread_file(tid, '.log')}", time.monotonic() - started, tid))

    def close(self) -> None:
        """Tell the agent to stop: close its stdin (a busy one interrupts its tasks, an idle one ends)."""
        try:
            if self.proc.stdin is not None:
                with self.lock:
                    self.proc.stdin.close()
        except (OSError, ValueError):
            pass


class Agents:
    """Tasks in agent processes, for one of two reasons:

    - `--isolate process` (per_agent 1): each worker thread drives an agent of its own that runs
      one task at a time, so a task that crashes the interpreter (a native extension a tool loads,
      memory it exhausts) costs only itself; the agent is replaced every RECYCLE tasks.
    - `--processes P` (per_agent N/P): the worker threads are spread over P agents that each run
      their share as sessions. One interpreter computes on one core at a time (its GIL), so a
      batch of hundreds of fast tasks needs more than one to use the machine.

    Each worker thread keeps its agent (Python and bantam load once, not per task); an agent that
    ended is replaced on its thread's next task. A rate limit one agent meets (a 429's hold) is
    passed on to all of them, and --rpm/--tpm are shared out among them, so the batch keeps one
    pace per endpoint across its processes."""

    def __init__(self, root: str, flags: dict[str, str], per_agent: int, agents: int,
                 rates: tuple[int, int] = (0, 0)) -> None:
        self.root, self.flags, self.per_agent = root, flags, per_agent
        self.shares = [(share(rates[0], agents, place), share(rates[1], agents, place)) for place in range(agents)]
        self.lock = threading.Lock()
        self.live: dict[int, AgentProcess] = {}
        self.stopping = threading.Event()
        self.local = threading.local()
        self.places = itertools.count()

    def run(self, task: Task, namespace: str) -> dict[str, Any] | None:
        place = getattr(self.local, "place", None)
        if place is None:
            place = self.local.place = next(self.places) // self.per_agent
        agent = self.live.get(place)  # no lock on every task: only to start or replace one
        if agent is None or agent.worn(self.per_agent == 1):
            agent = self.start(place)
        agent.served += 1
        request = {"task": task.to_json(), "flags": self.flags, "namespace": namespace, "root": self.root}
        return agent.run(task, request)

    def start(self, place: int) -> AgentProcess:
        with self.lock:
            old = self.live.get(place)
            if old is not None and not old.worn(self.per_agent == 1):
                return old  # another thread of this place started it meanwhile
            if old is not None:
                old.close()
            agent = self.live[place] = AgentProcess(self.per_agent, self.shares[place % len(self.shares)], self.hold)
        if self.stopping.is_set():
            agent.close()
        return agent

    def hold(self, message: dict[str, Any], origin: AgentProcess) -> None:
        """One agent met a rate limit: every other agent holds that endpoint too."""
        for agent in list(self.live.values()):
            if agent is not origin and not agent.ended:
                agent.send({"hold": message["hold"], "url": message.get("url", "")})

    def stop(self) -> None:
        """Close every agent's stdin: a busy one interrupts its tasks, an idle one just ends."""
        self.stopping.set()
        for agent in list(self.live.values()):
            agent.close()

    def wait(self) -> None:
        """Wait for every agent to end (they end by themselves once stopped)."""
        deadline = time.monotonic() + GRACE + 5
        for agent in list(self.live.values()):
            try:
                agent.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                agent.proc.kill()


def share(rate: int, agents: int, place: int) -> int:
    """Agent process `place`'s part of a per-minute limit shared by `agents` (0: no limit)."""
    return rate // agents + (place < rate % agents) if rate else 0


def isolation_options(p: Any) -> None:
    """--isolate and --processes, for `bantam batch` and `bantam worker`."""
    p.add_argument("--isolate", choices=("session", "process"), default="session",
                   help="session (default): every task a session of this process (or of --processes); "
                        "process: each task in an agent process of its own (for tasks that may crash "
                        "the interpreter)")
    p.add_argument("--processes", type=int, default=1, metavar="P",
                   help="spread the sessions over P agent processes (default 1: this one), for "
                        "hundreds of fast tasks at once on a machine with P cores")


def runner_for(args: Any, root: str, flags: dict[str, str], origin: Path) -> Runner:
    """The runner the command line asks for, checked first (ConfigError: one line, nothing runs)."""
    check_runner(args)
    return runner(args.isolate, root, flags, origin, args.workers, args.processes, (args.rpm, args.tpm))


def runner(isolate: str, root: str, flags: dict[str, str], origin: Path, workers: int = 1,
           processes: int = 1, rates: tuple[int, int] = (0, 0)) -> Runner:
    """`--isolate session` (the default): the tasks as sessions of this process, or with
    `--processes P` of P agent processes; `--isolate process`: each task in an agent of its own."""
    per_agent, agents = layout(isolate, workers, processes)
    return Agents(root, flags, per_agent, agents, rates) if agents else Sessions(root, flags, origin)


def layout(isolate: str, workers: int, processes: int) -> tuple[int, int]:
    """(tasks each agent process runs at once, agent processes); (0, 0): all in this process."""
    if isolate == "process":
        return 1, workers
    if processes > 1 and workers > 1:
        per_agent = -(-workers // processes)
        return per_agent, -(-workers // per_agent)
    return 0, 0


def check_runner(args: Any) -> None:
    """--processes and --rpm/--tpm that cannot be honoured: one line, before anything runs."""
    isolate, workers, processes, rates = args.isolate, args.workers, args.processes, (args.rpm, args.tpm)
    if processes < 1:
        raise ConfigError(f"--processes must be at least 1, got {processes}")
    if isolate == "process" and processes > 1:
        raise ConfigError("--processes spreads sessions over processes; --isolate process already "
                          "gives each task one of its own: use one or the other")
    agents = layout(isolate, workers, processes)[1]
    for name, rate in (("--rpm", rates[0]), ("--tpm", rates[1])):
        if 0 < rate < agents:
            raise ConfigError(f"{name} {rate} is shared among {agents} agent processes and cannot give "
                              f"each one; raise it, or run fewer processes")


def interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: stop as cleanly as on Ctrl+C."""
    raise KeyboardInterrupt


def run_threads(count: int, work: Callable[[], None], runner: Runner) -> None:
    """Run `work` in `count` threads until all return. On Ctrl+C (or SIGTERM made one), stop the
    runner, let the threads see it, and raise KeyboardInterrupt."""
    threads = [threading.Thread(target=work, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short waits, so Ctrl+C is seen at once
        runner.stop()  # the idle agents end
        runner.wait()
    except KeyboardInterrupt:
        runner.stop()
        deadline = time.monotonic() + GRACE + 5
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        runner.wait()
        raise


# --- the agent process (--isolate process, --processes P) ------------------------------------------

def main() -> int:
    """`python -m bantam.batch K RPM TPM`: run the request lines from stdin, K at a time, each as
    a session of this process, within RPM requests and TPM tokens a minute (0: no limit, this
    agent's share of the batch's); answer each with its result line on stdout."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with it ignored
    at_once, rpm, tpm = (int(arg) for arg in sys.argv[1:4])
    limit_all(rpm, tpm)
    preload()
    origin, quiet = Path(os.getcwd()), os.dup(2)  # the batch's folder: its configuration is the caller's
    # results go out on a descriptor of their own: whatever else writes to stdout (a library, C
    # code) lands in a task's log (one at a time) or on stderr instead of the middle of a result line
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(quiet, 1)
    writing = threading.Lock()

    def reply(message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False) + "\n"
        try:
            with writing:
                results.write(line)
                results.flush()
        except (OSError, ValueError):  # the batch is gone: stdin's end stops this process
            pass
    tell_holds(lambda url, seconds: reply({"hold": seconds, "url": url}))
    requests = read_requests()
    runners: dict[str, Sessions] = {}

    def work() -> None:
        while (line := requests.get()) is not None:
            request = json.loads(line)
            key = json.dumps([request["root"], request["flags"]], sort_keys=True)
            sessions = runners.get(key) or runners.setdefault(
                key, Sessions(request["root"], request["flags"], origin))
            record = serve(request, sessions, quiet if at_once == 1 else None)
            if record is not None:  # None: stopped; the caller reads the exit code
                reply({"seq": request.get("seq"), "record": record})
    threads = [threading.Thread(target=work, daemon=True) for _ in range(at_once)]
    for t in threads:
        t.start()
    try:
        signal.pause()  # until stdin closes (read_requests) or Ctrl+C reaches this process group
    except KeyboardInterrupt:
        for sessions in list(runners.values()):
            sessions.stop()  # each task unwinds, keeping its thread as after its last complete step
        deadline = time.monotonic() + GRACE
        for _ in threads:
            requests.put(None)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
    os._exit(130)


def serve(request: dict[str, Any], sessions: Sessions, quiet: int | None) -> dict[str, Any] | None:
    """One task. With `quiet` (one task at a time), its traces and any stray output of the
    process go to its own log; otherwise its traces do, as in a batch's own sessions."""
    task = parse_task(request["task"], "", "task")
    if quiet is None:
        return sessions.run(task, request["namespace"])
    tid = thread_id(request["namespace"], task.key)
    private_dir(thread_file(tid, "").parent)
    log = os.open(thread_file(tid, ".log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        return sessions.run(task, request["namespace"], sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)


def preload() -> None:
    """Load what a run needs before the first request comes."""
    import importlib

    from ..providers.http import load_httpx
    for name in ("oneshot", "providers.openai", "render.text", "tools.shell", "tools.files", "tools.spawn"):
        importlib.import_module(f"bantam.{name}")
    load_httpx()  # imported by the first request otherwise


def read_requests() -> "queue.Queue[bytes | None]":
    """Request lines from stdin, read by a thread that interrupts this process when stdin closes:
    the batch or worker that started it is gone, or stops it. A hold another agent met is
    applied here, at once. (The raw descriptor, not sys.stdin: a buffered reader blocked in a
    thread breaks shutdown.)"""
    lines: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        pending = b""
        while piece := os.read(0, 1 << 16):
            *complete, pending = (pending + piece).split(b"\n")
            for line in complete:
                if line.startswith(b'{"hold"'):
                    hold = json.loads(line)
                    pace_for(str(hold.get("url", ""))).hold(float(hold["hold"]), passed_on=True)
                else:
                    lines.put(line)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(GRACE)
        os._exit(130)
    threading.Thread(target=read, daemon=True).start()
    return lines


@contextmanager
def locked(path: Path) -> Iterator[int]:
    """`path` opened for appending (made if missing), under an exclusive flock while inside."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def save_result(tid: str, record: dict[str, Any]) -> None:
    """The task's result beside its thread, until it is on record (`forget`). A plain write, not
    atomic_write's temporary file, fsync and rename (15 system calls a task, each a switch of the
    GIL among a batch's threads): the thread file, fsynced at every step, is what survives a
    crash. A copy torn by a kill does not parse and counts as none (saved_result), and the
    rerun takes the answer from the thread's last message without a model request."""
    fd = os.open(thread_file(tid, ".result.json"),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, json.dumps(record).encode())
    finally:
        os.close(fd)


def saved_result(tid: str) -> dict[str, Any] | None:
    try:
        record = json.loads(thread_file(tid, ".result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def enter(root: str, cwd: str) -> Path:
    """The task's folder, confined to `root` (ConfigError, before anything runs, when it is
    outside; OSError when it is not a folder). Checked again on the folder as opened: a symlink
    swapped in after the path was resolved is caught too."""
    folder = task_folder(root, cwd)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        landed = _opened_path(fd, folder)
    finally:
        os.close(fd)
    if not Path(landed).is_relative_to(root):
        raise ConfigError(f"cwd {cwd!r} is outside {root}, the folder tasks may use")
    return Path(landed)


def _opened_path(fd: int, folder: str) -> str:
    """The kernel's path of the folder open on `fd` (where /proc is not mounted: resolved again)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(folder)


def answer_task(task: Task, cfg: Any, provider: Any, tid: str, folder: Path, log: IO[str],
                cancel: threading.Event, started: float) -> dict[str, Any]:
    from ..transcripts import Thread
    from ..tools.spawn import read_report
    tally = Tally()
    text = final_text(cfg, provider, task, tid, tally, folder, log, cancel)
    steps = sum(m["role"] == "assistant" for m in Thread(tid).history())
    seconds = round(time.monotonic() - started, 3)
    if tally.errors:
        return {**failed(task, tally.errors[-1], seconds, tid), "output": text, "steps": steps,
                "usage": tally.spent()}
    status, output, unmet = read_report(text, list(task.checks))
    return Result(task.id, status, output, steps, tally.spent(), seconds, None, unmet, tid,
                  checked=bool(task.checks)).to_json()


def final_text(cfg: Any, provider: Any, task: Task, tid: str, tally: "Tally", folder: Path, log: IO[str],
               cancel: threading.Event) -> str:
    """Run the task in its thread through the one loop (or resume it); the final answer."""
    from ..config import FALLBACK_CONTEXT_WINDOW
    from ..oneshot import answer
    from ..render import make_renderer
    from ..transcripts import Thread
    from ..tools.spawn import instructions
    history = Thread(tid).history()
    if history and history[-1]["role"] == "assistant":  # answered, but killed before the result was saved
        return history[-1].get("content") or ""
    # the window only fills in the log's usage line: not worth a request to the endpoint per task
    window = cfg.context_window or FALLBACK_CONTEXT_WINDOW
    tally.render = make_renderer(cfg, False, io.StringIO(), log, lambda: window)
    resume = bool(history) and history[-1]["role"] in ("user", "tool")
    turn = answer(cfg, provider, None if resume else task.task + instructions(list(task.checks)), tally, tid,
                  folder=folder, cancel=cancel)
    return turn.text if turn else ""


class Tally:
    """Passes the loop's events on to the renderer, counting the tokens and keeping the errors."""

    def __init__(self) -> None:
        from ..events import Usage, ignore
        self.render: Any = ignore
        self.usage = Usage()
        self.errors: list[str] = []

    def __call__(self, event: Any) -> None:
        from ..events import Error, UsageReport
        if isinstance(event, UsageReport):
            self.usage.add(event.usage)
        elif isinstance(event, Error):
            self.errors.append(event.message)
        self.render(event)

    def spent(self) -> dict[str, int]:
        return {"prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens}
