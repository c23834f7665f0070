"""Batch tasks as sessions: many in this process (the default), or each in an agent process.

    runner = Sessions(root, flags, origin)        # bantam batch, bantam worker
    record = runner.run(task, namespace)          # in any thread; None: stopped, run it again
    runner = Children(root, flags)                # --isolate process: the same, one process a task

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

`Children` keeps process isolation for tasks that may crash the interpreter (a native extension
a tool loads, memory a task may exhaust): each worker thread drives an agent process
(`python -m bantam.batch`) that serves one task at a time through a `Sessions` of its own, and is
replaced every RECYCLE tasks. The agent watches its stdin: when the caller dies (even by SIGKILL)
or stops it, the pipe closes and the agent stops its task the same way.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
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
from ..providers.pace import release_all
from ..slots import Slots
from .tasks import Result, Task, failed, parse_task, task_folder

GRACE = 10.0   # seconds an orphaned child has to stop by itself before it exits hard
RECYCLE = 100  # tasks one agent process serves before a fresh one takes over (bounds any leak)
SLOTS = 2      # sessions that compute at once (slots.py): one was alike at 256 and slower at 64, four slower at 256


def thread_id(namespace: str, key: str) -> str:
    """The task's thread: the same task of the same batch always finds the same one."""
    return "batch-" + hashlib.md5(f"{namespace}\0{key}".encode()).hexdigest()[:20]


def thread_file(tid: str, suffix: str) -> Path:
    from ..sessions import threads_dir
    return threads_dir() / f"{tid}{suffix}"


def forget(record: dict[str, Any]) -> None:
    """The result is on record (RESULTS.jsonl, or the reply stream): drop the copy kept for a
    crash and the lock; the thread and its log stay, to read or continue."""
    tid = str(record.get("thread") or "")
    if tid:
        for suffix in (".result.json", ".lock"):
            thread_file(tid, suffix).unlink(missing_ok=True)


class Runner(Protocol):
    """What a batch or a worker drives: `Sessions` or `Children`."""
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
            # a leftover agent of a killed run finishes first; then a slot (slots.py) to compute in
            with locked(thread_file(tid, ".lock")), self.slots.held():
                saved = saved_result(tid)
                if saved is not None:
                    return saved
                if log is not None:
                    return self.answer(task, tid, log, cancel)
                # buffering=1 (lines): no isatty probe of the file, and a line is one write
                with open(thread_file(tid, ".log"), "a", buffering=1, encoding="utf-8") as own:
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


