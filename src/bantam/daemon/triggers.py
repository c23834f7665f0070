"""Triggers: the agent's schedule, as files in triggers/ (clock, watch and command, plus cron).

    {"next": <ts>, "repeat_s": <s?>, "message": "..."}   clock: one-shots are deleted after firing
    {"cron": "*/5 * * * *", "message": "..."}            clock, by a cron expression (croniter)
    {"watch": "<path>", "repeat_s": <cooldown?>, ...}     fires when the file's content changes
    {"cmd": "<shell>", "repeat_s": <s?>}                  fires with the command's stdout, if any
    {"watch": ..., "cmd": ...}                            the command runs when the file changes

A trigger's command is the model's command (the model writes triggers; the subconscious does by
design): it runs inside the same sandbox as BASH (boundary.sandbox), with the tool environment.

A fire is first written to trigger-queue/ (so it survives a crash), then the schedule is moved on
or removed; a fire that cannot be written leaves the schedule as it was, for the next scan. A
command that times out does not fire, whatever it printed before. Queued fires are injected one
at a time, and only when the stream is idle (its last message is a plain assistant reply); if
the previous trigger got nothing but an idle reply, that pair is removed first, so unanswered
heartbeats do not pile up. Fires that queued up while the agent could not take them (the model
was down) are delivered collapsed: every queued fire of one trigger with the same message
becomes one message saying how many there were. A trigger's command runs in a thread of its
own, so a slow one delays only itself. The state a watch needs (the file's hash, when it last
fired) is kept in its own json. subconscious-* fires are also shown
to the operator. The heartbeat doubles its period each time it finds the agent idle, up to
heartbeat_max_s, and drops back when something happened in between.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Refused, ToolError
from ..fsutil import atomic_write, open_inside, read_setting
from ..tools.shell import run_shell
from . import boundary
from .bus import system_message, unwrap

if TYPE_CHECKING:
    from .agent import Agent

HEARTBEAT = "heartbeat"
SURFACED = "subconscious-"
CMD_CAPTURE = 1_000_000  # characters of a cmd's output kept before clipping


class Triggers:
    def __init__(self, agent: "Agent"):
        self.agent = agent
        self.folder = agent.dir / "triggers"
        self.queue = agent.dir / "trigger-queue"
        self.lock = threading.Lock()        # the loop and the trigger thread both inject
        self.reported: dict[str, float] = {}  # bad trigger files already logged (name -> mtime)
        self.running: set[str] = set()      # triggers whose command is running now
        self.failing: dict[str, str] = {}   # triggers whose fire could not be saved, and why

    # --- the thread -------------------------------------------------------------------------

    def run(self, stop: threading.Event, wake: threading.Event) -> None:
        while not stop.is_set():
            try:
                soonest = self.tick()
            except Exception as e:  # one bad tick must not end the schedule
                self.agent.log("trigger", f"scan failed: {type(e).__name__}: {e}")
                soonest = time.time() + self.agent.settings.trigger_tick
            pause = min(self.agent.settings.trigger_tick, max(0.05, soonest - time.time()))
            wake.wait(pause)
            wake.clear()

    def tick(self) -> float:
        """Check every trigger; inject the next queued fire if idle. Returns the soonest 'next'."""
        now = time.time()
        soonest = now + self.agent.settings.trigger_tick
        for path in sorted(self.folder.glob("*.json")):
            if path.stem in self.running:
                continue
            spec = self._read(path)
            if spec is not None:
                nxt = self.check(path, spec, now)
                soonest = min(soonest, nxt) if nxt is not None else soonest
        self.inject_next()
        return soonest

    def check(self, path: Path, spec: dict, now: float) -> float | None:
        name = path.stem
        try:
            if "watch" in spec:
                return self._watch(path, name, spec, now)
            if "cron" in spec and "next" not in spec:
                spec["next"] = cron_next(str(spec["cron"]), now)
                _save(path, spec)
            if "next" not in spec and "cmd" in spec:
                spec["next"] = now
            if "next" not in spec:
                raise ValueError("expected next, cron, watch or cmd")
            if now < float(spec["next"]):
                return float(spec["next"])
            self._clock(path, name, spec, now)
            return float(spec["next"]) if path.exists() and name not in self.running else None
        except (ValueError, TypeError, KeyError) as e:
            self._report(path, f"{type(e).__name__}: {e}")
        except OSError as e:
            self._unsaved(name, e)
        return None

    # --- the kinds ----------------------------------------------------------------------------

    def _clock(self, path: Path, name: str, spec: dict, now: float) -> None:
        if "cmd" in spec:
            self._in_thread(name, lambda: self._cmd_then_reschedule(path, name, spec, now))
            return
        self.fire(name, str(spec.get("message") or f"(trigger {name})"))
        self._reschedule(path, spec, now)

    def _cmd_then_reschedule(self, path: Path, name: str, spec: dict, now: float) -> None:
        output = self.run_cmd(str(spec["cmd"]))
        if output:
            self.fire(name, _join(spec.get("message"), output))
        self._reschedule(path, spec, time.time())

    def _in_thread(self, name: str, work: Any) -> None:
        """A command in its own thread; the trigger is skipped by the scans until it is done."""
        def run() -> None:
            try:
                work()
            except OSError as e:
                self._unsaved(name, e)
            except Exception as e:  # (the scan thread reports its own errors the same way)
                self.agent.log("trigger", f"{name} failed: {type(e).__name__}: {e}")
            finally:
                self.running.discard(name)
                self.agent.trigger_wake.set()
        self.running.add(name)
        threading.Thread(target=run, daemon=True, name=f"trigger-{name}").start()

    def _reschedule(self, path: Path, spec: dict, now: float) -> None:
        if not path.exists():  # removed meanwhile (by the agent, while its command ran)
            return
        if "cron" in spec:
            spec["next"] = cron_next(str(spec["cron"]), now)
        elif spec.get("repeat_s"):
            repeat = float(spec["repeat_s"])
            later = float(spec["next"]) + repeat
            spec["next"] = later if later > now else now + repeat  # missed ticks are skipped
        else:  # a one-shot: its fire is already safe in trigger-queue/
            path.unlink(missing_ok=True)
            return
        _save(path, spec)

    def _watch(self, path: Path, name: str, spec: dict, now: float) -> float | None:
        digest = file_hash(self.agent.dir.home / str(spec["watch"]))
        if "hash" not in spec:  # first sight: remember the content, fire on the next change
            spec["hash"] = digest
            _save(path, spec)
            return None
        if digest == spec["hash"] or now < float(spec.get("last", 0)) + float(spec.get("repeat_s") or 0):
            return None  # unchanged, or cooling down (a change then fires when the cooldown ends)
        seen = {**spec, "hash": digest, "last": now}
        # The new hash is saved only once the fire is safe in trigger-queue/: a fire that could
        # not be written leaves the change unseen, so a later scan fires it.
        if "cmd" in spec:
            def work() -> None:
                output = self.run_cmd(str(spec["cmd"]))
                if output:
                    self.fire(name, _join(spec.get("message"), output))
                if path.exists():  # (removed meanwhile by the agent, while its command ran)
                    _save(path, seen)
            self._in_thread(name, work)
        else:
            self.fire(name, str(spec.get("message") or f"{spec['watch']} changed"))
            _save(path, seen)
        return None

    def run_cmd(self, cmd: str) -> str:
        """stdout only (stderr is dropped), with the cmd timeout; clipped like a tool result. Inside
        the sandbox BASH gets, never outside it: where that cannot work the command is not run."""
        s = self.agent.settings
        try:
            result = run_shell(f"exec 2>/dev/null\n{cmd}", s.cmd_timeout, CMD_CAPTURE,
                               sandbox=boundary.sandbox(self.agent), cwd=self.agent.dir.home)
        except ToolError as e:  # (bubblewrap missing or broken): no fire; the schedule moves on
            self.agent.log("trigger", f"cmd {e}: {cmd[:200]}")
            return ""
        if result.timed_out:  # what it printed before is not its answer: no output, no fire
            self.agent.log("trigger", f"cmd timed out after {s.cmd_timeout:g}s (no fire): {cmd[:200]}")
            return ""
        return self.agent.blobs.clip(result.output.strip(), s.tool_output_limit)

    def _unsaved(self, name: str, e: OSError) -> None:
        """A fire or a schedule that could not be written (trigger-queue/ or triggers/ read-only
        or full): the schedule stays where it was, so a later scan tries again. Said once until
        it works again, not at every scan."""
        where = f" in {os.path.dirname(e.filename)}" if isinstance(e.filename, str) else ""  # (not the temp file)
        problem = f"{where}: {e.strerror or e}"
        if self.failing.get(name) != problem:
            self.failing[name] = problem
            self.agent.log("trigger", f"{name} could not be saved{problem}; it is tried again at "
                                      "the next scan")

    # --- fire, queue, inject --------------------------------------------------------------

    def fire(self, name: str, message: str) -> None:
        if name == HEARTBEAT and list(self.queue.glob(f"*-{HEARTBEAT}.json")):
            return  # while the agent is busy, one waiting heartbeat says it all
        record = {"name": name, "message": message, "fired_at": time.time()}
        atomic_write(self.queue / f"{time.time_ns():020d}-{name}.json",
                     json.dumps(record, ensure_ascii=False).encode("utf-8"), mode=0o600)
        self.failing.pop(name, None)
        self.agent.log("trigger", f"{name} fired: {message[:200]}")
        if name.startswith(SURFACED):
            self.agent.tell_operator(f"[{name}] {message}")

    def inject_next(self) -> bool:
        """The oldest queued fire into the conversation, if the stream is idle."""
        with self.lock:
            queued = sorted(self.queue.glob("*.json"))
            if not queued or self.agent.busy:
                return False
            try:
                record = json.loads(queued[0].read_text(encoding="utf-8"))
                name, message = str(record["name"]), str(record["message"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                self.agent.log("trigger", f"dropped unreadable {queued[0].name}: {e}")
                queued[0].unlink(missing_ok=True)
                return False
            same = [queued[0]] + [p for p in queued[1:] if _same_fire(p, name, message)]
            text = f"[trigger {name}] {message}"
            if len(same) > 1:
                first = time.strftime("%H:%M:%S", time.localtime(float(record.get("fired_at") or 0)))
                text += f"\n(fired {len(same)} times since {first} while you were busy; delivered once)"
            collapsed: list[str] = []

            def change(messages: list[dict]) -> list[dict] | None:
                if not is_idle(messages):
                    return None
                kept, dropped = collapse(messages)
                collapsed.extend(dropped)
                return kept + [system_message(text)]
            if not self.agent.conv.edit(change):
                return False
            for path in same:
                path.unlink(missing_ok=True)
        if name == HEARTBEAT:
            self._back_off(HEARTBEAT in collapsed)
        return True

    def _back_off(self, was_idle: bool) -> None:
        path = self.folder / f"{HEARTBEAT}.json"
        spec = self._read(path)
        if spec is None:
            return
        s = self.agent.settings
        base = s.heartbeat_s or float(spec.get("repeat_s") or 0) or 225.0  # (0: one the agent wrote)
        repeat = min(float(spec.get("repeat_s") or base) * 2, max(s.heartbeat_max_s, base)) \
            if was_idle else base
        spec["repeat_s"], spec["next"] = repeat, time.time() + repeat
        _save(path, spec)

    # --- files ----------------------------------------------------------------------------

    def _read(self, path: Path) -> dict | None:
        try:  # the model writes triggers/: a link out of it, a FIFO or a device is refused
            spec = json.loads(read_setting(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, Refused) as e:
            self._report(path, str(e))
            return None
        if not isinstance(spec, dict):
            self._report(path, "not a JSON object")
            return None
        return spec

    def _report(self, path: Path, problem: str) -> None:
        """Log a bad trigger file once per version of it, not on every scan."""
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if self.reported.get(path.name) != mtime:
            self.reported[path.name] = mtime
            self.agent.log("trigger", f"{path.name} ignored: {problem}")


def _same_fire(path: Path, name: str, message: str) -> bool:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("name") == name and record.get("message") == message


def is_idle(messages: list[dict]) -> bool:
    if not messages:
        return True
    last = messages[-1]
    return last.get("role") == "assistant" and not last.get("tool_calls")


def collapse(messages: list[dict]) -> tuple[list[dict], list[str]]:
    """Drop a trailing (trigger, plain reply) pair: the trigger was not acted on."""
    if len(messages) >= 2 and is_idle(messages) and messages[-2].get("role") == "user":
        wrapped, text = unwrap(messages[-2].get("content"))
        if wrapped and text.startswith("[trigger "):
            return messages[:-2], [text[len("[trigger "):].split("]", 1)[0]]
    return messages, []


def cron_next(expression: str, now: float) -> float:
    from croniter import croniter  # imported only by the daemon, only for cron triggers
    if not croniter.is_valid(expression):
        raise ValueError(f"not a cron expression: {expression!r}")
    start = datetime.datetime.fromtimestamp(now).astimezone()  # the machine's local time
    return float(croniter(expression, start).get_next(float))


def file_hash(path: Path) -> str | None:
    try:  # a watched path the model chose: never a FIFO (the open would wait), a device or /proc
        with os.fdopen(open_inside("/", path), "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except (OSError, Refused):
        return None  # a missing file is a state too: its appearance is a change


def _join(message: Any, output: str) -> str:
    return f"{message}\n{output}" if message else output


def _save(path: Path, spec: dict) -> None:
    atomic_write(path, (json.dumps(spec, indent=2) + "\n").encode("utf-8"), mode=0o600)
