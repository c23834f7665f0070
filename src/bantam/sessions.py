"""Conversations on disk.

Sessions (the terminal): `~/.bantam/sessions/<id>.json`, one JSON document each, written
atomically; the autosave of a project is the session whose id is the MD5 of its directory.
Threads (`--thread ID`): `~/.bantam/threads/<id>.jsonl`, appended after every step, with durable
sub-agents' progress beside it in `<id>.agents/`. A file that cannot be read is reported and left
where it is: bantam never overwrites what it could not parse.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .envpolicy import redact
from .errors import SessionError
from .fsutil import JsonlLog, atomic_write, bantam_home, private_dir

VALID_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass
class SessionInfo:
    id: str
    updated: float
    count: int
    summary: str
    project: str = ""
    problem: str = ""  # why the file could not be read, if it could not


def sessions_dir() -> Path:
    return bantam_home() / "sessions"


def project_id(directory: str | os.PathLike = ".") -> str:
    return hashlib.md5(str(Path(directory).resolve()).encode()).hexdigest()


def check_id(name: str) -> str:
    if not VALID_ID.match(name):
        raise SessionError(f"session name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def save(session_id: str, messages: list[dict], *, summary: str = "", model: str = "",
         secret: str = "", project: str | os.PathLike = ".") -> Path:
    """Write a session atomically (0600 in a 0700 directory); `secret` is blanked if it appears."""
    path = private_dir(sessions_dir()) / f"{check_id(session_id)}.json"
    head = {"id": session_id, "project": str(Path(project).resolve()), "updated": time.time(),
            "model": model, "summary": summary or first_request(messages)[:200]}
    # one message a line: readable and diffable, and twice as fast to write as indented JSON
    lines = ",\n".join(json.dumps(m, ensure_ascii=False) for m in messages)
    text = json.dumps(head, ensure_ascii=False)[:-1] + f', "messages": [\n{lines}\n]}}\n'
    if secret and len(secret) >= 4:
        text = text.replace(secret, "***")
    atomic_write(path, redact(text).encode("utf-8"), mode=0o600)  # and every other known secret
    return path


def read(path: Path) -> dict:
    """A session document, or SessionError saying what is wrong with the file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SessionError(f"no session {path.stem!r}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SessionError(f"{path}: not a readable session ({e})") from None
    messages = doc.get("messages") if isinstance(doc, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise SessionError(f"{path}: not a readable session (no list of messages)")
    return doc


def load(key: str) -> tuple[str, list[dict]]:
    """The messages of the session with this exact id, or the only one whose id starts with it."""
    folder = sessions_dir()
    exact = folder / f"{key}.json"
    if VALID_ID.match(key) and exact.is_file():
        return key, read(exact)["messages"]
    matches = sorted(p.stem for p in folder.glob("*.json") if p.stem.startswith(key)) if key else []
    if not matches:
        raise SessionError(f"no session matches {key!r}; /list shows them")
    if len(matches) > 1:
        raise SessionError(f"{key!r} matches {len(matches)} sessions: {', '.join(matches[:5])}")
    return matches[0], read(folder / f"{matches[0]}.json")["messages"]


def listing() -> list[SessionInfo]:
    """Every session, newest first; unreadable files are listed with the reason."""
    found = []
    for path in sessions_dir().glob("*.json"):
        try:
            doc = read(path)
            found.append(SessionInfo(path.stem, float(doc.get("updated") or path.stat().st_mtime),
                                     len(doc["messages"]), str(doc.get("summary", "")),
                                     str(doc.get("project", ""))))
        except (SessionError, OSError, TypeError, ValueError) as e:
            found.append(SessionInfo(path.stem, _mtime(path), 0, "", problem=str(e)))
    return sorted(found, key=lambda s: s.updated, reverse=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def first_request(messages: list[dict]) -> str:
    """The first thing the user asked, on one line: the fallback summary."""
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return " ".join(m["content"].split())
    return ""


class Autosave:
    """Saves the conversation under the project's id, unless that file holds something unreadable."""

    def __init__(self, directory: str | os.PathLike = "."):
        self.id = project_id(directory)
        self.project = directory
        self.checked = False
        self.blocked = ""  # why autosave refuses to write

    def __call__(self, messages: list[dict], model: str = "", secret: str = "") -> str:
        """Save; return a warning to show once when the file is not bantam's to overwrite."""
        if not self.checked:
            self.checked = True
            path = sessions_dir() / f"{self.id}.json"
            if path.exists():
                try:
                    read(path)
                except SessionError as e:
                    self.blocked = f"{e}; autosave will not overwrite it (move it away, or /save NAME)"
                    return self.blocked
        if self.blocked:
            return ""
        save(self.id, messages, model=model, secret=secret, project=self.project)
        return ""

    def adopt(self) -> None:
        """The file was just loaded (so it is readable) or replaced on purpose: ours to write."""
        self.checked, self.blocked = True, ""


def threads_dir() -> Path:
    return bantam_home() / "threads"


def read_log(log: JsonlLog) -> list[dict]:
    try:
        return log.read()
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SessionError(f"{log.path}: unreadable ({e}); it was left as it is") from None


class Thread:
    """A conversation continued across runs: every complete step is appended to its file."""

    def __init__(self, thread_id: str):
        self.id = check_id(thread_id)
        self.log = JsonlLog(threads_dir() / f"{thread_id}.jsonl")

    def history(self) -> list[dict]:
        return [m for m in read_log(self.log) if m.get("role") != "system"]

    def checkpoint(self, messages: list[dict]) -> None:
        self.log.sync([m for m in messages if m.get("role") != "system"])

    def agents(self, turn: int) -> "DurableAgents":
        return DurableAgents(threads_dir() / f"{self.id}.agents", turn)


class DurableAgents:
    """Durable sub-agents of one thread turn: their progress and results survive a killed run.

    A sub-agent is known by the turn it was started in and its task, so re-running an interrupted
    turn finds it again, while the same task in a later turn starts afresh.
    """

    def __init__(self, folder: Path, turn: int):
        self.folder, self.turn = folder, turn

    def key(self, task: str, checks: list[str]) -> str:
        return hashlib.md5(json.dumps([self.turn, task, checks]).encode()).hexdigest()[:16]

    def progress(self, key: str) -> JsonlLog:
        return JsonlLog(self.folder / f"{key}.jsonl")

    def result(self, key: str) -> dict | None:
        try:
            doc = json.loads((self.folder / f"{key}.result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def finish(self, key: str, result: dict) -> None:
        private_dir(self.folder)
        atomic_write(self.folder / f"{key}.result.json", json.dumps(result).encode("utf-8"), mode=0o600)
