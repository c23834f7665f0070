"""Batch tasks in, results out: the TASKS.jsonl reader and the append-only RESULTS.jsonl file.

A task line is a JSON object `{"id": ..., "task": ..., "checks": [...], "cwd": ..., "model": ...}`
(only `task` is required; `id` defaults to the line number) or a plain string, the task itself.
A result is one JSON object per task: `id`, `status`, `output`, `steps`, `usage`, `seconds`,
`error`, plus `unmet_checks` and `thread` (the thread that holds the whole conversation).
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..fsutil import JsonlLog, atomic_write, bantam_home, private_dir

TASK_KEYS = ("id", "task", "checks", "cwd", "model")


@dataclass(frozen=True)
class Task:
    id: str | int
    task: str
    checks: tuple[str, ...] = ()
    cwd: str = ""    # the agent's working directory, relative to where bantam runs; "" for here
    model: str = ""  # overrides the configured model for this task only

    @property
    def key(self) -> str:
        """The id as text: what "exactly one result per task" counts by."""
        return str(self.id)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "checks": list(self.checks)}


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
        if not isinstance(value.get(name, ""), str):
            raise ConfigError(f"{where}: {name!r} must be a string")
    return Task(task_id, text, tuple(checks), value.get("cwd", ""), value.get("model", ""))


def read_tasks(path: str | os.PathLike) -> list[Task]:
    """Every task of a TASKS.jsonl file, checked whole before anything runs."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read tasks file {path}: {getattr(e, 'strerror', None) or e}") from None
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            value = json.loads(line)
        except ValueError:
            value = line if not line.lstrip().startswith(("{", "[", '"')) else None
            if value is None:
                raise ConfigError(f"{where}: not valid JSON (a plain-text task must not start "
                                  "with {, [ or \")") from None
        task = parse_task(value, number, where)
        if task.key in seen:
            raise ConfigError(f"{where}: id {task.key!r} was already used on line {seen[task.key]}")
        seen[task.key] = number
        tasks.append(task)
    if not tasks:
        raise ConfigError(f"{path}: no tasks")
    return tasks


@dataclass
class Result:
    id: str | int
    status: str                  # success | partial | failure | blocked (seed 004's statuses)
    output: str = ""
    steps: int = 0               # model requests, over every run of the task
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0})
    seconds: float = 0.0
    error: str | None = None     # why bantam could not finish the task (the model failed, a budget...)
    unmet_checks: list[str] = field(default_factory=list)
    thread: str = ""             # `bantam --thread THREAD` continues the conversation

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def failed(task: Task, error: str, seconds: float = 0.0, thread: str = "") -> dict[str, Any]:
    """The result of a task bantam could not run to an answer."""
    return Result(task.id, "failure", error=error, seconds=round(seconds, 3),
                  unmet_checks=list(task.checks), thread=thread).to_json()


class ResultsFile:
    """RESULTS.jsonl: one line per finished task, appended and fsynced as each one finishes.

    Reading heals a torn last line (a kill mid-append), so a rerun sees exactly the tasks whose
    result reached the disk whole, and runs the rest. `batch` names this batch (its threads, its
    Redis streams): the same while the file exists, new when the file is new, so deleting the
    file starts the batch afresh instead of resuming old threads.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.log = JsonlLog(self.path)
        try:
            self.records = self.log.read()
            self.batch = self.identity()
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"results file {path}: unreadable ({e}); it was left as it is") from None
        self.done = {str(r.get("id")): r for r in self.records}

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

    def add(self, record: dict[str, Any]) -> bool:
        """Append a result unless its task already has one; True if it was written."""
        key = str(record.get("id"))
        if key in self.done:
            return False
        self.records.append(record)
        self.log.sync(self.records)
        self.done[key] = record
        return True
