"""Approvals: when a person is asked before the model's command or write goes ahead.

    approval=never       nobody is ever asked; what the sandbox refuses stays refused
    approval=on-request  (default) asked only to cross the boundary: a command the model wants to
                         run outside the sandbox (shell_exec's `escalate`), a write outside the
                         writable roots
    approval=always      every command and every write is asked (what other agents call a "confirm" mode)

A front end with a person (the terminal, the browser) gives `Approvals` an `ask` function; every
other mode (one-shot, pipe, handler, daemon, controlled runs) has none, and then what needs
approval is refused with a result the model can read, never run and never waited on.
The answers: yes, no [reason], always (yes, and the same for this command prefix or directory for
the rest of the session), edit (run an edited command instead). "Always" never covers bantam's own
folders (fsutil.guarded_dirs) nor the protected names (sandbox.PROTECTED_NAMES) at any depth: a
write there, or a command that names one, is asked every time and offers no "always". For a
command that destroys what it touches (`rm`, `dd`, `mkfs`, `git push --force`: DESTRUCTIVE,
`destructive`), "always" covers that exact command only, and no earlier "always" for its prefix
covers it: `always 'git push'` does not let `git push --force` through.
"""
from __future__ import annotations

import fnmatch
import os
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError, ToolError
from .fsutil import Boundary
from .sandbox import PROTECTED_NAMES, Sandbox, guarded_dirs

if TYPE_CHECKING:
    from .config import Config

SHELL_SYNTAX = set(";&|<>`$(){}\n")  # a command with these may do more than its first words say
# Programs whose every use may destroy what they touch: an "always" for their prefix would let any
# later target through (`rm -rf build` today, `rm -rf ~` next), so it covers the exact command only.
DESTRUCTIVE = frozenset({"rm", "rmdir", "unlink", "shred", "dd", "truncate", "mkfs", "mke2fs", "mkswap",
                         "wipefs", "fdisk", "sfdisk", "sgdisk", "parted", "kill", "pkill", "killall",
                         "reboot", "shutdown", "halt", "poweroff"})
# git subcommands, and the words that make them discard work or rewrite what others see ("" : any use).
DESTRUCTIVE_GIT = {"push": ("-f", "--force", "--force-with-lease", "--mirror", "--delete", "-d", "--prune"),
                   "reset": ("--hard", "--keep", "--merge"), "clean": ("",), "restore": ("",),
                   "checkout": ("--", ".", "-f", "--force"), "branch": ("-D", "-d", "--delete", "-f", "--force"),
                   "stash": ("drop", "clear"), "filter-branch": ("",), "filter-repo": ("",),
                   "update-ref": ("-d",), "reflog": ("expire", "delete"), "rebase": ("",)}


@dataclass(frozen=True)
class Request:
    action: str   # "run" (in the sandbox, if any), "escape" (run outside it) or "write"
    text: str     # the full command line, or the path written
    why: str      # why a person is asked
    prefix: str   # what "always" allows from now on: the command's first words, or a directory;
                  # "" when no "always" is offered, and then no earlier one covers the request
    exact: bool = False  # "always" covers this very command only, and only such an "always" covers it


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    text: str = ""       # yes: the command to run (edited or not); no: the person's reason
    remember: bool = False
    within: str = ""     # allowed by an earlier "always": the prefix (directory) that covered it


Ask = Callable[[Request], Verdict]


