"""The boundary around what the model runs: bubblewrap around its commands, the same writable roots
for write_file, and the words that tell the model and the user where the boundary is.

    sandbox=off        commands run with the user's full rights
    sandbox=workspace  the filesystem is read-only except the writable roots (sandbox_writable,
                       default the working directory) and the session's /tmp; .git, .bantam.cfg,
                       model.cfg, .mcp.json, ~/.bantam and ~/.config/bantam stay read-only inside
                       them (for file writes at any depth; a write never leaves them by a link);
                       network off unless sandbox_network=on; a private process namespace; the
                       command dies with bantam
    sandbox=read-only  nothing writable but the session's /tmp

/tmp is private: the host's is not visible (its sockets, other users' files). A session's commands
share one /tmp of their own, a folder kept between them in ~/.bantam/tmp (`session_tmp`; the
result of a command that leaves a new file there says where it is on the host); a command run
without a session (a controlled run's checks, the daemon) gets an empty tmpfs of its own.

In both modes ~/.bantam and ~/.config/bantam (wherever $BANTAM_HOME and $XDG_CONFIG_HOME put them)
are empty and read-only to commands, but for the folder of clipped tool output (the model is given
those paths) and bantam_tools_dir; a writable root inside them is refused. With the network off,
a seccomp filter (bantam.seccomp) lets a command open only IPv4 and IPv6 sockets, which reach the
command's own loopback, and netlink's route and socket-diagnostic sockets: Unix-domain sockets
(files, not network), vsock, packet and every other family cannot be opened.

One `Sandbox` serves one command: `wrap` builds the bubblewrap argv (and looks at the protected
names in each writable root, at every depth), `settle` removes a protected name the command
created, at any depth, and explains a refusal to the model. There is no silent fallback: without
a working bubblewrap a sandboxed command is not run, and the result says why and what to do.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from . import seccomp
from .errors import Refused, ToolError
from .fsutil import ANYWHERE, Boundary, bantam_home, guarded_dirs, private_dir, read_inside, user_config_dir

if TYPE_CHECKING:
    from .config import Config


R = TypeVar("R", bound="CommandResult")


class CommandResult(Protocol):
    """What `settle` reads and amends of a finished command (tools.shell's ShellResult), declared
    here so that the sandbox does not import the tools above it."""
    output: str
    exit_code: int

# Read-only inside every writable root: bantam's project files, and git's (whose hooks and config
# run commands outside the sandbox). For file writes at any depth; for commands, the existing ones
# at any depth are bound read-only, and one a command creates, at any depth, is removed after it
# (bubblewrap can bind only names that exist; `look` finds both).
PROTECTED_NAMES = (".git", ".bantam.cfg", "model.cfg", ".mcp.json")
PROTECTED_WHY = {  # the model is told why a protected name it created was removed
    ".git": "the user's next git command there would run its hooks and configuration outside the sandbox",
    ".bantam.cfg": "bantam reads it as configuration at its next start",
    "model.cfg": "bantam reads it as configuration at its next start",
    ".mcp.json": "bantam would start the servers it names",
}
# What a command's output says when the boundary stopped it (the kernel's and common tools' words).
WRITE_REFUSED = ("Read-only file system",)
# A failed command's output that names a connection or a name lookup (curl's "Couldn't connect to
# server", Python's "ConnectionRefusedError", Node's "ECONNREFUSED", "Could not resolve host", ...),
# or a command line that reaches for the network (a URL, an address, a program that only talks to
# one): with the network off, the model is told that this is why, localhost included.
NETWORK_REFUSED = re.compile(r"connect|resolv|unreachable|getaddrinfo|name resolution|no route to host|"
                             r"name or service not known|network", re.IGNORECASE)
NETWORK_COMMAND = re.compile(r"://|\blocalhost\b|\b\d{1,3}(\.\d{1,3}){3}\b|"
                             r"(^|[\s;&|(])(curl|wget|nc|ncat|ssh|scp|sftp|rsync|ping|telnet|ftp|dig|nslookup)\b")
TMP_PATH = re.compile(r"(?<![\w.~/-])/tmp/")  # a path under /tmp itself (not /var/tmp/...)
SOCKET_REFUSED = "Operation not permitted"  # EPERM: the seccomp filter (bantam.seccomp) refused a socket
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


@dataclass
class Sandbox:
    mode: str = "off"
    roots: tuple[Path, ...] = ()  # writable (workspace mode), absolute and resolved
    network: bool = False
    looked: list[Tree] = field(default_factory=list)  # each root's protected names as the command started
    can_escalate: bool = False  # shell_exec's `escalate` is offered: a person is there to ask
    readonly: tuple[Path, ...] = ()  # more paths kept read-only inside the roots (the daemon's own files)
    concealed: tuple[Path, ...] = ()  # files commands see as empty (the daemon's config.json: its keys)
    reveal: tuple[Path, ...] = ()  # shown again, read-only, inside a hidden guarded dir (bantam_tools_dir)
    fds: list[int] = field(default_factory=list)  # open for the wrapped command's start (the seccomp filter)
    argv: list[str] = field(default_factory=list)  # the command as `wrap` was given it, for `settle`'s notes
    tmp: Path | None = None  # the session's folder that commands see as /tmp; None: an empty tmpfs each
    tmp_seen: set[str] = field(default_factory=set)  # what `wrap` found in it (and its mount points)
    passthrough: tuple[str, ...] = ()  # env_passthrough: secret-looking variables commands still see

    @classmethod
    def for_config(cls, cfg: Config, cwd: str | os.PathLike | None = None, tmp: Path | None = None) -> Sandbox:
        """The boundary `cfg` asks for, around a command run in `cwd`, the session's folder (every
        front end passes one; None only for a library caller's hand-built context: paths as given),
        with `tmp` as its /tmp (the session's, `session_tmp`; None: an empty one per command)."""
        base = Path(os.path.realpath(cwd if cwd is not None else os.curdir))
        roots: tuple[Path, ...] = ()
        if cfg.sandbox == "workspace":
            roots = tuple(Path(os.path.realpath(base / Path(r).expanduser())) for r in cfg.sandbox_writable) \
                or (base,)
        tools = cfg.bantam_tools_dir  # the model is told to run these: visible even under ~/.bantam
        reveal = (Path(os.path.realpath(Path(tools).expanduser())),) if tools else ()
        return cls(cfg.sandbox, roots, cfg.sandbox_network, reveal=reveal, passthrough=tuple(cfg.env_passthrough),
                   tmp=tmp)

    @property
    def on(self) -> bool:
        return self.mode != "off"

    # --- commands --------------------------------------------------------------------------

    def wrap(self, argv: list[str], cwd: str | os.PathLike | None = None) -> list[str]:
        """`argv` inside bubblewrap, started in `cwd` (default: the process's folder). The working
        directory is visible, read-only where it is not writable, at its own path wherever it
        lives (under /tmp too, which the command sees private), and is the command's folder: a
        command never starts elsewhere because its folder is hidden. Raises ToolError (never runs
        unsandboxed) when bubblewrap cannot work here."""
        if not self.on:
            return argv
        problem = unavailable()
        if problem:
            raise ToolError(f"not run: {problem}")
        missing = [str(root) for root in self.roots if not root.is_dir()]
        if missing:
            raise ToolError(f"not run: sandbox_writable names no directory at {', '.join(missing)}")
        self._refuse_roots_in_guarded()
        self.release()
        self.argv = list(argv)
        self.looked = [look(root) for root in self.roots]  # before the command: `settle` compares
        hidden = self.hidden()
        here = Path(os.path.realpath(cwd if cwd is not None else os.curdir))
        # under the private /tmp, shown again read-only: bantam's own Python, the folders a fixed
        # command names, the tools folder the model is told to run (bantam_tools_dir) and the folder
        # the command starts in
        shown = [*interpreter_under_tmp(), *named_under_tmp(argv), *under_tmp(self.reveal),
                 *([] if self._in_root(here) else under_tmp([here]))]
        if self.tmp is not None:  # bubblewrap makes the mount points of what it binds below /tmp in it
            self.tmp_seen = {*_entries(private_dir(self.tmp)), *(p.parts[2] for p in (*shown, *self.roots)
                                                                 if p.parts[:2] == ("/", "tmp") and len(p.parts) > 2)}
        prefix = bwrap_prefix(self.roots, self.network, self.protected(), shown, hidden, revealed(hidden, self.reveal),
                              self.tmp)
        prefix += ["--chdir", str(here)]
        for path in self.concealed:  # after the roots and protected binds: this mount wins
            if path.is_file():
                prefix += ["--ro-bind", "/dev/null", str(path)]
        if not self.network:
            prefix += self._unix_socket_filter()
        return [*prefix, "--", *argv]

    def release(self) -> None:
        """Close what `wrap` opened for the command's start; call once the command has started."""
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)

    def hidden(self) -> list[Path]:
        """The guarded dirs that commands see as empty and read-only: bantam's state and the
        user's bantam configuration hold keys, tokens and trust decisions, and reading them is
        enough to leak a key (redaction only knows the literal string, not its base64). A missing
        one inside a writable root is made (empty, 0700) so that it is covered too: a command
        could otherwise create ~/.config/bantam/config there for bantam's next start."""
        hidden = []
        for guarded in guarded_dirs():
            if not guarded.is_dir() and self._in_root(guarded) and not os.path.lexists(guarded):
                private_dir(guarded)
            if guarded.is_dir():
                hidden.append(guarded)
        return hidden

    def _refuse_roots_in_guarded(self) -> None:
        """A writable root inside (or equal to) a guarded dir would be hidden with it, and writing
        there means writing bantam's own state: the command is not run, and the words say why."""
        for root in self.roots:
            for guarded in guarded_dirs():
                if _within(root, guarded):
                    raise ToolError(f"not run: the writable root {root} lies inside {guarded}, bantam's "
                                    "own folder, which commands cannot see or change; run bantam (or "
                                    "set sandbox_writable) in a folder outside it")

    def _unix_socket_filter(self) -> list[str]:
        """`--seccomp FD` with the filter that refuses every socket family but IPv4, IPv6 and
        netlink's route and socket-diagnostic protocols (bantam.seccomp), the fd kept
        in self.fds for the start. Raises ToolError when bubblewrap cannot apply it here."""
        code = seccomp.program()
        if code is None:  # an architecture the filter does not know: describe() says so
            return []
        problem = filter_unavailable()
        if problem:
            raise ToolError(f"not run: {problem}")
        fd = seccomp.program_fd(code)
        self.fds.append(fd)
        return ["--seccomp", str(fd)]

    def protected(self) -> list[Path]:
        """The existing paths that stay read-only although they lie inside a writable root."""
        inside = [p for tree in self.looked for p in tree.protected]  # at every depth, as `wrap` looked
        inside += [d for d in guarded_dirs() if d.exists() and self._in_root(d)]
        inside += [p for p in self.readonly if p.exists() and self._in_root(p)]
        return inside

    def settle(self, result: R) -> R:
        """After the command: remove every protected name it created, at any depth (a `.git` whose
        hooks or core.fsmonitor the user's next `git` there would run outside the sandbox; a config
        file bantam would read at its next start), saying so, and tell the model when the boundary
        is the likely cause of a failure."""
        notes = []
        looked, self.looked = self.looked, []
        made = {path: (before.root, ident) for before in looked for path, ident in before.made(look(before.root))}
        for path, (root, ident) in made.items():  # (a root inside another, the daemon's, finds it twice)
            _remove_made(root, path, ident)
            notes.append(f"[sandbox: the command created {path}, which is protected at any depth "
                         f"({PROTECTED_WHY[path.name]}), so it was removed; {self.ask_hint}]")
        new = sorted(_entries(self.tmp) - self.tmp_seen) if self.tmp is not None and self.on else []
        if new:
            notes.append(f"[sandbox: /tmp is this session's own folder, kept between its commands: on the host "
                         f"it is {self.tmp} (the host's /tmp is not visible to commands); new there: "
                         f"{', '.join(new[:10])}{' ...' if len(new) > 10 else ''}]")
        if result.exit_code != 0 and self.on:
            notes += self.explain(result.output, " ".join(self.argv))
        if notes:
            result.output = result.output.rstrip("\n") + "\n" + "\n".join(notes)
        return result

    def explain(self, output: str, command: str = "") -> list[str]:
        """Notes for the model on a failed command whose output (or `command`) shows the boundary
        as the likely cause: a refused write, a path under the private /tmp, bantam's own folders
        (empty to commands), a connection or name lookup with the network off, a refused socket."""
        found = []
        if any(words in output for words in WRITE_REFUSED):
            found.append(f"[sandbox: writes are refused outside {self.writable_text()}, and to "
                         f".git, .bantam.cfg, model.cfg and .mcp.json; {self.ask_hint}]")
        # bantam's own folders as the shell spelled them or resolved; not the clipped output nor the
        # session's /tmp, which live there and which commands do see
        own = [str(d) for d in dict.fromkeys((*guarded_dirs(), bantam_home(), user_config_dir()))
               if re.search(re.escape(str(d)) + r"(?!/tool-output/|/tmp/)", output)]
        if own:
            found.append(f"[sandbox: {own[0]} is bantam's own folder (its keys, sessions and trust decisions): "
                         f"commands see it empty and cannot change it, whatever the mode; {self.ask_hint}]")
        if TMP_PATH.search(output) and "No such file or directory" in output:
            found.append(f"[sandbox: /tmp is this session's own ({self.tmp} on the host): the host's /tmp is "
                         "not visible; use the working directory for files the user needs]" if self.tmp else
                         "[sandbox: /tmp is private to each command: the host's /tmp and what earlier "
                         "commands left there are not visible; use the working directory instead]")
        if not self.network and (NETWORK_REFUSED.search(output) or NETWORK_COMMAND.search(command)):
            found.append(f"[sandbox: the network is off for commands (sandbox_network=off), localhost "
                         f"included: 127.0.0.1 is the command's own loopback, not the host's; {self.ask_hint}]")
        if not self.network and SOCKET_REFUSED in output and "socket" in output.lower():
            found.append(f"[sandbox: with the network off (sandbox_network=off), sockets other than "
                         f"IPv4/IPv6 on the command's own loopback (Unix-domain, vsock, packet, ...) "
                         f"cannot be opened, so no socket outside the sandbox can be reached; "
                         f"{self.ask_hint}]")
        return found

    # --- write_file, edit_file -------------------------------------------------------------

    def boundary(self) -> Boundary:
        """Where the model's file writes may land (fsutil.Boundary.write makes every one): the
        writable roots, less the protected names at any depth and bantam's own folders. With the
        sandbox off, anywhere: the user chose full rights."""
        if not self.on:
            return ANYWHERE
        guarded = (*guarded_dirs(), *self.readonly)
        # the session's /tmp is the commands' /tmp, so the file tools write there too (see `on_host`)
        tmp = (Path(os.path.realpath(private_dir(self.tmp))),) if self.tmp is not None else ()
        return Boundary((*self.roots, *tmp), frozenset(PROTECTED_NAMES), guarded, where=self.writable_text(),
                        granted=tmp)

    def may_write(self, path: str | os.PathLike) -> str:
        """"" if the boundary lets the model write `path`; otherwise why not, in words for the model.
        Only the question asked first: the write itself checks again, on what it writes."""
        try:
            self.boundary().locate(path)
        except Refused as e:
            return str(e)
        except ToolError:
            pass  # not a boundary matter (the path is a root itself): the write says what is wrong
        return ""

    def on_host(self, path: Path, folder: Path | None) -> Path:
        """Where `path`, as the model's commands see it, lies on the host: below /tmp, in the
        session's /tmp, but for what is shown there again at its own path (the writable roots, the
        session's `folder`, the tools folder, bantam's own Python). The file tools place every path
        with it, so read_file reads what a command wrote to /tmp, and a command finds there what
        write_file wrote. As given with the sandbox off, or with no session's /tmp."""
        if not self.on or self.tmp is None:
            return path
        full = Path(os.path.abspath(path))
        if full.parts[:2] != ("/", "tmp"):
            return path
        shown = (*self.roots, *self.reveal, *interpreter_under_tmp(),
                 *([Path(os.path.realpath(folder))] if folder is not None else []))
        if any(_within(full, p) for p in shown):
            return path
        return self.tmp.joinpath(*full.parts[2:])

    def _in_root(self, path: Path) -> bool:
        return any(_within(path, root) for root in self.roots)

    # --- words -----------------------------------------------------------------------------

    @property
    def ask_hint(self) -> str:
        """What the model can do about a refusal: escalate where a person can be asked, else say so."""
        return ASK_HINT if self.can_escalate else NO_ASK_HINT

    def writable_text(self, where: bool = True) -> str:
        """The writable roots and /tmp in words; `where`: with the host folder of the session's /tmp
        (not in the prompt, which stays the same from one session to the next)."""
        roots = ", ".join(str(r) for r in self.roots)
        tmp = "a private /tmp" if not self.tmp else f"this session's /tmp ({self.tmp} on the host)" if where \
            else "this session's own /tmp (kept between your commands)"
        return f"{roots} and {tmp}" if roots else tmp

    def describe(self) -> str:
        """One line for the user: what boundary is in force."""
        if not self.on:
            return "sandbox off: commands the model starts run with your full rights"
        problem = unavailable()
        if problem:
            return f"sandbox={self.mode} cannot work: {problem}"
        net = "on" if self.network else f"off{unix_sockets_note()}"
        home = f"; {self.home_warning()}" if self.home_warning() else ""
        return f"sandbox={self.mode}: commands may write only {self.writable_text()}; network {net}{home}"

    def home_warning(self) -> str:
        """Words for the user when their home folder itself is a writable root: ~/.bashrc, ~/.ssh
        and the like are then inside the boundary."""
        home = Path(os.path.realpath(Path.home()))
        if self.mode != "workspace" or home not in self.roots:
            return ""
        return (f"the writable root is your home folder itself ({home}): the model may change "
                "~/.bashrc, ~/.ssh and the like; start bantam in a project folder to keep them out")

    def for_prompt(self, approval: str, can_ask: bool) -> str:
        """One or two sentences for the system prompt: the boundary and how to ask for more. Only
        with a person to ask (`can_ask`) is shell_exec's `escalate` offered, and mentioned."""
        if not self.on:
            return ""
        warn_once(self.home_warning())  # at start-up: every front end builds its prompt here
        net = "on" if self.network else "off (localhost included)"
        ask = ("To run one command outside the sandbox, call shell_exec with `escalate` set to the "
               "reason; the user is asked." if approval != "never" and can_ask else
               "Nothing runs outside the sandbox; if you need more, say so in your answer.")
        return (f"Sandbox: your commands and file writes may go only to {self.writable_text(where=False)} "
                f"(.git, .bantam.cfg, model.cfg and .mcp.json stay read-only, at any depth); the network is {net}; background "
                f"processes end when the command returns. {ask}")


ASK_HINT = ("if the task needs this, call shell_exec again with `escalate` set to the reason "
            "(the user is asked) or tell the user; retrying the same way will fail the same way")
NO_ASK_HINT = ("nothing runs outside the sandbox here: if the task needs this, tell the user in your "
               "answer; retrying the same way will fail the same way")


def bwrap_prefix(roots: Iterable[Path], network: bool, protected: Iterable[Path],
                 visible: Iterable[Path] = (), hidden: Iterable[Path] = (),
                 reveal: Iterable[tuple[Path, Path]] = (), tmp: Path | None = None) -> list[str]:
    """The bubblewrap arguments: everything read-only, a private /tmp (`tmp` bound there, else an
    empty tmpfs), /dev and /proc, the
    `visible` paths again inside the private /tmp, then the writable roots, then the protected
    paths inside them, and last the `hidden` dirs as empty read-only tmpfs with the `reveal`
    (source, destination) pairs bound read-only inside them (later mounts win, so nothing bound
    before shows through a hidden dir). `--cap-drop ALL` matters when bantam runs as root: with
    its capabilities a command could remount / read-write. The IPC namespace is the command's own
    (the host's System V shared memory, semaphores and message queues are a way out that no mount
    closes), and so are the hostname (UTS) and, where the kernel has one, the cgroup namespace."""
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            *(("--bind", str(tmp), "/tmp") if tmp is not None else ("--tmpfs", "/tmp")),
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for path in visible:
        args += ["--ro-bind", str(path), str(path)]
    if not network:
        args.append("--unshare-net")
    for root in roots:
        args += ["--bind", str(root), str(root)]
    for path in protected:
        args += ["--ro-bind", str(path), str(path)]
    reveal = list(reveal)
    for path in hidden:
        args += ["--tmpfs", str(path)]
        for source, dest in reveal:  # its mount point is made in the tmpfs, before it turns read-only
            if _within(dest, path):
                args += ["--ro-bind", str(source), str(dest)]
        args += ["--remount-ro", str(path)]
    return args


def readable_own(tmp: Path | None) -> tuple[Path, ...]:
    """The folders inside bantam's own that the model's read tools still read and list (resolved):
    clipped tool output, which the model is pointed to, and the session's `tmp`, its commands' /tmp."""
    return tuple(Path(os.path.realpath(p)) for p in (bantam_home() / "tool-output", *([tmp] if tmp else [])))


def read_for_model(path: str | os.PathLike, shown: str, limit: int, refuse: Iterable[Path] = (),
                   tmp: Path | None = None) -> bytes:
    """The first `limit` bytes of a file an in-process read tool (read_file, read_image, read_pdf,
    the daemon's READ_FILE) is asked for, whatever the sandbox mode: what the model's commands can
    read, and no more (fsutil.read_inside: no kernel files, nothing of bantam's own folders, which
    commands see empty, nor the `refuse` files, nor a FIFO). Clipped tool output, which the model is
    pointed to, and the session's `tmp` (its commands' /tmp) stay readable. ToolError (one line)
    otherwise."""
    given = Path(os.path.abspath(Path(path).expanduser()))  # a library caller's relative path: from its folder
    real = Path(os.path.realpath(given))
    folder = next((p for p in readable_own(tmp) if _within(real, p)), Path("/"))
    try:
        return read_inside(folder, given, limit, shown=shown, refuse=refuse)
    except FileNotFoundError:
        raise ToolError(f"{shown} does not exist") from None
    except IsADirectoryError:
        raise ToolError(f"{shown} is a directory") from None
    except OSError as e:
        raise ToolError(f"cannot read {shown}: {e.strerror or e}") from None


NESTED_SCAN_ENTRIES = 50_000  # one look lists or stats at most this many entries (a huge tree is not walked whole)
# Not walked into: caches and installed packages (a virtualenv's site-packages is thousands of
# folders), where nobody runs git or bantam; a protected name in them is neither bound nor removed.
NESTED_SKIP = frozenset({"node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache", ".pytest_cache",
                         ".ruff_cache", "site-packages", "dist-packages"})
SETTLED_NS = 2_000_000_000  # a folder changed this close to its listing is listed again at the next look


@dataclass(frozen=True)
class Listing:
    """One folder as a look last listed it: a later change to its entries changes its stamp."""
    stamp: tuple[int, int, int]  # (st_dev, st_ino, st_ctime_ns), taken before the listing
    settled: bool                # its ctime is older than the listing by SETTLED_NS (see `look`)
    subdirs: tuple[str, ...]     # the folders in it that a look walks into
    names: tuple[tuple[str, tuple[int, int]], ...]  # the protected names in it, with (st_dev, st_ino)


@dataclass(frozen=True)
class Tree:
    """What one look at a writable root saw: every folder it listed (each entry of those is known
    as of the look), by path, and the protected names in them, top included, with their identities."""
    root: str
    listings: dict[str, Listing]

    @property
    def protected(self) -> list[Path]:
        return [Path(folder, name) for folder, listing in self.listings.items() for name, _ in listing.names]

    def made(self, after: Tree) -> list[tuple[Path, tuple[int, int]]]:
        """The protected names `after` (a later look at the same root) saw that were not there at
        this look: neither the same file or folder anywhere in it (a folder that holds one may be
        renamed: its `.git` is the user's, moved, not made) nor within a folder this look listed
        or one made since. A name in a folder this look did not reach (past NESTED_SCAN_ENTRIES)
        is not taken for new: it may be the user's. Each with its (st_dev, st_ino)."""
        known = {ident for listing in self.listings.values() for _, ident in listing.names}
        return [(Path(folder, name), ident) for folder, listing in after.listings.items()
                for name, ident in listing.names if ident not in known and self._absent_from(folder, name, after)]

    def _absent_from(self, folder: str, name: str, after: Tree) -> bool:
        """Whether this look shows that `folder`/`name` was not there: `folder` was listed and is
        the same folder now, and `name` was not in it; or `folder` itself was not there (new, or
        another folder moved to its place) by the same rule one level up."""
        before, now = self.listings.get(folder), after.listings.get(folder)
        if before is not None and now is not None and before.stamp[:2] == now.stamp[:2]:
            return name not in {n for n, _ in before.names} and name not in before.subdirs
        if before is not None:
            return True  # another folder at that path than the one listed: everything in it is new
        parent, _, base = folder.rpartition("/")
        if folder == self.root or not base:
            return False
        return self._absent_from(parent or "/", base, after)


_trees: dict[str, dict[str, Listing]] = {}  # each root's listings, kept between looks
_trees_lock = threading.Lock()  # parallel sub-agents' commands look at the same roots


def look(root: str | os.PathLike) -> Tree:
    """The protected names in `root` at every depth (`sub/.git`, `vendor/x/.bantam.cfg`, the
    top's own), as they are now: bubblewrap binds the existing ones read-only, and one that a
    command made is found by comparing a look before it with one after (Tree.made).

    Only a folder whose (device, inode, ctime) changed since the last look is listed again (a
    created, removed or renamed entry changes its folder's ctime, and a command cannot set a ctime
    back); the others cost one lstat each, so a look at an unchanged tree of N folders is N
    lstats (about 0.1 ms for this repository's 54). A folder whose ctime lies within SETTLED_NS
    of its listing is listed again at the next look: a change in the same clock tick as the
    listing would leave the ctime as it was. NESTED_SKIP, the protected names themselves and
    bantam's own folders are not walked into, and one look costs at most NESTED_SCAN_ENTRIES
    (an lstat or a listed entry each), breadth first, the top always; what it did not reach is
    listed at the next looks."""
    top = os.fspath(root)
    skip = {str(d) for d in guarded_dirs()}
    with _trees_lock:
        known = _trees.setdefault(top, {})
        seen: dict[str, Listing] = {}
        budget = NESTED_SCAN_ENTRIES
        todo = collections.deque([top])
        while todo and (budget > 0 or not seen):  # the top is always listed
            folder = todo.popleft()
            try:
                st = os.lstat(folder)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            budget -= 1
            stamp = (st.st_dev, st.st_ino, st.st_ctime_ns)
            listing = known.get(folder)
            if listing is None or listing.stamp != stamp or not listing.settled:
                now = time.time_ns()  # after the lstat: a change from here on shows in the next stamp
                try:
                    entries = list(os.scandir(folder))
                except OSError:
                    continue  # unreadable to bantam, so to the user's git: nothing to find
                budget -= len(entries)
                subdirs, names = _sort(folder, entries, skip)
                listing = Listing(stamp, st.st_ctime_ns < now - SETTLED_NS, subdirs, names)
            seen[folder] = listing
            todo.extend(os.path.join(folder, name) for name in listing.subdirs)
        if todo:
            known.update(seen)  # what this look did not reach keeps its last listing
        else:
            known.clear()  # folders that are gone are forgotten
            known.update(seen)
    return Tree(top, seen)


def _sort(folder: str, entries: list[os.DirEntry], skip: set[str]
          ) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[int, int]], ...]]:
    """(the folders to walk into, the protected names with their identities) of one listing."""
    subdirs, names = [], []
    for entry in entries:
        try:
            if entry.name in PROTECTED_NAMES:
                st = entry.stat(follow_symlinks=False)
                names.append((entry.name, (st.st_dev, st.st_ino)))
            elif (entry.name not in NESTED_SKIP and entry.is_dir(follow_symlinks=False)
                  and os.path.join(folder, entry.name) not in skip):
                subdirs.append(entry.name)
        except OSError:
            continue  # gone meanwhile
    return tuple(sorted(subdirs)), tuple(sorted(names))


