"""bg_run: every tool call runs in a worker thread; past tool_timeout it goes on in the background.

    result = bg.run("BASH", call_id, lambda: work())

Done within `timeout`: the (clipped) result, inline. Otherwise bg/<id>.json records the work (the
pid too, when the tool reported one through `note_pid`), the assistant gets
"[backgrounded bg/<id> (pid N); kill the pid to stop it]" at once, and an emitter thread waits for
the worker however long it takes, then delivers "[bg <id> done, tc:<call>] <result>" as a harness
message and removes the json. Every call, inline ones too, has its bg/<id>.json from the moment
it starts, so a call cut off by a stop, a crash or SIGKILL is known at the next start: its
processes died with bantam (bantam.reaper), and the model is told it was interrupted instead of
the call being silently run again.
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..envpolicy import redact
from ..fsutil import atomic_write

_current = threading.local()  # the Job a worker thread is running, for note_pid


def note_pid(pid: int) -> None:
    """A tool that starts a process says so, so that bg/<id>.json can name what to kill."""
    job = getattr(_current, "job", None)
    if job is not None:
        job.pid = pid


@dataclass
class Job:
    tool: str
    call_id: str
    pid: int | None = None
    result: str = ""
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Background:
    def __init__(self, folder: Path, timeout: float, clip: Callable[[str], str],
                 deliver: Callable[[str], None], log: Callable[[str, str], None]):
        self.folder = folder
        self.timeout = timeout
        self.clip = clip            # tool_output_limit, with the full text stashed
        self.deliver = deliver      # appends a harness message to the conversation
        self.log = log              # LIFE.md

    def run(self, tool: str, call_id: str, work: Callable[[], str], detail: str = "") -> str:
        """`detail` (the arguments, shortened) is what the model is told if the call is interrupted."""
        job = Job(tool, call_id)
        bg_id = secrets.token_hex(3)
        path = self.folder / f"{bg_id}.json"
        record = {"id": bg_id, "tool": tool, "tc": call_id, "detail": redact(detail[:300]), "started": time.time()}
        atomic_write(path, json.dumps(record).encode(), mode=0o600)  # before any effect of the call
        threading.Thread(target=self._work, args=(job, work), daemon=True,
                         name=f"bg-{tool}").start()
        if job.done.wait(self.timeout):
            if not isinstance(job.error, KeyboardInterrupt):  # cut off by a stop: reported next start
                path.unlink(missing_ok=True)
            if job.error is not None:
                raise job.error  # the toolbox turns it into an error result, keeping the object
            return self.clip(job.result)
        return self._background(job, record, path)

    def _work(self, job: Job, work: Callable[[], str]) -> None:
        _current.job = job
        try:
            job.result = work()
        except BaseException as e:  # KeyboardInterrupt too: a cancelled shell at shutdown
            job.error = e
        finally:
            job.done.set()

    def _background(self, job: Job, record: dict, path: Path) -> str:
        bg_id = record["id"]
        record = {**record, "pid": job.pid, "background": True}
        atomic_write(path, json.dumps(record).encode(), mode=0o600)
        self.log("bg", f"{bg_id} {job.tool} backgrounded (pid {job.pid})")
        threading.Thread(target=self._emit, args=(job, bg_id, path), daemon=True,
                         name=f"bg-emit-{bg_id}").start()
        return f"[backgrounded bg/{bg_id} (pid {job.pid or 'unknown'}); kill the pid to stop it]"

    def _emit(self, job: Job, bg_id: str, path: Path) -> None:
        job.done.wait()
        if isinstance(job.error, KeyboardInterrupt):  # stopped with the daemon: reported as
            return                                    # lost at the next start, from its json
        if job.error is not None:
            result = f"error: {type(job.error).__name__}: {job.error}"
        else:
            result = job.result
        self.deliver(f"[bg {bg_id} done, tc:{job.call_id}] {self.clip(result)}")
        path.unlink(missing_ok=True)
        self.log("bg", f"{bg_id} {job.tool} done")

    def lost(self) -> list[dict]:
        """bg/*.json left by a process that died: their work died with it."""
        found = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                found.append({"id": path.stem})
            path.unlink(missing_ok=True)
        return found


def interrupted_note(job: dict) -> str:
    """What the model is told at start about a call the last process did not finish."""
    what = f"{job.get('tool', 'a tool')} call" + (f" tc:{job['tc']}" if job.get("tc") else "")
    if job.get("detail"):
        what += f" {job['detail']}"
    where = "in the background" if job.get("background") else "when bantam stopped"
    return (f"[bg {job.get('id')} interrupted: the {what} was still running {where}; its processes "
            f"were killed with bantam and it was NOT run again. Check what it already did before "
            f"you repeat it.]")
