"""Batch tasks in, results out: the TASKS.jsonl reader and the append-only RESULTS.jsonl file.

A task line is a JSON object `{"id": ..., "task": ..., "checks": [...], "cwd": ..., "model": ...}`
(only `task` is required; `id` defaults to the line number) or a plain string, the task itself.
A result is one JSON object per task: `id`, `status`, `output`, `steps`, `usage`, `seconds`,
`error`, plus `unmet_checks` and `thread` (the thread that holds the whole conversation).

Task text is untrusted (a Redis queue anyone on it can write to, a generated tasks file): `read_task`
is the one reader of it, for TASKS.jsonl lines and Redis messages alike, and whatever the bytes
are it returns a Task or a Malformed (which gets a `failure` result and never runs), never raises.
A task's `cwd` is confined to a root folder by `task_folder`, so a task cannot pick its own
writable root (`/`, someone's home).
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ConfigError, Refused
from ..fsutil import MAX_LOG_BYTES, JsonlLog, atomic_write, bantam_home, private_dir, read_named

TASK_KEYS = ("id", "task", "checks", "cwd", "model")
MAX_TASK_BYTES = 1 << 20  # a task line or message over this is refused: a prompt, not a data set


@dataclass(frozen=True)
class Task:
    id: str | int
    task: str
    checks: tuple[str, ...] = ()
    cwd: str = ""    # the agent's folder, relative to the root (task_folder); "" for the root itself
    model: str = ""  # overrides the configured model for this task only

    @property
    def key(self) -> str:
        """The id as text: what "exactly one result per task" counts by."""
        return str(self.id)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "checks": list(self.checks)}


@dataclass(frozen=True)
class Malformed:
    """A tasks-file line or queue message that is not a task: it gets a `failure` result saying
    why, under the id it claims when that can be read (else its line number or message id)."""
    id: str | int
    error: str
    checks: tuple[str, ...] = ()  # none: so `failed` treats it like a Task

    @property
    def key(self) -> str:
        return str(self.id)


def read_task(raw: bytes, default_id: str | int, where: str) -> Task | Malformed:
    """The one reader of untrusted task text (a TASKS.jsonl line, a message's `task` field): a Task,
    or Malformed naming `where` and why. No content makes it raise: bytes that are not UTF-8, JSON
    nested deeper than Python's recursion limit, oversized text or wrong types all come back as
    Malformed, so one bad task cannot stop a batch or a worker."""
    try:
        value = decode_task(raw)
    except RecursionError:  # json's decoder recurses once per level: a deep nest ends here
        return Malformed(default_id, f"{where}: JSON nested too deeply")
    except UnicodeDecodeError as e:  # before ValueError: it is one
        return Malformed(default_id, f"{where}: not valid UTF-8 (byte {e.start})")
    except (ValueError, TypeError) as e:
        return Malformed(default_id, f"{where}: {e}")
    try:
        return parse_task(value, default_id, where)
    except ConfigError as e:
        return Malformed(claimed_id(value, default_id), str(e))


def decode_task(raw: bytes) -> Any:
    """The JSON value of a task's text, or the text itself when it is plain text (not JSON, and not
    starting with {, [ or ", which would be JSON gone wrong)."""
    if len(raw) > MAX_TASK_BYTES:
        raise ValueError(f"over {MAX_TASK_BYTES} bytes")
    text = raw.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        if text.lstrip().startswith(("{", "[", '"')):
            raise ValueError("not valid JSON (a plain-text task must not start with {, [ or \")") from None
        return text


def claimed_id(value: Any, default_id: str | int) -> str | int:
    """The id a bad task gives itself, so its sender can match the failure to it."""
    task_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(task_id, (str, int)) and not isinstance(task_id, bool) and str(task_id):
        return task_id
    return default_id


def task_folder(root: str, cwd: str) -> str:
    """The real folder a task with this `cwd` runs in: `cwd` relative to `root` (or absolute),
    every symlink resolved; ConfigError when that is outside `root`, which must itself be a real
    path. (`..`, an absolute path and a symlink out all end outside.)"""
    real = os.path.realpath(os.path.join(root, cwd))
    if not Path(real).is_relative_to(root):
        raise ConfigError(f"cwd {cwd!r} is outside {root}, the folder tasks may use "
                          "(choose it with --root)")
    return real


def real_root(folder: str) -> str:
    """The real path of a batch's or worker's root folder; ConfigError if it is not a folder."""
    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        raise ConfigError(f"--root {folder}: not a folder")
    return real


def parse_task(value: Any, default_id: str | int, where: str) -> Task:
    """A task from a parsed line (object or string); ConfigError naming `where` if it is not one."""
    if isinstance(value, str):
        value = {"task": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: a task is a JSON object or a string, got {type(value).__name__}")
    unknown = sorted(set(value) - set(TASK_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(TASK_KEYS)})")
    text, task_id, checks = value.get("task"), value.get("id", default_id), value.get("checks") or []
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: 'task' must be a non-empty string")
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or str(task_id) == "":
        raise ConfigError(f"{where}: 'id' must be a non-empty string or an integer")
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
        raise ConfigError(f"{where}: 'checks' must be a list of strings")
    for name in ("cwd", "model"):
        if not isinstance(value.get(name, ""), str) or "\0" in value.get(name, ""):
            raise ConfigError(f"{where}: {name!r} must be a string without NUL")
    return Task(task_id, text, tuple(checks), value.get("cwd", ""), value.get("model", ""))


def read_tasks(path: str | os.PathLike) -> list[Task | Malformed]:
    """Every line of a TASKS.jsonl file, read before anything runs: a Task, or Malformed for a line
    that is not one (it gets a failure result). ConfigError when the file cannot be read, has no
    tasks, or two lines claim one id (one result per id could not tell them apart)."""
    try:
        lines = read_named(path, MAX_LOG_BYTES).splitlines()
    except Refused as e:
        raise ConfigError(str(e)) from None
    except OSError as e:
        raise ConfigError(f"cannot read tasks file {path}: {e.strerror or e}") from None
    tasks: list[Task | Malformed] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        task = read_task(line, number, where)
        if task.key in seen:
            raise ConfigError(f"{where}: id {task.key!r} was already used on line {seen[task.key]}")
        seen[task.key] = number
        tasks.append(task)
    if not tasks:
        raise ConfigError(f"{path}: no tasks")
    return tasks


def fail_malformed(items: list[Task | Malformed], results: "ResultsFile",
                   finished: Callable[[dict[str, Any]], None]) -> list[Task]:
    """Give each Malformed without a result its failure result (nothing runs for it), telling
    `finished`; the Tasks, to run."""
    for item in items:
        if isinstance(item, Malformed):
            results.add(failed(item, item.error), finished)
    return [t for t in items if isinstance(t, Task)]


@dataclass
class Result:
    id: str | int
    status: str                  # success | partial | failure | blocked (spawn_agent's statuses)
    output: str = ""
    steps: int = 0               # model requests, over every run of the task
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0})
    seconds: float = 0.0
    error: str | None = None     # why bantam could not finish the task (the model failed, a budget...)
    unmet_checks: list[str] = field(default_factory=list)
    thread: str = ""             # `bantam --thread THREAD` continues the conversation
    # The task named checks, so `success` means the agent reported each one met. False: nothing
    # was checked, and `success` is only the agent's word (or no report at all).
    checked: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def failed(task: Task | Malformed, error: str, seconds: float = 0.0, thread: str = "") -> dict[str, Any]:
    """The result of a task bantam could not run to an answer."""
    return Result(task.id, "failure", error=error, seconds=round(seconds, 3),
                  unmet_checks=list(task.checks), thread=thread, checked=bool(task.checks)).to_json()


class ResultsFile:
    """RESULTS.jsonl: one line per finished task, appended and fsynced as each one finishes.

    Reading heals a torn last line (a kill mid-append), so a rerun sees exactly the tasks whose
    result reached the disk whole, and runs the rest. `batch` names this batch (its threads, its
    Redis streams): the same while the file exists, new when the file is new, so deleting the
    file starts the batch afresh instead of resuming old threads.

    `add` takes no lock and never waits for the disk: it queues the result for a writer thread,
    which appends with group commit (every result queued while one append is being fsynced goes
    out in the next single append and fsync) and then calls each result's `on_disk`. Under the
    GIL, a lock every task passes through is a convoy: a thread woken with the lock waits up to
    the switch interval (5 ms) for the interpreter while it holds it, and the tasks queue behind.
    256 sessions spent 0.7 s a task (the median) in this file's lock, fsync or not. A result
    queued but not yet written when the process dies is not lost: it was saved beside its thread
    first (agent.py), and the rerun reports it without running the task. `flush` waits until
    every result queued before it is on disk.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.log = JsonlLog(self.path)
        # (record, on_disk) from add; (None, callback) from flush; SimpleQueue.put never blocks
        self._queue: queue.SimpleQueue[tuple[dict[str, Any] | None, Callable[..., None] | None]] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._starting = threading.Lock()
        self.error: OSError | None = None  # why nothing more reaches the file
        self.told_error: Exception | None = None  # the first exception an `on_disk` raised
        self.unwritten = 0  # results queued after the file failed
        try:
            self.records = self.log.read()
            self.batch = self.identity()
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"results file {path}: unreadable ({e}); it was left as it is") from None
        self.done = {str(r.get("id")): r for r in self.records}  # a task's last result counts
        self.tries: dict[str, int] = {}  # retry_failed: a task run again -> its results so far

    def identity(self) -> str:
        where = hashlib.md5(os.path.realpath(self.path).encode()).hexdigest()
        state = bantam_home() / "batches" / where
        if self.path.exists():
            try:
                return state.read_text(encoding="utf-8").strip()
            except FileNotFoundError:
                pass
        batch = uuid.uuid4().hex[:16]
        private_dir(state.parent)
        atomic_write(state, batch.encode(), mode=0o600)
        private_dir(self.path.parent)
        self.path.touch(mode=0o600)  # from now on, this file is this batch
        return batch

    def retry_failed(self, tasks: Sequence[Any]) -> None:
        """Take the results that are not success off `done`, so that these tasks run again, each
        in a thread of its own (`namespace`); their new results are appended, and a later read
        keeps the last result of a task."""
        for task in tasks:
            record = self.done.get(task.key)
            if record is not None and record.get("status") != "success":
                del self.done[task.key]
                self.tries[task.key] = sum(str(r.get("id")) == task.key for r in self.records)

    def namespace(self, key: str) -> str:
        """Where a task's thread is named from: the batch, and for a task run again after a result
        that was not success, how many results it had (a killed rerun resumes the same thread)."""
        tries = self.tries.get(key)
        return f"{self.batch}/retry{tries}" if tries else self.batch

    def add(self, record: dict[str, Any], on_disk: Callable[[dict[str, Any]], None] | None = None) -> bool:
        """Queue a result unless its task already has one (False: it is not written). From any
        thread; `on_disk(record)` is called from the writer thread once the result is fsynced."""
        # setdefault is one step under the GIL: of two results for one task, exactly one is kept
        if self.done.setdefault(str(record.get("id")), record) is not record:
            return False
        self._put((record, on_disk))
        return True

    def flush(self) -> None:
        """Wait until every result queued before this call is on disk and told. ConfigError when
        the file could not take them; an exception an `on_disk` raised (a closed stdout) here."""
        written = threading.Event()
        self._put((None, written.set))
        written.wait()
        if self.error is not None:
            missing = self.unwritten
            raise ConfigError(f"results file {self.path}: cannot write ({self.error.strerror or self.error}); "
                              f"{missing} result{'s' * (missing != 1)} did not reach it. Each is saved beside its "
                              "task's thread: run the same command again, once the file can be written, to "
                              "add them without running the tasks again")
        if self.told_error is not None:
            raise self.told_error

    def _put(self, item: tuple[dict[str, Any] | None, Callable[..., None] | None]) -> None:
        self._queue.put(item)
        if self._writer is None:
            with self._starting:
                if self._writer is None:
                    self._writer = threading.Thread(target=self._write, name="results-writer", daemon=True)
                    self._writer.start()

    def _write(self) -> None:
        while True:
            group = [self._queue.get()]
            while True:  # and whatever else came meanwhile: one append, one fsync for them all
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            new = [record for record, _ in group if record is not None]
            if new and self.error is None:
                self.records.extend(new)
                try:
                    self.log.sync(self.records)
                except OSError as e:  # a full disk, a removed folder: nothing more can be promised
                    self.error = e
                    del self.records[-len(new):]
            for record, tell in group:
                if record is not None and self.error is not None:
                    self.unwritten += 1  # its task keeps its result beside its thread
                    continue
                try:
                    if record is None and tell is not None:  # a flush: all before it is done
                        tell()
                    elif tell is not None:
                        tell(record)
                except Exception as e:  # a closed stdout: the file comes first; flush raises it
                    self.told_error = self.told_error or e


def rate_options(p: Any) -> None:
    """--rpm/--tpm: what the API allows this process, shared by all its tasks (providers/pace.py)."""
    p.add_argument("--rpm", type=int, default=0, metavar="N", help="at most N model requests a minute, all tasks together")
    p.add_argument("--tpm", type=int, default=0, metavar="N", help="at most N tokens a minute, all tasks together")


def apply_rates(args: Any) -> None:
    from ..providers.pace import limit_all
    if args.rpm < 0 or args.tpm < 0:
        raise ConfigError("--rpm and --tpm take a number of requests or tokens a minute (0: no limit)")
    limit_all(args.rpm, args.tpm)
