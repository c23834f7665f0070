"""What a batch shows while it runs: a rich progress bar on a terminal (done, failed, running,
tasks/s, tokens, ETA), else one line per finished task (on stderr), or with `--json` one JSON
line per finished task on stdout; and the summary at the end (a table, or a JSON line)."""
from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from typing import IO, Any, Sequence

from .tasks import Malformed, Task


class Progress:
    """Told when a task starts and when it finishes (or is dropped: stopped before its end)."""

    def __init__(self, total: int, done: int, err: IO[str] | None = None, as_json: bool = False,
                 out: IO[str] | None = None):
        self.total, self.done, self.first = total, done, done
        self.failed = self.running = self.tokens = 0
        self.err, self.out, self.as_json = err or sys.stderr, out or sys.stdout, as_json
        self.bar: Any = None
        self.started_at = time.monotonic()
        self.lock = threading.Lock()

    def __enter__(self) -> "Progress":
        if self.err.isatty() and not self.as_json:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar
            from rich.progress import TimeRemainingColumn
            self.bar = Bar(TextColumn("batch"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                           TimeElapsedColumn(), TimeRemainingColumn(), console=Console(file=self.err),
                           transient=False)
            self.bar.start()
            self.row = self.bar.add_task(self.counts(), total=self.total, completed=self.done)
        return self

    def started(self) -> None:
        with self.lock:
            self.running += 1
        self.redraw()

    def dropped(self) -> None:
        with self.lock:
            self.running = max(0, self.running - 1)
        self.redraw()

    def finished(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.done += 1
            self.running = max(0, self.running - 1)
            self.failed += record.get("status") != "success"
            usage = record.get("usage") or {}
            self.tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        if self.as_json:
            self.out.write(json.dumps({"event": "task", **self.state(), "result": record}, ensure_ascii=False) + "\n")
            self.out.flush()
        elif self.bar is None:
            self.err.write(f"[{self.done}/{self.total}] {describe(record)}\n")
            self.err.flush()
        else:
            if record.get("status") != "success":  # failures scroll above the bar; successes only count
                self.bar.console.print(describe(record), markup=False, highlight=False)
            self.redraw()

    def note(self, text: str) -> None:
        """A line on stderr, above the bar when there is one."""
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        else:
            self.err.write(text + "\n")
            self.err.flush()

    def state(self) -> dict[str, Any]:
        """The numbers as data: what --json prints with each result."""
        elapsed = time.monotonic() - self.started_at
        rate = (self.done - self.first) / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        return {"done": self.done, "failed": self.failed, "running": self.running, "total": self.total,
                "tasks_per_s": round(rate, 3), "tokens": self.tokens,
                "eta_s": round(left / rate, 1) if rate > 0 else None}

    def counts(self) -> str:
        s = self.state()
        return f"{s['failed']} failed · {s['running']} running · {s['tasks_per_s']:.2f} tasks/s · {s['tokens']} tokens"

    def redraw(self) -> None:
        if self.bar is not None:
            self.bar.update(self.row, completed=self.done, description=self.counts())

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def describe(record: dict[str, Any]) -> str:
    """`7 success 3 steps 2.1s` (`success (nothing checked)` for a task that named no checks)
    and, for a failure, why."""
    status = f"{record.get('status')}{' (nothing checked)' if unchecked_success(record) else ''}"
    line = f"{record.get('id')} {status} {record.get('steps', 0)} steps {record.get('seconds', 0):.1f}s"
    return f"{line}: {record['error']}" if record.get("error") else line


def unchecked_success(record: dict[str, Any]) -> bool:
    """A success no check stands behind (results written before `checked` existed are not counted)."""
    return record.get("status") == "success" and record.get("checked") is False


def summary(tasks: Sequence[Task | Malformed], done: dict[str, dict[str, Any]], wall: float,
            out: IO[str] | None = None, as_json: bool = False, before: int = 0, cost: float | None = None) -> None:
    """The closing table (or JSON line): tasks by status, tokens, their cost at the endpoint's
    listed prices (when it lists them), time, and what is still missing. `before`: the tasks that
    had a result when this run began; the rate counts only those this run finished."""
    records = [done[t.key] for t in tasks if t.key in done]
    statuses = Counter(r.get("status", "?") for r in records)
    prompt = sum(int((r.get("usage") or {}).get("prompt_tokens", 0)) for r in records)
    completion = sum(int((r.get("usage") or {}).get("completion_tokens", 0)) for r in records)
    errors = sum(bool(r.get("error")) for r in records)
    unchecked = sum(map(unchecked_success, records))
    agent_time = sum(float(r.get("seconds", 0)) for r in records)
    now = len(records) - before  # finished by this run
    rate = now / wall if now > 0 and wall > 0 else None
    out = out or sys.stdout
    if as_json:
        out.write(json.dumps({"event": "summary", "tasks": len(tasks), "statuses": dict(statuses),
                              "unchecked_successes": unchecked, "errors": errors,
                              "not_finished": len(tasks) - len(records), "prompt_tokens": prompt,
                              "completion_tokens": completion, "cost_usd": None if cost is None else round(cost, 6),
                              "agent_seconds": round(agent_time, 3), "finished_now": max(now, 0),
                              "wall_seconds": round(wall, 3)}) + "\n")
        out.flush()
        return
    from rich.console import Console
    from rich.table import Table
    table = Table(title="batch summary", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("tasks", str(len(tasks)))
    table.add_row("done (success)", str(statuses.pop("success", 0)))
    if unchecked:
        table.add_row("  of which nothing checked", str(unchecked))
    for status, count in sorted(statuses.items()):
        table.add_row(f"failed ({status})", str(count))
    table.add_row("errors", str(errors))
    table.add_row("not finished", str(len(tasks) - len(records)))
    table.add_row("tokens", f"{prompt} prompt + {completion} completion")
    if cost is not None:
        table.add_row("cost", f"${cost:.4f}")
    table.add_row("agent time", f"{agent_time:.1f} s")
    table.add_row("wall time (this run)", f"{wall:.1f} s")
    table.add_row("tasks/s (this run)", f"{rate:.2f}" if rate is not None else "- (none ran)")
    Console(file=out).print(table)