def revealed(hidden: Iterable[Path], extra: Iterable[Path] = ()) -> list[tuple[Path, Path]]:
    """What stays visible, read-only, inside the hidden dirs, as (source, destination): the
    folder of clipped tool output, whose file paths the model is given to read in a later command
    (bantam wrote them, redacted; no configuration or key is there), and `extra` (the user's
    bantam_tools_dir, which the model is told to run)."""
    hidden = list(hidden)
    pairs = []
    home = Path(os.path.realpath(bantam_home()))
    output = Path(os.path.realpath(bantam_home() / "tool-output"))
    if home in hidden and output.is_dir():
        pairs.append((output, home / "tool-output"))  # where the model's path leads, link or not
    pairs += [(p, p) for p in extra if p.is_dir() and any(_within(p, h) for h in hidden)]
    return pairs


def interpreter_under_tmp() -> list[Path]:
    """The Python bantam runs on and bantam's own package, when they live under /tmp (a
    virtualenv, or an editable install of a clone made there): they stay visible, read-only, so
    that a controlled run's `{python}` check still starts and may import bantam (a run's test
    helpers: bantam.runs.testing)."""
    package = Path(__file__).resolve().parent.parent  # the folder that holds bantam/
    return under_tmp(Path(p) for p in (sys.prefix, sys.base_prefix, package))


