"""One batch task as an isolated agent: its own process, working directory, thread and tool budget.

    record = Children().run(task, flags, namespace)   # in the batch or a worker

The child (`python -m bantam.batch`) loads bantam first and then reads its request, one JSON
line on stdin, so each worker thread keeps a spare child loading while its task runs. It loads the
configuration as the caller did, moves to the task's `cwd`, and answers the task through
`oneshot.answer`, the one core loop, in the thread `batch-<hash>`. Every complete step is on disk,
so a task cut off by a kill resumes where it stopped; the finished result is saved beside the
thread before it is reported, so a result lost between the child and RESULTS.jsonl is reported
again without running the task again. The child's traces go to `<thread>.log`.

The child watches its stdin: when the caller dies (even by SIGKILL) or gives up on it, the pipe
closes and the child interrupts itself, which stops its shell commands and leaves its thread as
it was after the last complete step.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import BantamError
from ..fsutil import atomic_write, private_dir
from .tasks import Result, Task, failed, parse_task

GRACE = 10.0  # seconds an orphaned child has to stop by itself before it exits hard


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


def start_agent() -> subprocess.Popen:
    """A fresh agent process: it loads bantam, then waits for its request on stdin."""
    return subprocess.Popen([sys.executable, "-m", "bantam.batch"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def run_isolated(task: Task, flags: dict[str, str], namespace: str,
                 proc: subprocess.Popen | None = None) -> dict[str, Any] | None:
    """Run one task in an agent process (`proc`, started by start_agent, or a new one); its
    result record, or None when the agent was interrupted (the task must run again)."""
    tid = thread_id(namespace, task.key)
    private_dir(thread_file(tid, "").parent)
    started = time.monotonic()
    proc = proc or start_agent()
    request = {"task": task.to_json(), "flags": flags, "thread": tid, "log": str(thread_file(tid, ".log"))}
    try:
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()  # stdin stays open: its end is the signal to stop
    except (BrokenPipeError, ValueError):  # the caller closed it already, or the child died
        pass
    out = proc.stdout.read()
    code = proc.wait()
    close(proc)
    try:
        return json.loads(out.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError):
        if code in (130, -signal.SIGINT, -signal.SIGKILL, -signal.SIGTERM):
            return None
        return failed(task, f"the agent process exited with code {code} without a result; "
                            f"see {request['log']}", time.monotonic() - started, tid)


def close(proc: subprocess.Popen) -> None:
    """Tell a child to stop (or that it has been heard): close its stdin."""
    try:
        proc.stdin.close()
    except (OSError, ValueError):
        pass


class Children:
    """The agent processes of a batch or worker, so that one stop reaches all of them. Each
    thread keeps one spare agent, started while its task runs, so the next task does not wait
    for Python and bantam to load."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopping = threading.Event()
        self.local = threading.local()

    def run(self, task: Task, flags: dict[str, str], namespace: str,
            warm_next: bool = True) -> dict[str, Any] | None:
        """run_isolated, stoppable by `stop`; None when the task was stopped before its end."""
        spare = getattr(self.local, "spare", None)
        proc = spare if spare is not None and spare.poll() is None else self.start()
        self.local.spare = self.start() if warm_next else None
        try:
            return run_isolated(task, flags, namespace, proc)
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
        """Close every agent's stdin: running ones interrupt themselves, spares just exit."""
        self.stopping.set()
        with self.lock:
            for proc in self.procs:
                close(proc)


def interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: stop as cleanly as on Ctrl+C."""
    raise KeyboardInterrupt


def run_threads(count: int, work: Callable[[], None], children: Children) -> None:
    """Run `work` in `count` threads until all return. On Ctrl+C (or SIGTERM made one), stop the
    children, let the threads see it, and raise KeyboardInterrupt."""
    threads = [threading.Thread(target=work, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short waits, so Ctrl+C is seen at once
        children.stop()  # the spares
    except KeyboardInterrupt:
        children.stop()
        deadline = time.monotonic() + GRACE + 5
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        raise


# --- the child -------------------------------------------------------------------------------------

def main() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with it ignored
    preload()
    line = read_line(0)
    if not line.strip():
        return 0  # a spare that was not needed
    request = json.loads(line)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log, 2)  # this task's traces go to its own log
    os.close(log)
    watch_parent()
    task, tid = parse_task(request["task"], "", "task"), request["thread"]
    with locked(thread_file(tid, ".lock")):  # a leftover child of a killed run finishes first
        record = saved_result(tid) or run_task(task, request["flags"], tid)
    sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


def preload() -> None:
    """Load what a run needs while no task waits (this process may be a spare)."""
    import importlib

    from ..providers.http import load_httpx
    for name in ("oneshot", "providers.openai", "render.text", "tools.shell", "tools.files", "tools.spawn"):
        importlib.import_module(f"bantam.{name}")
    load_httpx()  # imported by the first request otherwise


def read_line(fd: int) -> bytes:
    """One line from a file descriptor, unbuffered (so nothing past it is taken from the pipe)."""
    data = b""
    while not data.endswith(b"\n"):
        piece = os.read(fd, 1 << 16)
        if not piece:
            break
        data += piece
    return data


def watch_parent() -> None:
    """Interrupt this process when stdin closes: the batch or worker that started it is gone.
    (The raw descriptor, not sys.stdin: a buffered reader blocked in a thread breaks shutdown.)"""
    def wait() -> None:
        while os.read(0, 1 << 12):
            pass
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(GRACE)
        os._exit(130)
    threading.Thread(target=wait, daemon=True).start()


@contextmanager
def locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def saved_result(tid: str) -> dict[str, Any] | None:
    try:
        record = json.loads(thread_file(tid, ".result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def run_task(task: Task, flags: dict[str, str], tid: str) -> dict[str, Any]:
    """Answer the task in its thread; the result is saved beside the thread before it is returned."""
    started = time.monotonic()
    try:
        record = answer_task(task, flags, tid, started)
    except (BantamError, OSError) as e:  # bad configuration, a missing cwd: this task fails alone
        why = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else str(e)
        record = failed(task, why, time.monotonic() - started, tid)
    atomic_write(thread_file(tid, ".result.json"), json.dumps(record).encode(), mode=0o600)
    return record


def answer_task(task: Task, flags: dict[str, str], tid: str, started: float) -> dict[str, Any]:
    from .. import config
    from ..sessions import Thread
    from ..tools.spawn import read_report
    cfg = config.load({**flags, **({"model": task.model} if task.model else {})})
    if task.cwd:
        os.chdir(task.cwd)
    tally = Tally()
    text = final_text(cfg, task, tid, tally)
    steps = sum(m["role"] == "assistant" for m in Thread(tid).history())
    seconds = round(time.monotonic() - started, 3)
    if tally.errors:
        return {**failed(task, tally.errors[-1], seconds, tid), "output": text, "steps": steps,
                "usage": tally.spent()}
    status, output, unmet = read_report(text, list(task.checks))
    return Result(task.id, status, output, steps, tally.spent(), seconds, None, unmet, tid).to_json()


def final_text(cfg: Any, task: Task, tid: str, tally: "Tally") -> str:
    """Run the task in its thread through the one loop (or resume it); the final answer."""
    from ..config import FALLBACK_CONTEXT_WINDOW
    from ..oneshot import answer
    from ..providers import make_provider
    from ..render import make_renderer
    from ..sessions import Thread
    from ..tools.spawn import instructions
    history = Thread(tid).history()
    if history and history[-1]["role"] == "assistant":  # answered, but killed before the result was saved
        return history[-1].get("content") or ""
    provider = make_provider(cfg)
    # the window only fills in the log's usage line: not worth a request to the endpoint per task
    window = cfg.context_window or FALLBACK_CONTEXT_WINDOW
    tally.render = make_renderer(cfg, False, io.StringIO(), sys.stderr, lambda: window)
    resume = bool(history) and history[-1]["role"] in ("user", "tool")
    turn = answer(cfg, provider, None if resume else task.task + instructions(list(task.checks)), tally, tid)
    return turn.text if turn else ""


class Tally:
    """Passes the loop's events on to the renderer, counting the tokens and keeping the errors."""

    def __init__(self) -> None:
        from ..events import Usage, ignore
        self.render: Any = ignore
        self.usage, self.errors = Usage(), []

    def __call__(self, event: Any) -> None:
        from ..events import Error, UsageReport
        if isinstance(event, UsageReport):
            self.usage.add(event.usage)
        elif isinstance(event, Error):
            self.errors.append(event.message)
        self.render(event)

    def spent(self) -> dict[str, int]:
        return {"prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens}
