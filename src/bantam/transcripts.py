"""Conversations on disk (transcripts): saved sessions, the autosave, threads. The session builder,
which assembles a live session, is session.py.

Sessions (the terminal): `~/.bantam/sessions/<id>.jsonl`, JSON Lines: a head record
(`{"session": id, "project": ..., "created": ..., "model": ..., "summary": ...}`), then one record
per message (the leading system prompt is not kept: it is rebuilt on load). Autosave appends the new
messages after every step (fsynced), so its cost does not grow with the session; a compaction,
/clear or /save rewrites the file atomically. A crash mid-append loses at most that last record:
reading skips a torn last line with a notice. The autosave of a project is the session whose id
is the MD5 of its directory; one process at a time writes it (an flock on `<id>.lock`, held while
that process lives): a second bantam in the same folder leaves the file alone, instead of the file
flipping whole to whichever wrote last, and autosaves its own conversation as `<id>-2` (the first
free number, held the same way), said at its first save. Sessions of earlier
versions (`<id>.json`, one JSON document) are still read, listed and deleted; the first save of
one writes it as `<id>.jsonl` and removes the `.json`. Threads (`--thread ID`):
`~/.bantam/threads/<id>.jsonl`, appended after every step, with durable sub-agents' progress beside
it in `<id>.agents/`. A file that cannot be read is reported and left where it is: bantam never
overwrites what it could not parse.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from .envpolicy import register_secret
from .errors import ConfigError, SessionError
from .fsutil import JsonlLog, atomic_write, bantam_home, private_dir

VALID_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SUFFIX, OLD_SUFFIX = ".jsonl", ".json"  # the old one: a single JSON document, read only
MAX_SESSION_BYTES = 256 << 20
Notify = Callable[[str], None]
# One phrase wherever there is nothing to continue or list (/list, /continue, bantam sessions, bantam -c).
NO_SESSIONS = "no saved session yet"
NO_PROJECT_SESSION = "this project has no saved session yet"
CONTINUE_NONE = f"bantam -c: {NO_PROJECT_SESSION} (bantam starts one)"


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


EDITOR_PREFIX = "acp-"  # the ids of sessions an editor made (bantam acp)


def continued(directory: str | os.PathLike) -> str:
    """The session `bantam -c` continues in `directory`: of the project's own (its autosave) and
    those an editor made in that folder, the one saved last; the project's own when none is."""
    chosen = project_id(directory)
    newest = _mtime(path_of(chosen))
    folder = str(Path(directory).resolve())
    for session_id in session_ids():
        if session_id.startswith(EDITOR_PREFIX):
            updated = _mtime(path_of(session_id))
            if updated > newest and _project_of(path_of(session_id)) == folder:
                chosen, newest = session_id, updated
    return chosen


def _project_of(path: Path) -> str:
    """The folder a session file's head record names ("" when it names none)."""
    try:
        with open(path, "rb") as f:
            head = json.loads(f.readline(1 << 16))
    except (OSError, ValueError):
        return ""
    return str(head.get("project", "")) if isinstance(head, dict) and "role" not in head else ""


def count(messages: list[dict]) -> int:
    """How many messages a conversation holds, as every listing and notice says it: the system
    prompt is not one (it is not saved, and is rebuilt on load)."""
    return sum(1 for m in messages if m.get("role") != "system")


# What closes a turn that ended without an answer (see close_turn).
INTERRUPTED = "[no answer: the user interrupted this request]"


def close_turn(messages: list[dict], why: str = INTERRUPTED) -> bool:
    """Close a turn that ended without an answer (Ctrl+C, Stop, a failed request, an empty reply)
    with an assistant message saying so. Without it the next prompt would follow this one
    unanswered (two user messages in a row) and the model would answer both as one request; with
    it the model sees this request as abandoned, and any step it completed (a file written)
    stays known. True when a message was added."""
    if not messages or messages[-1].get("role") not in ("user", "tool"):
        return False
    messages.append({"role": "assistant", "content": why})
    return True