TMP_KEEP = 7 * 86400  # seconds: a session's /tmp left unchanged this long goes when a new one is made
_tmp_numbers = itertools.count(1)


def session_tmp() -> Path:
    """A new session's /tmp: a name in ~/.bantam/tmp (the folder is made at its first command).
    The others there that nothing changed for TMP_KEEP are removed (their sessions are long over:
    a session whose folder went is given an empty one at its next command)."""
    folder = bantam_home() / "tmp"
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < time.time() - TMP_KEEP:
                shutil.rmtree(entry.path, ignore_errors=True)
    return folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_tmp_numbers)}"


def _entries(folder: Path | None) -> set[str]:
    try:
        return set(os.listdir(folder)) if folder is not None else set()
    except OSError:
        return set()


def under_tmp(paths: Iterable[Path]) -> list[Path]:
    """Those of `paths` (links resolved) that lie below /tmp, which the private /tmp would hide."""
    tmp = Path("/tmp")
    return sorted({Path(os.path.realpath(p)) for p in paths
                   if _within(Path(os.path.realpath(p)), tmp) and Path(os.path.realpath(p)) != tmp})


def named_under_tmp(argv: list[str]) -> list[Path]:
    """The folders of files a fixed command names by absolute path under /tmp (a controlled run's
    `{config_dir}/verify.py` in a clone made there): visible again, read-only, inside the private
    /tmp. A shell command's text is not an argument path, so nothing the model writes is widened."""
    tmp, found = Path("/tmp"), set()
    if argv[1:2] == ["-c"]:  # a shell's command line (the model's): text, never a path to show
        return []
    for arg in argv[1:]:
        if not arg.startswith("/tmp/"):
            continue
        real = Path(os.path.realpath(arg))
        folder = real if real.is_dir() else real.parent
        if real.exists() and _within(folder, tmp) and folder != tmp:
            found.add(folder)
    return sorted(found)


