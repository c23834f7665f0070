"""The boundary around what the model runs: bubblewrap around its commands, the same writable roots
for write_file, and the words that tell the model and the user where the boundary is.

    sandbox=off        the seeds' way: commands run with the user's full rights
    sandbox=workspace  the filesystem is read-only except the writable roots (sandbox_writable,
                       default the working directory) and a private /tmp; .git, .bantam.cfg,
                       model.cfg, ~/.bantam and ~/.config/bantam stay read-only inside them;
                       network off unless sandbox_network=on; a private process namespace; the
                       command dies with bantam
    sandbox=read-only  nothing writable but a private /tmp

One `Sandbox` serves one command: `wrap` builds the bubblewrap argv (and notes which protected
names were absent), `settle` removes a protected file the command created and explains a refusal
to the model. There is no silent fallback: without a working bubblewrap a sandboxed command is
not run, and the result says why and what to do.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ToolError
from .fsutil import bantam_home

if TYPE_CHECKING:
    from .config import Config
    from .tools.shell import ShellResult

PROTECTED_NAMES = (".git", ".bantam.cfg", "model.cfg")  # read-only inside every writable root
# What a command's output says when the boundary stopped it (the kernel's and common tools' words).
WRITE_REFUSED = ("Read-only file system",)
NETWORK_REFUSED = ("Network is unreachable", "Could not resolve host", "Temporary failure in name resolution",
                   "Name or service not known", "Connection refused", "No address associated with hostname")
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


def _user_config_dir() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "bantam"


def guarded_dirs() -> tuple[Path, ...]:
    """bantam's own state and the user's bantam configuration: never writable by the model."""
    return tuple(Path(os.path.realpath(p)) for p in (bantam_home(), _user_config_dir()))


@dataclass
class Sandbox:
    mode: str = "off"
    roots: tuple[Path, ...] = ()  # writable (workspace mode), absolute and resolved
    network: bool = False
    absent: list[Path] = field(default_factory=list)  # protected names missing when the command started
    can_escalate: bool = False  # shell_exec's `escalate` is offered: a person is there to ask

    @classmethod
    def for_config(cls, cfg: Config, cwd: str | os.PathLike | None = None) -> Sandbox:
        """The boundary `cfg` asks for, around a command run in `cwd` (default: the current directory)."""
        base = Path(os.path.realpath(cwd or os.getcwd()))
        roots: tuple[Path, ...] = ()
        if cfg.sandbox == "workspace":
            roots = tuple(Path(os.path.realpath(base / Path(r).expanduser())) for r in cfg.sandbox_writable) \
                or (base,)
        return cls(cfg.sandbox, roots, cfg.sandbox_network)

    @property
    def on(self) -> bool:
        return self.mode != "off"

    # --- commands --------------------------------------------------------------------------

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` inside bubblewrap. Raises ToolError (never runs unsandboxed) when bubblewrap
        cannot work here."""
        if not self.on:
            return argv
        problem = unavailable()
        if problem:
            raise ToolError(f"not run: {problem}")
        missing = [str(root) for root in self.roots if not root.is_dir()]
        if missing:
            raise ToolError(f"not run: sandbox_writable names no directory at {', '.join(missing)}")
        self.absent = [p for p in self._protected_candidates() if not os.path.lexists(p)]
        prefix = bwrap_prefix(self.roots, self.network, self.protected(), interpreter_under_tmp())
        return [*prefix, "--", *argv]

    def protected(self) -> list[Path]:
        """The existing paths that stay read-only although they lie inside a writable root."""
        inside = [p for p in self._protected_candidates() if os.path.lexists(p)]
        inside += [d for d in guarded_dirs() if d.exists() and self._in_root(d)]
        return inside

    def _protected_candidates(self) -> list[Path]:
        return [root / name for root in self.roots for name in PROTECTED_NAMES]

    def settle(self, result: ShellResult) -> ShellResult:
        """After the command: remove a protected config file it created (bantam would read it at
        its next start), and tell the model when the boundary is the likely cause of a failure."""
        notes = []
        for path in self.absent:
            if path.name != ".git" and os.path.lexists(path):
                _remove(path)
                notes.append(f"[sandbox: {path} is protected; the command created it and it was removed]")
        if result.exit_code != 0 and self.on:
            notes += self.explain(result.output)
        if notes:
            result.output = result.output.rstrip("\n") + "\n" + "\n".join(notes)
        return result

    def explain(self, output: str) -> list[str]:
        found = []
        if any(words in output for words in WRITE_REFUSED):
            found.append(f"[sandbox: writes are refused outside {self.writable_text()}, and to "
                         f".git, .bantam.cfg and model.cfg; {self.ask_hint}]")
        if "/tmp/" in output and "No such file or directory" in output:
            found.append("[sandbox: /tmp is private to each command: the host's /tmp and what earlier "
                         "commands left there are not visible; use the working directory instead]")
        if not self.network and any(words in output for words in NETWORK_REFUSED):
            found.append(f"[sandbox: the network is off for commands (sandbox_network=off), localhost "
                         f"included; {self.ask_hint}]")
        return found

    # --- write_file ------------------------------------------------------------------------

    def may_write(self, path: str | os.PathLike) -> str:
        """"" if write_file may write `path`; otherwise why not, in words for the model."""
        if not self.on:
            return ""
        real = Path(os.path.realpath(Path(path).expanduser()))
        if not self._in_root(real):
            return f"{path} is outside the writable roots ({self.writable_text()})"
        for root in self.roots:
            for name in PROTECTED_NAMES:
                if _within(real, root / name):
                    return f"{path} is protected: {name} stays read-only inside the sandbox"
        for guarded in guarded_dirs():
            if _within(real, guarded):
                return f"{path} is protected: {guarded} (bantam's own files) stays read-only"
        return ""

    def _in_root(self, path: Path) -> bool:
        return any(_within(path, root) for root in self.roots)

    # --- words -----------------------------------------------------------------------------

    @property
    def ask_hint(self) -> str:
        """What the model can do about a refusal: escalate where a person can be asked, else say so."""
        return ASK_HINT if self.can_escalate else NO_ASK_HINT

    def writable_text(self) -> str:
        roots = ", ".join(str(r) for r in self.roots)
        return f"{roots} and a private /tmp" if roots else "a private /tmp"

    def describe(self) -> str:
        """One line for the user: what boundary is in force."""
        if not self.on:
            return "sandbox off: commands the model starts run with your full rights"
        problem = unavailable()
        if problem:
            return f"sandbox={self.mode} cannot work: {problem}"
        net = "on" if self.network else "off"
        return f"sandbox={self.mode}: commands may write only {self.writable_text()}; network {net}"

    def for_prompt(self, approval: str, can_ask: bool) -> str:
        """One or two sentences for the system prompt: the boundary and how to ask for more. Only
        with a person to ask (`can_ask`) is shell_exec's `escalate` offered, and mentioned."""
        if not self.on:
            return ""
        net = "on" if self.network else "off (localhost included)"
        ask = ("To run one command outside the sandbox, call shell_exec with `escalate` set to the "
               "reason; the user is asked." if approval != "never" and can_ask else
               "Nothing runs outside the sandbox; if you need more, say so in your answer.")
        return (f"Sandbox: your commands and file writes may go only to {self.writable_text()} "
                f"(.git, .bantam.cfg and model.cfg stay read-only); the network is {net}; background "
                f"processes end when the command returns. {ask}")