@dataclass
class Approvals:
    """One session's person: how to ask them, and which prefixes they allowed for the session."""
    ask: Ask | None = None
    allowed: set[tuple[str, str, bool]] = field(default_factory=set)  # (action, prefix, exact)
    lock: threading.Lock = field(default_factory=threading.Lock)  # parallel sub-agents ask in turn

    def decide(self, request: Request) -> Verdict:
        covered = self._remembered(request)
        if covered:
            return Verdict(True, request.text, within=covered)
        if self.ask is None:
            raise ToolError(f"{_refused(request)}: this needs a person's approval ({request.why}) and "
                            "there is no one to ask in this mode; do it within the sandbox, or say in "
                            "your answer what you need and why")
        with self.lock:
            verdict = self.ask(request)
        if verdict.allowed and verdict.remember and request.prefix:
            self.allowed.add((request.action, request.prefix, request.exact))
        if not verdict.allowed:
            reason = f": {verdict.text}" if verdict.text else ""
            raise ToolError(f"{_refused(request)}: the user declined{reason}")
        return verdict

    def _remembered(self, request: Request) -> str:
        """The earlier "always" that covers `request` (its prefix), or ""."""
        if not request.prefix or SHELL_SYNTAX & set(request.text):
            return ""  # offers no "always" itself (`ls; rm -rf ~` must not pass as `ls`)
        if request.action == "write":
            return max((where for action, where, _ in self.allowed
                        if action == "write" and _inside(request.prefix, where)), key=len, default="")
        words = request.text.split()
        # "always" for a command in the sandbox never lets it out: the action must match too
        return next((p for action, p, exact in self.allowed if action == request.action and (
            " ".join(words) == p if exact or request.exact else words[:len(p.split())] == p.split())), "")


def command_prefix(command: str) -> str:
    """The program and, when it has one, its subcommand: `git commit`, `npm install`, `pytest`;
    "" (nothing to remember) for a command with shell syntax, which may do more than that."""
    if SHELL_SYNTAX & set(command):
        return ""
    words = command.split()
    if len(words) > 1 and not words[1].startswith("-") and words[1].isidentifier():
        return " ".join(words[:2])
    return words[0] if words else ""


def destructive(command: str) -> str:
    """Why "always" may cover only this exact `command` (a word of it is a DESTRUCTIVE program,
    as a path too: `/bin/rm`, quoted too: `bash -c 'rm -rf x'`; or git discards or rewrites with
    it: DESTRUCTIVE_GIT), or ""."""
    words = [w for w in re.split(r"[\s'\"]+", command) if w]
    for n, word in enumerate(words):
        program = os.path.basename(word)
        if program in DESTRUCTIVE or program.startswith("mkfs."):
            return f"{program} destroys what it touches"
        if program == "git" and (sub := _git_destroys(words[n + 1:])):
            return f"git {sub} may discard work or rewrite what others see"
    if "find" in (os.path.basename(w) for w in words) and "-delete" in words:
        return "find -delete destroys what it finds"
    return ""


def _git_destroys(words: list[str]) -> str:
    """The subcommand of `git WORDS` when DESTRUCTIVE_GIT marks it (`push --force`, `reset --hard`,
    `push origin +main`), else ""; git's own options before it (`-C DIR`, `-c k=v`) are passed over."""
    n = 0
    while n < len(words) and words[n].startswith("-"):
        n += 2 if words[n] in ("-C", "-c", "--git-dir", "--work-tree") else 1
    if n >= len(words):
        return ""
    sub, rest = words[n], words[n + 1:]
    marks = DESTRUCTIVE_GIT.get(sub, ())
    if "" in marks or any(w in marks or (sub == "push" and w.startswith("+")) for w in rest):
        return sub
    return ""


def check_command(cfg: Config, approvals: Approvals, command: str, escalate: str = "",
                  cwd: str | os.PathLike | None = None) -> tuple[str, Sandbox]:
    """How the model's command runs: (the command, the sandbox around it). Raises ToolError with
    the reason when it is refused."""
    box = Sandbox.for_config(cfg, cwd)
    box.can_escalate = box.on and approvals.ask is not None and cfg.approval != "never"
    own = names_own(command, cwd)
    danger = "" if own else destructive(command)
    prefix = "" if own or not command_prefix(command) else " ".join(command.split()) if danger \
        else command_prefix(command)
    if escalate.strip() and box.on:
        if cfg.approval == "never":
            raise ToolError(f"not run: approval=never, so no command runs outside the sandbox "
                            f"({box.describe()}); do it within the sandbox or tell the user what you need")
        why = f"the model asks to run this outside the sandbox: {escalate.strip()}"
        verdict = approvals.decide(Request("escape", command, _every_time(why, own, danger), prefix, bool(danger)))
        return verdict.text or command, Sandbox(passthrough=box.passthrough)
    if cfg.approval == "always":
        verdict = approvals.decide(Request("run", command, _every_time("approval=always", own, danger), prefix,
                                           bool(danger)))
        return verdict.text or command, box
    return command, box


