"""The run directory on disk:

    runs/<run-id>/
      goal.md             the goal as given; a changed goal.md stops resume (start a new run)
      plan.md             a readable projection of the state, rewritten after every transition
      state.json          the authoritative state (atomic write, fsync)
      observations.jsonl  every tool result, appended and fsynced before the state moves on
      events.jsonl        model calls, parsing, gates, tools, plan updates
      artifacts/          model answers (bounded) and tool results as JSON
      workspace/          the only directory the tools can touch: a copy of --workspace, without
                          the runs folder or this run when the source holds them (left_out)
      .lock               held (flock) by the one process working on the run

A torn last line of a JSONL file (a crash mid-append) is cut off when the run is opened.
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from ..errors import ConfigError
from ..envpolicy import redact
from ..fsutil import JsonlLog, append, atomic_write, private_dir
from .state import Observation, RunState

ARTIFACT_LIMIT = 256 * 1024  # bytes of one answer or result kept as an artifact


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.workspace = path / "workspace"
        self._lock: IO[str] | None = None

    # --- creating, finding, locking -------------------------------------------------------

    @classmethod
    def create(cls, runs_dir: Path, goal: str, source: Path | None) -> "RunDir":
        private_dir(runs_dir)  # prompts, observations and command output: the user's alone
        while True:  # ids sort by time; the random part keeps runs started in one second apart
            run = cls(runs_dir / (time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)))
            try:
                run.path.mkdir(mode=0o700)
                break
            except FileExistsError:
                continue
        run.lock()
        (run.path / "artifacts").mkdir(mode=0o700)
        if source is not None:
            run._copy(source, leave_out=(runs_dir, run.path))
        else:
            run.workspace.mkdir()
        atomic_write(run.path / "goal.md", redact(goal).encode("utf-8"), mode=0o600)
        return run

    def _copy(self, source: Path, leave_out: tuple[Path, ...]) -> None:
        """The source folder into the workspace, without `leave_out` (the runs folder, this run):
        a source that holds them would otherwise be copied into itself until paths grow too long.
        A copy that fails anyway leaves no half-made run and says why in one line."""
        try:
            shutil.copytree(source, self.workspace, symlinks=True, ignore=left_out(leave_out))
        except (OSError, shutil.Error) as e:
            self.unlock()
            shutil.rmtree(self.path, ignore_errors=True)
            raise ConfigError(f"--workspace: cannot copy {source}: {first_error(e)}") from None

    @classmethod
    def find(cls, ref: str, runs_dir: Path, folder: Path | None = None) -> "RunDir":
        """A run by directory path (read from `folder` when relative; None: as given), by id under
        `runs_dir`, or by a unique id prefix there."""
        for candidate in (Path(ref) if folder is None else folder / ref, runs_dir / ref):
            if (candidate / "state.json").is_file():
                return cls(candidate)
        matches = sorted(runs_dir.glob(f"{ref}*/state.json")) if runs_dir.is_dir() and "/" not in ref else []
        if len(matches) == 1:
            return cls(matches[0].parent)
        if len(matches) > 1:
            raise ConfigError(f"run {ref!r} is ambiguous in {runs_dir}: {len(matches)} runs match")
        raise ConfigError(f"no run {ref!r} (looked for a run directory and in {runs_dir})")

    @property
    def id(self) -> str:
        return self.path.name

    def lock(self) -> None:
        """One writer per run: a second `resume` of the same run stops here."""
        handle = os.fdopen(os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ConfigError(f"run {self.id} is in use by another bantam process") from None
        self._lock = handle

    def in_use(self) -> bool:
        """Whether a bantam process holds this run's lock now (a killed one holds nothing)."""
        try:
            with open(self.path / ".lock", "a+") as handle:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None

    # --- state ----------------------------------------------------------------------------

    def load(self, check_goal: bool = True) -> RunState:
        """The saved state. With `check_goal` (working on the run) a goal.md that was edited stops
        here; without it (showing the run) the state is read all the same: see `goal_changed`."""
        try:
            state = RunState.model_validate_json((self.path / "state.json").read_bytes())
        except (OSError, ValueError, ValidationError) as e:
            raise ConfigError(f"{self.path / 'state.json'}: not a readable run state ({str(e)[:200]})") from None
        if check_goal and self.goal_changed(state):
            raise ConfigError(f"{self.path / 'goal.md'} differs from the goal in state.json; a run keeps its "
                              "goal: start a new run for a new goal")
        return state

    def goal_changed(self, state: RunState) -> bool:
        """Whether goal.md no longer holds the run's goal (edited, removed or unreadable)."""
        try:
            return (self.path / "goal.md").read_text(encoding="utf-8") != redact(state.goal)
        except (OSError, UnicodeDecodeError):
            return True

    def save(self, state: RunState, plan_md: str) -> None:
        state.updated = time.time()
        atomic_write(self.path / "state.json", redact(state.model_dump_json(indent=1)).encode("utf-8"),
                     mode=0o600)
        atomic_write(self.path / "plan.md", redact(plan_md).encode("utf-8"), mode=0o600)

    # --- logs and artifacts ---------------------------------------------------------------

    def heal_logs(self) -> list[str]:
        """Cut torn last lines off both logs; returns what was repaired."""
        repaired = []
        for name in ("observations.jsonl", "events.jsonl"):
            path = self.path / name
            before = path.stat().st_size if path.exists() else 0
            try:
                JsonlLog(path).read()
            except ValueError as e:
                raise ConfigError(f"{e}; the log is damaged in the middle and was left as it is") from None
            if path.exists() and path.stat().st_size != before:
                repaired.append(f"{name}: removed a torn last line ({before - path.stat().st_size} bytes)")
        return repaired

    def observe(self, obs: Observation) -> None:
        """Append an observation and fsync it: after this the call counts as done."""
        self._append("observations.jsonl", obs.model_dump(), sync=True)

    def observation(self, call_id: str) -> Observation | None:
        for record in reversed(JsonlLog(self.path / "observations.jsonl").read()):
            if record.get("call_id") == call_id:
                return Observation.model_validate(record)
        return None

    def event(self, kind: str, **data: object) -> None:
        self._append("events.jsonl", {"time": round(time.time(), 3), "type": kind, **data}, sync=False)

    def _append(self, name: str, record: dict, sync: bool) -> None:
        line = (redact(json.dumps(record, ensure_ascii=False, default=str)) + "\n").encode("utf-8")
        append(self.path / name, line, sync=sync, mode=0o600)

    def artifact(self, name: str, text: str) -> str:
        data = redact(text).encode("utf-8")
        if len(data) > ARTIFACT_LIMIT:
            data = data[:ARTIFACT_LIMIT] + b"\n[... clipped ...]\n"
        atomic_write(self.path / "artifacts" / name, data, mode=0o600)
        return f"artifacts/{name}"


def left_out(folders: tuple[Path, ...]):
    """A copytree `ignore`: __pycache__, and any folder that is one of `folders` by identity
    (device and inode), whatever it is called or however its path is spelled; a folder that does
    not exist yet is never met."""
    identities = {identity(folder) for folder in folders} - {None}

    def ignore(directory: str, names: list[str]) -> set[str]:
        return {name for name in names if name == "__pycache__"
                or identity(Path(directory, name), follow=False) in identities}
    return ignore


def identity(path: Path, follow: bool = True) -> tuple[int, int] | None:
    """(device, inode) of a folder; None for anything else. A link is not followed when `follow`
    is False: copytree copies links as links, so a link never leads the copy anywhere."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def first_error(error: BaseException) -> str:
    """One line for a failed copy: shutil.Error carries every failed file; name the first."""
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list) and error.args[0]:
        source, _, why = error.args[0][0]
        return f"{source}: {why}"[:300]
    return str(getattr(error, "strerror", None) or error)[:300]