def check_id(name: str) -> str:
    if not VALID_ID.match(name):
        raise SessionError(f"session name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def given_id(name: str, option: str) -> str:
    """A session or thread name given on the command line (`--thread ID`): one no file can have
    is bad usage (ConfigError, exit 2), said before anything runs."""
    if not VALID_ID.match(name):
        raise ConfigError(f"{option} {name!r}: a name is letters, digits, '.', '_' or '-' (at most 100, "
                          f"starting with a letter or digit)")
    return name


def path_of(session_id: str) -> Path:
    """The file of a session: its `.jsonl`, else an old `.json`, else where a new one goes."""
    new = sessions_dir() / f"{check_id(session_id)}{SUFFIX}"
    old = new.with_suffix(OLD_SUFFIX)
    return old if not new.exists() and old.exists() else new


def exists(session_id: str) -> bool:
    return path_of(session_id).exists()


class SessionLog:
    """One session file as JSON Lines: the head record, then the messages (no system prompt)."""

    def __init__(self, session_id: str, project: str | os.PathLike = "."):
        self.id = check_id(session_id)
        self.log = JsonlLog(sessions_dir() / f"{session_id}{SUFFIX}", owned=True, limit=MAX_SESSION_BYTES)
        self.head: dict = {"session": session_id, "project": str(Path(project).resolve()),
                           "created": time.time(), "model": "", "summary": ""}

    def read(self, heal: bool = True, notify: Notify | None = None) -> list[dict]:
        """The messages; SessionError when the file is damaged (a torn last line is only skipped)."""
        try:
            records = self.log.read(heal=heal)
        except (FileNotFoundError, NotADirectoryError):  # (a HOME under a file holds no session either)
            raise SessionError(f"no session {self.id!r}") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise SessionError(f"{self.log.path}: not a readable session ({e})") from None
        if self.log.torn and notify:
            notify(f"{self.log.path}:{self.log.torn}: the last message was cut off when bantam stopped "
                   "while saving; it was skipped")
        if records and "role" not in records[0]:
            self.head = records[0]
            records = records[1:]
        elif records:  # (an empty file, a crash before the first line was whole, is an empty session)
            raise SessionError(f"{self.log.path}: not a readable session (no head record)")
        if not all("role" in m for m in records):
            raise SessionError(f"{self.log.path}: not a readable session (a record without a role)")
        return records

    def sync(self, messages: list[dict], model: str = "", secret: str = "") -> Path:
        """Append what is new since the last sync, or rewrite the file when the list was replaced."""
        register_secret(secret)  # blanked as *** with every other known secret
        # the system prompt leads the list; skipping it by position keeps this step's cost flat
        records = [self.head, *messages[1 if messages and messages[0].get("role") == "system" else 0:]]
        if self.log.replaced(records):  # cleared or compacted: a new head, the old summary is gone
            self.head = records[0] = {**self.head, "created": time.time(), "summary": ""}
        self.head["model"] = self.head.get("model") or model
        private_dir(self.log.path.parent)
        self.log.sync(records)
        return self.log.path

    def rewrite(self, messages: list[dict], model: str = "", secret: str = "", summary: str = "") -> Path:
        """Write the whole file anew, atomically (/save, migrating an old `.json`)."""
        self.head = {**self.head, "created": time.time(), "model": model, "summary": summary}
        self.log.saved, self.log.last = 0, None
        self.log.stamp = (-1, -1)  # whatever is there now is replaced, not appended to
        path = self.sync(messages, model, secret)
        path.with_suffix(OLD_SUFFIX).unlink(missing_ok=True)  # now written as JSON Lines
        return path


def save(session_id: str, messages: list[dict], *, summary: str = "", model: str = "",
         secret: str = "", project: str | os.PathLike = ".") -> Path:
    """Write a session atomically (0600 in a 0700 directory); `secret` is blanked if it appears."""
    return SessionLog(session_id, project).rewrite(messages, model, secret, summary[:200])


def read(path: Path, notify: Notify | None = None) -> dict:
    """A session document (head keys and `messages`), or SessionError saying what is wrong with
    the file. Nothing is written: another bantam may be appending to it right now."""
    if path.suffix == SUFFIX:
        log = SessionLog(path.stem)
        records = log.read(heal=False, notify=notify)
        return {**log.head, "updated": _mtime(path), "messages": records}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SessionError(f"no session {path.stem!r}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SessionError(f"{path}: not a readable session ({e})") from None
    messages = doc.get("messages") if isinstance(doc, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise SessionError(f"{path}: not a readable session (no list of messages)")
    return {**doc, "messages": [m for m in messages if m["role"] != "system"]}  # as JSON Lines keep them


def session_ids() -> list[str]:
    """Every session's id, once, whichever format its file is in."""
    folder = sessions_dir()
    return sorted({p.stem for p in [*folder.glob(f"*{SUFFIX}"), *folder.glob(f"*{OLD_SUFFIX}")]
                   if VALID_ID.match(p.stem)})


def load(key: str, notify: Notify | None = None) -> tuple[str, list[dict]]:
    """The messages of the session with this exact id, or the only one whose id starts with it,
    or else the only one of the project folder named so (its name or its whole path): ids are
    hashes, folders are what a person remembers."""
    if VALID_ID.match(key) and exists(key):
        return key, read(path_of(key), notify)["messages"]
    matches = [i for i in session_ids() if i.startswith(key)] if key else []
    if not matches and key:
        matches = [s.id for s in listing() if s.project and key.rstrip("/") in (s.project, Path(s.project).name)]
    if not matches:
        raise SessionError(f"no session matches {key!r}; /list shows them")
    if len(matches) > 1:
        raise SessionError(f"{key!r} matches {len(matches)} sessions: {', '.join(matches[:5])}")
    return matches[0], read(path_of(matches[0]), notify)["messages"]


def delete(session_id: str) -> None:
    """Remove a session, in both formats if both are there."""
    for suffix in (SUFFIX, OLD_SUFFIX):
        (sessions_dir() / f"{check_id(session_id)}{suffix}").unlink(missing_ok=True)


def listing() -> list[SessionInfo]:
    """Every session, newest first; unreadable files are listed with the reason."""
    found = []
    for session_id in session_ids():
        path = path_of(session_id)
        try:
            doc = read(path)
            found.append(SessionInfo(session_id, float(doc.get("updated") or _mtime(path)), count(doc["messages"]),
                                     str(doc.get("summary") or first_request(doc["messages"])[:200]),
                                     str(doc.get("project", ""))))
        except (SessionError, OSError, TypeError, ValueError) as e:
            found.append(SessionInfo(session_id, _mtime(path), 0, "", problem=str(e)))
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


_HELD: dict[str, int] = {}  # lock file -> its flock'd descriptor, for the life of this process
ANOTHER = "another bantam"  # how Autosave.take's answer begins when another process holds the session


class Autosave:
    """Saves the conversation under the project's id, unless that file holds something unreadable
    or another process is saving it (see the module's note). After the first save each one
    appends only the messages that are new."""

    def __init__(self, directory: str | os.PathLike = ".", session_id: str | None = None):
        self.id = session_id or project_id(directory)  # another: an editor's session, continued
        self.file = SessionLog(self.id, directory)
        self.checked = False
        self.blocked = ""  # why autosave refuses to write
        self.other = ""    # set when this process cannot save at all: it never writes the session
        self.notice = ""   # said once: another process holds the session, this one saves under its own name
        self.lock: int | None = None  # the flock'd descriptor while this process owns the file

    def resume(self, notify: Notify | None = None) -> list[dict]:
        """The saved conversation, read so that the next save appends to it (bantam -c)."""
        if not exists(self.id):
            raise SessionError(f"no session {self.id!r}")
        if path_of(self.id).suffix == OLD_SUFFIX:
            messages = read(path_of(self.id), notify)["messages"]
        else:  # (read by the log that appends, unless this process saves under its own name)
            messages = (self.file if self.name == self.id else SessionLog(self.id)).read(notify=notify)
        self.adopt()
        return messages

    def __call__(self, messages: list[dict], model: str = "", secret: str = "") -> str:
        """Save; return a warning to show once when the file is not bantam's to overwrite, another
        bantam is saving it, or it cannot be written at all."""
        if self.other:
            return ""
        if self.claim():
            return self.other
        notice, self.notice = self.notice, ""
        return self.save(messages, model, secret) or notice

    def save(self, messages: list[dict], model: str, secret: str) -> str:
        if not self.checked:
            self.checked = True
            path = path_of(self.name)
            try:
                if path.suffix == SUFFIX:
                    self.file.read()  # heals a torn last line; then appends follow the good ones
                elif path.exists():
                    read(path)
            except SessionError as e:
                self.blocked = f"{e}; autosave will not overwrite it (move it away, or /save NAME)"
                return self.blocked
        if self.blocked:
            return ""
        try:
            if path_of(self.name).suffix == OLD_SUFFIX:
                self.file.rewrite(messages, model, secret)
            else:
                self.file.sync(messages, model, secret)
        except OSError as e:  # a read-only or missing HOME: the conversation goes on unsaved
            self.blocked = f"this conversation is not saved: {e.filename or sessions_dir()}: {e.strerror or e}"
            return self.blocked
        return ""

    def claim(self) -> str:
        """Hold the session for this process, if it does not yet; why it cannot ("" when held)."""
        if self.lock is None and not self.other:
            self.other = self.take(self.id)
            if self.other.startswith(ANOTHER):
                self.other = self.own_name()
        return self.other

    @property
    def name(self) -> str:
        """The session this process writes: the project's, or its own when another process held that."""
        return self.file.id

    def own_name(self) -> str:
        """Another process saves the project's session: this one saves its conversation as the
        first free `<id>-2`, `<id>-3`, ... (held the same way), so neither replaces the other and
        nothing is lost when either ends. Why not, when no name can be had."""
        holder = self.other
        for n in range(2, 100):
            name = f"{self.id}-{n}"
            if exists(name):
                continue
            why = self.take(name)
            if why.startswith(ANOTHER):
                continue
            if why:
                return why
            self.file, self.checked = SessionLog(name, self.file.head["project"]), True
            self.notice = f"{holder.split(';')[0]}; this one is saved as {name} (/load {name} resumes it)"
            return ""
        return holder

    def take(self, name: str) -> str:
        """Hold session `name` for this process (an flock the kernel drops when the process ends);
        why not, when another process holds it or the folder cannot be written. Within one
        process the lock is shared (JsonlLog's ownership check keeps two writers there apart)."""
        path = sessions_dir() / f"{name}.lock"
        if str(path) in _HELD:
            self.lock = _HELD[str(path)]
            return ""
        try:
            private_dir(path.parent)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            return f"this conversation is not saved: {e.filename or path.parent}: {e.strerror or e}"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 20).decode("ascii", "replace").strip()
            os.close(fd)
            return (f"{ANOTHER}{f' (pid {holder})' if holder.isdigit() else ''} is saving this "
                    "project's conversation; this one is not saved there, so neither replaces the "
                    "other (/save NAME keeps this one)")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())  # named in the second one's notice
        self.lock = _HELD[str(path)] = fd
        return ""

    def adopt(self) -> None:
        """The file was just loaded (so it is readable) or replaced on purpose: ours to write
        (unless another process holds it: that stays so)."""
        self.checked, self.blocked = True, ""


def threads_dir() -> Path:
    return _threads_in(bantam_home())


@lru_cache(maxsize=16)
def _threads_in(home: Path) -> Path:
    return home / "threads"  # a batch task asks about ten times: the path is made once per home


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