def names_own(command: str, cwd: str | os.PathLike | None = None) -> str:
    """Why no earlier "always" may cover `command` (a word of it names a protected name, or leads
    into bantam's own folders, as a shell would expand it: quotes, `~`, globs), or ""."""
    try:
        words = shlex.split(command)
    except ValueError:
        return "its words cannot be told apart"
    for word in words:
        reason = own_path(word, cwd)
        if reason:
            return reason
    return ""


def own_path(path: str, cwd: str | os.PathLike | None = None) -> str:
    """Why a remembered approval never covers `path` (from `cwd`): "<name> is protected at any
    depth" or "<folder> is bantam's own folder", matched as a glob too (`.gi?` is `.git` to a
    shell) and with its links resolved; "" for any other path."""
    given = os.path.join(cwd or os.curdir, os.path.expanduser(path))
    for candidate in dict.fromkeys((os.path.abspath(given), os.path.realpath(given))):
        parts = Path(candidate).parts
        for name in PROTECTED_NAMES:
            if any(fnmatch.fnmatchcase(name, part) for part in parts):
                return f"{name} is protected at any depth"
        for folder in guarded_dirs():
            if _inside(candidate, str(folder)) or any(fnmatch.fnmatchcase(str(folder), os.path.join(*parts[:n]))
                                                     for n in range(2, len(parts) + 1)):
                return f"{folder} is bantam's own folder"
    return ""


def _every_time(why: str, own: str, danger: str = "") -> str:
    if danger:
        return f"{why}; {danger}, so 'always' covers only this exact command"
    return f"{why}; {own}, so it is asked every time" if own else why


def check_write(cfg: Config, approvals: Approvals, path: str,
                cwd: str | os.PathLike | None = None, tmp: Path | None = None) -> Boundary:
    """Let a file write or edit of `path` go ahead, or raise ToolError saying why not. `path` is
    absolute or from the process's folder; `cwd` places the writable roots; `tmp` is the session's
    /tmp (written like a root when the sandbox is on). Returns the boundary
    the write is then made in (`Boundary.write`, which checks again on what it writes): the
    sandbox's; for a write outside it that a person allowed, the folder they were shown; with the
    sandbox off, anywhere."""
    box = Sandbox.for_config(cfg, cwd, tmp)
    outside = box.may_write(path)
    if outside and cfg.approval == "never":
        raise ToolError(f"not written: {outside} (sandbox={box.mode}, approval=never)")
    if outside or cfg.approval == "always":
        where = os.path.dirname(os.path.realpath(os.path.expanduser(path)))
        own = own_path(path, cwd)
        why = f"write outside the sandbox: {outside}" if outside else "approval=always"
        verdict = approvals.decide(Request("write", path, _every_time(why, own), "" if own else where))
        if outside and own:  # asked this very time, for this path: written as the person saw it
            return Boundary((_existing(Path(where)),))
        if outside:  # there, and only there (its missing folders are made by the write), walked from
            # the folder the person allowed without following a link, and never into bantam's own
            # folders or a protected name: a link swapped in after this check cannot lead there
            return Boundary((_existing(Path(verdict.within or where)),), frozenset(PROTECTED_NAMES),
                            guarded_dirs(), where=verdict.within or where)
    return box.boundary()


def _existing(folder: Path) -> Path:
    while not folder.is_dir() and folder.parent != folder:
        folder = folder.parent
    return folder


def _refused(request: Request) -> str:
    return "not written" if request.action == "write" else "not run"


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# --- a person changing the boundary from the session (/sandbox), as Codex's /approvals does ---