def start_agent() -> subprocess.Popen:
    """A fresh agent process: it loads bantam, then answers one request line after another."""
    return subprocess.Popen([sys.executable, "-m", "bantam.batch"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def run_isolated(task: Task, flags: dict[str, str], namespace: str,
                 proc: subprocess.Popen, root: str) -> dict[str, Any] | None:
    """Run one task in an agent process (from start_agent), in its folder under `root`; its result
    record, or None when the agent was interrupted (the task must run again). An agent that ended
    is not used again."""
    tid = thread_id(namespace, task.key)
    started = time.monotonic()
    request = {"task": task.to_json(), "flags": flags, "namespace": namespace, "root": root}
    assert proc.stdin is not None and proc.stdout is not None  # started with both pipes
    try:
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()  # stdin stays open: its end is the signal to stop
    except (BrokenPipeError, ValueError):  # the caller closed it already, or the agent died
        pass
    line = proc.stdout.readline()
    try:
        return json.loads(line)
    except ValueError:
        code = proc.wait()
        if code in (130, -signal.SIGINT, -signal.SIGKILL, -signal.SIGTERM):
            return None
        return failed(task, f"the agent process exited with code {code} without a result; "
                            f"see {thread_file(tid, '.log')}", time.monotonic() - started, tid)


def close(proc: subprocess.Popen) -> None:
    """Tell an agent to stop: close its stdin."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except (OSError, ValueError):
        pass


class Children:
    """`--isolate process`: each task in an agent process, so that one stop reaches all of them.
    Each thread keeps its agent process for the next task (Python and bantam load once, not per
    task), and replaces it after RECYCLE tasks or when it ended. `root` is the real folder every
    task's `cwd` must stay inside."""

    def __init__(self, root: str, flags: dict[str, str]) -> None:
        self.root, self.flags = root, flags
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopping = threading.Event()
        self.local = threading.local()

    def run(self, task: Task, namespace: str) -> dict[str, Any] | None:
        """run_isolated, stoppable by `stop`; None when the task was stopped before its end."""
        proc, served = getattr(self.local, "agent", None), getattr(self.local, "served", 0)
        if proc is None or proc.poll() is not None or served >= RECYCLE:
            if proc is not None:
                close(proc)
            proc, served = self.start(), 0
        self.local.agent, self.local.served = proc, served + 1
        try:
            return run_isolated(task, self.flags, namespace, proc, self.root)
        finally:
            with self.lock:
                self.procs = {p for p in self.procs if p.poll() is None}

    def start(self) -> subprocess.Popen:
        proc = start_agent()
        with self.lock:
            self.procs.add(proc)
        if self.stopping.is_set():
            close(proc)
        return proc

    def stop(self) -> None:
        """Close every agent's stdin: a busy one interrupts its task, an idle one just ends."""
        self.stopping.set()
        with self.lock:
            for proc in self.procs:
                close(proc)

    def wait(self) -> None:
        """Wait for every agent to end (they end by themselves once stopped)."""
        deadline = time.monotonic() + GRACE + 5
        with self.lock:
            procs = list(self.procs)
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()


def runner(isolate: str, root: str, flags: dict[str, str], origin: Path) -> Runner:
    """`--isolate session` (the default) or `--isolate process`."""
    return Children(root, flags) if isolate == "process" else Sessions(root, flags, origin)


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


# --- the agent process (--isolate process) ---------------------------------------------------------

def main() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with it ignored
    preload()
    origin, quiet = Path(os.getcwd()), os.dup(2)  # the batch's folder: its configuration is the caller's
    # results go out on a descriptor of their own: whatever else writes to stdout (a library, C
    # code) lands in the task's log instead of the middle of a result line
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(quiet, 1)
    requests = read_requests()
    runners: dict[str, Sessions] = {}
    while True:
        request = json.loads(requests.get())
        key = json.dumps([request["root"], request["flags"]], sort_keys=True)
        sessions = runners.setdefault(key, Sessions(request["root"], request["flags"], origin))
        record = serve(request, sessions, quiet)
        if record is None:  # stopped: the caller reads the exit code
            os._exit(130)
        results.write(json.dumps(record, ensure_ascii=False) + "\n")
        results.flush()


def serve(request: dict[str, Any], sessions: Sessions, quiet: int) -> dict[str, Any] | None:
    """One task, its traces (and any stray output of the process) in its own log."""
    task = parse_task(request["task"], "", "task")
    tid = thread_id(request["namespace"], task.key)
    private_dir(thread_file(tid, "").parent)
    log = os.open(thread_file(tid, ".log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        return sessions.run(task, request["namespace"], sys.stderr)
    except KeyboardInterrupt:  # the caller closed stdin: stopped between steps
        return None
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


def read_requests() -> "queue.Queue[bytes]":
    """Request lines from stdin, read by a thread that interrupts this process when stdin closes:
    the batch or worker that started it is gone, or stops it. (The raw descriptor, not
    sys.stdin: a buffered reader blocked in a thread breaks shutdown.)"""
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        pending = b""
        while piece := os.read(0, 1 << 16):
            *complete, pending = (pending + piece).split(b"\n")
            for line in complete:
                lines.put(line)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(GRACE)
        os._exit(130)
    threading.Thread(target=read, daemon=True).start()
    return lines


@contextmanager
def locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
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
    from ..sessions import Thread
    from ..tools.spawn import read_report
    tally = Tally()
    text = final_text(cfg, provider, task, tid, tally, folder, log, cancel)
    steps = sum(m["role"] == "assistant" for m in Thread(tid).history())
    seconds = round(time.monotonic() - started, 3)
    if tally.errors:
        return {**failed(task, tally.errors[-1], seconds, tid), "output": text, "steps": steps,
                "usage": tally.spent()}
    status, output, unmet = read_report(text, list(task.checks))
    return Result(task.id, status, output, steps, tally.spent(), seconds, None, unmet, tid).to_json()


def final_text(cfg: Any, provider: Any, task: Task, tid: str, tally: "Tally", folder: Path, log: IO[str],
               cancel: threading.Event) -> str:
    """Run the task in its thread through the one loop (or resume it); the final answer."""
    from ..config import FALLBACK_CONTEXT_WINDOW
    from ..oneshot import answer
    from ..render import make_renderer
    from ..sessions import Thread
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