ASK_HINT = ("if the task needs this, call shell_exec again with `escalate` set to the reason "
            "(the user is asked) or tell the user; retrying the same way will fail the same way")
NO_ASK_HINT = ("nothing runs outside the sandbox here: if the task needs this, tell the user in your "
               "answer; retrying the same way will fail the same way")


def bwrap_prefix(roots: Iterable[Path], network: bool, protected: Iterable[Path],
                 visible: Iterable[Path] = ()) -> list[str]:
    """The bubblewrap arguments: everything read-only, a private /tmp, /dev and /proc, the
    `visible` paths again inside the private /tmp, then the writable roots, then the protected
    paths inside them (later mounts win). `--cap-drop ALL` matters when bantam runs as root: with
    its capabilities a command could remount / read-write."""
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for path in visible:
        args += ["--ro-bind", str(path), str(path)]
    if not network:
        args.append("--unshare-net")
    for root in roots:
        args += ["--bind", str(root), str(root)]
    for path in protected:
        args += ["--ro-bind", str(path), str(path)]
    return args


def interpreter_under_tmp() -> list[Path]:
    """The Python bantam runs on, when it lives under /tmp (a virtualenv made there): it stays
    visible, read-only, so that a controlled run's `{python}` check still starts."""
    tmp = Path("/tmp")
    return sorted({Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix)
                   if _within(Path(os.path.realpath(p)), tmp) and Path(os.path.realpath(p)) != tmp})


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


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError:
        pass