SANDBOX_USAGE = ("usage: /sandbox [off|workspace|read-only] [network on|off] [approval never|on-request|always] "
                 "[forget]: for this session only, nothing is written (/cfg writes a key to a file)")
SANDBOX_WORDS = {"sandbox": ("off", "workspace", "read-only"), "sandbox_network": ("on", "off"),
                 "approval": ("never", "on-request", "always")}


def boundary_words(arg: str) -> tuple[dict[str, str], bool]:
    """`/sandbox ARG` read as (the configuration keys it sets, whether "forget" was said: this
    session's "always" answers are dropped). ConfigError with the usage for anything else."""
    words, keys, forget = arg.lower().split(), {}, False
    while words:
        word = words.pop(0)
        key = "sandbox" if word in SANDBOX_WORDS["sandbox"] else {"network": "sandbox_network",
                                                                   "approval": "approval"}.get(word, "")
        value = word if key == "sandbox" else words.pop(0) if key and words else ""
        if word == "forget":
            forget = True
        elif not key or value not in SANDBOX_WORDS[key]:
            raise ConfigError(SANDBOX_USAGE)
        else:
            keys[key] = value
    return keys, forget


def remembered(approvals: Approvals) -> str:
    """This session's "always" answers, in words, or ""."""
    said = {"run": "run '{}'", "escape": "run '{}' outside the sandbox", "write": "write in {}"}
    return ", ".join(said[action].format(prefix) + (" (exactly)" if exact else "")
                     for action, prefix, exact in sorted(approvals.allowed))


# --- asking in a terminal (and the browser, which lends the terminal's `read`) ---------------


@dataclass(frozen=True)
class Choice:
    """One answer a question offers. Its first letter, typed, gives it; a page's button sends that."""
    word: str          # as offered: "yes", "always 'git commit'"
    more: str = ""     # words that may follow it when typed: "reason" (offered as "[n]o [reason]")
    draft: str = ""    # what those words start from, for a front end that lets them be edited

    @property
    def answer(self) -> str:
        return self.word[0]

    @property
    def label(self) -> str:
        return f"[{self.answer}]{self.word[1:]}" + (f" [{self.more}]" if self.more else "")


# A person's answer to a question, given the choices it offers (none: any text).
Read = Callable[[str, tuple[Choice, ...]], str]
YES_NO = (Choice("yes"), Choice("no"))


def choices(request: Request) -> tuple[Choice, ...]:
    """What a person may answer to `request`, in the order it is offered."""
    always = () if not request.prefix else (Choice("always this exact command"),) if request.exact \
        else (Choice(f"always '{request.prefix}'"),) if request.action != "write" \
        else (Choice(f"always in {request.prefix}"),)
    edit = () if request.action == "write" else (Choice("edit", draft=request.text),)
    return (Choice("yes"), Choice("no", more="reason"), *always, *edit)


def terminal_ask(read: Read, show: Callable[[str], None]) -> Ask:
    """Ask through the REPL's line reader: the request in full, then one line of answer."""
    def ask(request: Request) -> Verdict:
        question = {"run": "run this?", "escape": "run this outside the sandbox?",
                    "write": "write this?"}[request.action]
        show(f"approval needed ({request.why}): {request.text}")
        offered = choices(request)
        given = {c.answer for c in offered}
        listed = " / ".join(c.label for c in offered)
        while True:
            try:
                line = read(f"{question} {listed}: ", offered).strip()
            except EOFError:
                return Verdict(False, "no answer")
            word, _, rest = line.partition(" ")
            word = word.lower()
            if word in ("y", "yes"):
                return Verdict(True, request.text)
            if word in ("n", "no"):
                return Verdict(False, rest.strip())
            if word in ("a", "always") and "a" in given:
                return Verdict(True, request.text, remember=True)
            if word in ("e", "edit") and "e" in given:
                new = rest.strip() or read("command to run instead: ", ()).strip()
                if new:
                    return Verdict(True, new)
            show(f"answer {listed}")
    return ask
