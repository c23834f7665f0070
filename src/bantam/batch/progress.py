"""What a batch shows while it runs: a rich progress bar on a terminal, else one line per finished
task (on stderr); and the summary table at the end (on stdout)."""
from __future__ import annotations

import sys
import time
from collections import Counter
from typing import IO, Any, Sequence

from .tasks import Malformed, Task


class Progress:
    """Told of each finished task; draws a bar on a terminal, prints a line otherwise."""

    def __init__(self, total: int, done: int, err: IO[str] | None = None):
        self.total, self.done = total, done
        self.err = err or sys.stderr
        self.bar: Any = None
        self.started = time.monotonic()

    def __enter__(self) -> "Progress":
        if self.err.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar
            from rich.progress import TimeRemainingColumn
            self.bar = Bar(TextColumn("batch"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           TimeRemainingColumn(), console=Console(file=self.err), transient=False)
            self.bar.start()
            self.row = self.bar.add_task("batch", total=self.total, completed=self.done)
        return self

    def finished(self, record: dict[str, Any]) -> None:
        self.done += 1
        line = describe(record)
        if self.bar is None:
            self.err.write(f"[{self.done}/{self.total}] {line}\n")
            self.err.flush()
            return
        if record.get("status") != "success":  # failures scroll above the bar; successes only count
            self.bar.console.print(line, markup=False, highlight=False)
        self.bar.update(self.row, completed=self.done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def describe(record: dict[str, Any]) -> str:
    """`7 success 3 steps 2.1s` and, for a failure, why."""
    line = f"{record.get('id')} {record.get('status')} {record.get('steps', 0)} steps {record.get('seconds', 0):.1f}s"
    return f"{line}: {record['error']}" if record.get("error") else line


def summary(tasks: Sequence[Task | Malformed], done: dict[str, dict[str, Any]], wall: float, out: IO[str] | None = None) -> None:
    """The closing table: tasks by status, tokens, time, and what is still missing."""
    from rich.console import Console
    from rich.table import Table
    records = [done[t.key] for t in tasks if t.key in done]
    statuses = Counter(r.get("status", "?") for r in records)
    prompt = sum(int((r.get("usage") or {}).get("prompt_tokens", 0)) for r in records)
    completion = sum(int((r.get("usage") or {}).get("completion_tokens", 0)) for r in records)
    table = Table(title="batch summary", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("tasks", str(len(tasks)))
    table.add_row("done (success)", str(statuses.pop("success", 0)))
    for status, count in sorted(statuses.items()):
        table.add_row(f"failed ({status})", str(count))
    table.add_row("errors", str(sum(bool(r.get("error")) for r in records)))
    table.add_row("not finished", str(len(tasks) - len(records)))
    table.add_row("tokens", f"{prompt} prompt + {completion} completion")
    table.add_row("agent time", f"{sum(float(r.get('seconds', 0)) for r in records):.1f} s")
    table.add_row("wall time (this run)", f"{wall:.1f} s")
    Console(file=out or sys.stdout).print(table)