@functools.cache
def unavailable() -> str:
    """"" when bubblewrap works here; otherwise what is wrong and what to do (checked once)."""
    if shutil.which("bwrap") is None:
        return (f"the sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}, "
                "or set sandbox=off (--yolo)")
    try:
        probe = subprocess.run([*bwrap_prefix([], False, []), "--", "true"], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start: {e}"
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = said[-1] if said else f"exit {probe.returncode}"
        return (f"bubblewrap cannot create its namespaces here ({reason}); user namespaces may be "
                "disabled (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces, or "
                "Ubuntu's AppArmor userns restriction), or set sandbox=off (--yolo)")
    return ""


_warned: set[str] = set()


def warn_once(text: str) -> None:
    """A warning on stderr, once per process (the prompt is built again on every turn)."""
    if text and text not in _warned:
        _warned.add(text)
        print(f"bantam: warning: {text}", file=sys.stderr)


@functools.cache
def filter_unavailable() -> str:
    """"" when bubblewrap applies the socket filter here; otherwise what is wrong (checked
    once). Without it the network-off promise cannot be kept, so network-off commands do not run."""
    code = seccomp.program()
    if code is None or unavailable():
        return ""
    fd = seccomp.program_fd(code)
    try:
        probe = subprocess.run([*bwrap_prefix([], False, []), "--seccomp", str(fd), "--", "true"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False,
                               pass_fds=(fd,))
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start: {e}"
    finally:
        os.close(fd)
    if probe.returncode == 0:
        return ""
    said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
    return (f"bubblewrap cannot apply the seccomp filter that refuses every socket family but IPv4/IPv6 "
            f"(Unix-domain, vsock, packet, ...) with the network off "
            f"({said[-1] if said else f'exit {probe.returncode}'}); set sandbox_network=on "
            "(the network and every socket family open) or sandbox=off (--yolo)")


def unix_sockets_note() -> str:
    """Words after "network off" when the filter cannot be built for this machine."""
    if seccomp.program() is not None:
        return ""
    return (f" (but every socket family stays open, Unix-domain, vsock and packet among them: "
            f"bantam's seccomp filter does not know this machine's architecture, {os.uname().machine})")


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _remove_made(root: str, path: Path, ident: tuple[int, int]) -> None:
    """Remove `path`, a protected name a command made below `root`, if it is still the file or
    folder the look saw (`ident`). The way there is opened one folder at a time without following
    a link, and the removal happens inside the folder opened: bantam removes with the user's
    rights, so a folder on the way swapped for a link meanwhile (another command running in
    parallel) must not lead it to a `.git` outside the workspace."""
    parts = path.relative_to(root).parts
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in parts[:-1]:
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = below
        st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != ident:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(parts[-1], dir_fd=fd)
        else:
            os.unlink(parts[-1], dir_fd=fd)
    except OSError:
        pass  # gone meanwhile, or no longer a folder on the way: nothing of the command's to remove
    finally:
        os.close(fd)
