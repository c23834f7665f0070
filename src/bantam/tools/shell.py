"""shell_exec: run a command, merged output, never waiting on a terminal, bounded in time and memory.

In a context with a workspace (a controlled run), the command is one of the workspace's named
commands, run as its fixed argument array without a shell, in the workspace (`run_named`)."""
from __future__ import annotations

import contextlib
import itertools
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, Callable

from .. import reaper
from ..clip import HeadTail
from ..envpolicy import StreamRedactor, redact_cut, tool_env
from ..errors import Refused, ToolError
from ..fsutil import bantam_home, private_dir
from . import Outcome, Tool, ToolContext

if TYPE_CHECKING:
    from ..sandbox import Sandbox
    from .workspace import Workspace

SHELL = shutil.which("bash") or "/bin/sh"
# A clipped output is kept in ~/.bantam/tool-output for the model to read (the result names the
# file). Bounded because the model controls both the size and the count: 100 MB a file and 200
# calls a turn filled 20 GB. 4 MiB of text is about a million tokens, more than any model reads
# through its tool results; the folder keeps the newest files, the oldest go first, and 64 MiB
# still holds the last 16 spills at the largest (many more at the usual size). The count is capped
# too, so that pruning (one directory scan per spill) stays cheap however small the spills are.
SPOOL_CAP = 4 << 20            # of one command's output: the first SPOOL_CAP bytes are kept
SPOOL_FOLDER_CAP = 64 << 20    # of the whole folder
SPOOL_FOLDER_FILES = 1000      # files in the folder
DRAIN_AFTER_EXIT = 0.5         # seconds to keep reading after the shell exits (background children)
_spool_numbers = itertools.count(1)


@dataclass(slots=True)
class ShellResult:
    output: str
    exit_code: int
    timed_out: bool = False

    def for_model(self) -> str:
        return f"{self.output}\n\nexit: {self.exit_code}"


COMMAND_PARAMETER = {"type": "string"}
# said where it applies rather than in the description every request carries (a sandboxed
# command's processes live in the sandbox's own namespace, which ends with it, and get no note)
BACKGROUND_NOTE = ("\n[the command's background processes were ended when it returned; to keep a server "
                   "running, start it with `setsid nohup CMD > log 2>&1 &`]")


class ShellExec(Tool):
    name = "shell_exec"
    # Sent with every request, so only what every call needs: how to keep a server running is
    # said in the result of a command whose background processes were ended (BACKGROUND_NOTE).
    description = ("Run a bash command in the project folder; returns its output and exit code. stdin is "
                   "closed; background processes end with the command.")
    parameters = {"type": "object", "required": ["command"],
                  "properties": {"command": COMMAND_PARAMETER,
                                 "escalate": {"type": "string", "description":
                                              "only after the sandbox refused this command: why it "
                                              "must run outside the sandbox (the user is asked)"}}}

    def parameters_for(self, ctx: ToolContext) -> dict[str, Any]:
        """`escalate` only where it can do something: a sandbox to cross and a person to ask
        (otherwise a small model fills in the optional argument and is refused for it)."""
        if ctx.cfg.sandbox != "off" and ctx.approvals.ask is not None:
            return self.parameters
        return {**self.parameters, "properties": {"command": COMMAND_PARAMETER}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str | Outcome:
        if ctx.front.workspace is not None:
            return run_named(ctx.front.workspace, args["command"])
        from ..approval import check_command
        command, box = check_command(ctx.cfg, ctx.approvals, args["command"], args.get("escalate") or "",
                                     cwd=ctx.folder)
        box.tmp = ctx.tmp if box.on else None
        if ctx.front.fence is not None:
            box = ctx.front.fence(box)
        result = run_shell(command, ctx.cfg.shell_timeout, ctx.cfg.tool_output_limit,
                           ctx.cancel, on_start=ctx.front.on_process, sandbox=box, cwd=ctx.folder,
                           on_output=ctx.front.on_output).for_model()
        if command != args["command"]:  # the person edited it: the model must not take it for its own
            return f"[the user replaced your command before it ran; what ran instead: {command}]\n{result}"
        return result


def run_named(ws: "Workspace", name: str) -> Outcome:
    """One of the workspace's named commands; any other command line is refused."""
    argv = ws.commands.get(name)
    if argv is None:
        raise Refused(f"{name!r} is not a named command (named: {', '.join(ws.commands) or 'none'})")
    output, code = run_argv(argv, ws.root, ws.timeout, ws.sandbox)
    text, clipped = ws.clip(output)
    return Outcome(text, code != 0, clipped=clipped, exit_code=code, facts=ws.command_facts(output))


def clean_env(passthrough: Iterable[str] = ()) -> dict[str, str]:
    """Every model-started command's environment (bantam.envpolicy), and no stray .pyc files."""
    return {**tool_env(passthrough), "PYTHONDONTWRITEBYTECODE": "1"}


def run_argv(argv: list[str], cwd: Path, timeout: float, sandbox: "Sandbox | None" = None) -> tuple[bytes, int]:
    """A fixed argument array, no shell, credentials kept out: (output, exit code). Output past
    4 MiB is clipped by run_process."""
    try:
        result = run_process(argv, timeout, 4 << 20, cwd=cwd, env=clean_env(sandbox.passthrough if sandbox else ()),
                             sandbox=replace(sandbox) if sandbox else None)
    except ToolError as e:  # the sandbox cannot work here: the check is not run, and says why
        return str(e).encode(), 126
    except OSError as e:
        return f"cannot start {argv[0]}: {e.strerror or e}".encode(), 127
    return result.output.encode("utf-8"), result.exit_code


def run_shell(command: str, timeout: float, output_limit: int,
              cancel: threading.Event | None = None,
              on_start: Callable[[subprocess.Popen], None] | None = None,
              env: dict[str, str] | None = None, sandbox: "Sandbox | None" = None,
              cwd: str | os.PathLike | None = None,
              on_output: Callable[[bytes], Any] | None = None) -> ShellResult:
    """Run `command` with bash in its own session, in `cwd` (the session's folder); see
    run_process for the limits, the environment and the sandbox."""
    return run_process([SHELL, "-c", command], timeout, output_limit, cancel, on_start, cwd, env, sandbox,
                       on_output=on_output)


def run_process(argv: list[str], timeout: float, output_limit: int,
                cancel: threading.Event | None = None,
                on_start: Callable[[subprocess.Popen], None] | None = None,
                cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
                sandbox: "Sandbox | None" = None, pass_fds: Iterable[int] = (),
                started: Callable[[], None] | None = None,
                on_output: Callable[[bytes], Any] | None = None) -> ShellResult:
    """The one place bantam runs a program: stdin closed, stdout and stderr merged, its own session.
    The whole process group is killed at `timeout`, on Ctrl+C, when `cancel` is set (a sub-agent
    whose parent was interrupted: then KeyboardInterrupt), and when the program returns (so nothing
    it started is left behind). `on_start` is told the process as soon as it exists (the daemon
    records its pid). If bantam itself dies (any signal, SIGKILL too) the group dies with it
    (bantam.reaper). `env` defaults to the model's tool environment (bantam.envpolicy.tool_env,
    with the variables the sandbox's `passthrough` names);
    the user's own `!cmd` passes envpolicy.user_env(). A program that cannot start raises OSError.
    With a `sandbox`, the program runs inside it (bubblewrap; ToolError when that cannot work) and
    its result is settled there. `pass_fds` stay open in the program; `started` is called as soon
    as it exists; `on_output` is given each piece of output as it is read (an editor shows it
    while the program runs), unclipped and unredacted."""
    if sandbox is not None:
        argv = sandbox.wrap(argv, cwd)
        env = tool_env(sandbox.passthrough) if env is None else env
        try:  # the filter's descriptor goes to bubblewrap and is closed here once it started
            result = run_process(argv, timeout, output_limit, cancel, on_start, cwd, env,
                                 pass_fds=sandbox.fds, started=sandbox.release, on_output=on_output)
        finally:
            sandbox.release()
        return sandbox.settle(result)
    with _ctrl_c_held() as held:  # a Ctrl+C between the start and the watch would orphan the group
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=cwd, env=tool_env() if env is None else env,
                                pass_fds=tuple(pass_fds))
        reaper.watch(proc.pid)
    if started is not None:
        started()
    output = ClippedOutput(output_limit)
    timed_out = left_running = False
    deadline = time.monotonic() + timeout
    try:
        if held:
            signal.raise_signal(signal.SIGINT)  # now, where the finally below kills the group
        if on_start is not None:
            on_start(proc)
        timed_out = _read_until_done(proc, output, deadline, cancel, on_output)
        if not timed_out:
            # EOF can come before the exit: `cat` closes stdout, then exits. Killing it now would
            # turn a success into 137, so wait for the real exit status.
            timed_out = _wait_until(proc, deadline)
        if not timed_out:
            _let_leave(proc.pid, min(deadline, time.monotonic() + DRAIN_AFTER_EXIT))
    finally:
        left_running = _kill_group(proc)  # whatever the command left running in its group goes with it
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait()
        reaper.release(proc.pid)
    text = output.text()
    if timed_out:
        return ShellResult(f"{text}\n[timed out after {timeout:g}s; process group killed]", 124, True)
    code = proc.returncode
    return ShellResult(text + BACKGROUND_NOTE if left_running else text, 128 - code if code < 0 else code)


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[list[int]]:
    """Hold back a Ctrl+C (SIGINT) for the block: the list it yields says whether one came. Only
    the main thread gets KeyboardInterrupt, and only it may set a handler; elsewhere a no-op."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)


def _read_until_done(proc: subprocess.Popen, output: "ClippedOutput", deadline: float,
                     cancel: threading.Event | None, on_output: Callable[[bytes], Any] | None = None) -> bool:
    """Read until EOF (or shortly after the shell exits); True if the deadline passed."""
    assert proc.stdout is not None  # started with stdout=PIPE
    fd = proc.stdout.fileno()
    exited_at = None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return True
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_AFTER_EXIT:
                return False
            if selector.select(min(deadline - now, 0.1)):
                data = os.read(fd, 1 << 16)
                if not data:
                    return False
                output.add(data)
                if on_output is not None:
                    on_output(data)


def _wait_until(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait for the shell to exit; True if the deadline passed first."""
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return True
    return False


def _let_leave(group: int, until: float) -> None:
    """Give what the command started in the background, until `until`, to leave its process
    group: `setsid nohup CMD &` as a command's last words is still in the group for a moment after
    the shell exits (setsid has not run yet), and killing the group then kills the server the
    command was meant to leave running. Returns at once when the group is empty."""
    while time.monotonic() < until:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


def _kill_group(proc: subprocess.Popen) -> bool:
    """Kill what is left in the command's process group; True if anything was. Called once the
    shell has been waited for (unless it timed out), so what is left is what it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class ClippedOutput:
    """Keeps the head and the tail in memory (clip.HeadTail); once past the limit, the whole
    output goes to a file."""

    def __init__(self, limit: int):
        self.keep = HeadTail(limit, b"")
        self.path: str | None = None
        self.spool: IO[bytes] | None = None

    def add(self, data: bytes) -> None:
        if self.keep.over:
            self._save(data)
            self.keep.add(data)
            return
        whole = self.keep.head + data
        if self.keep.add(data):  # just went past the limit: everything so far goes to the file
            self._open_spool()
            self._save(whole)

    def _open_spool(self) -> None:
        folder = private_dir(bantam_home() / "tool-output")
        os.chmod(folder, 0o700)  # made by an older bantam, or by hand: the outputs are the user's alone
        prune_spool(folder, SPOOL_FOLDER_CAP - SPOOL_CAP, SPOOL_FOLDER_FILES - 1)  # room for this one
        name = f"shell-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_spool_numbers)}.txt"
        self.path = str(folder / name)
        self.spool = os.fdopen(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                                       0o600), "wb")
        self.saved = 0
        self.redactor = StreamRedactor()  # the file on disk holds no known secret either

    def _save(self, data: bytes) -> None:
        room = SPOOL_CAP - self.saved
        if room > 0 and self.spool is not None:
            self.spool.write(self.redactor.feed(data[:room]))
            self.saved += min(room, len(data))

    def text(self) -> str:
        keep = self.keep
        if self.spool is None:
            return keep.head.decode("utf-8", "replace")
        self.spool.write(self.redactor.flush())
        self.spool.close()
        assert self.path is not None  # set with the spool
        prune_spool(Path(self.path).parent, SPOOL_FOLDER_CAP, SPOOL_FOLDER_FILES, keep=self.path)  # others' spills
        kept = f"full output in {self.path}" if self.saved == keep.total else \
            f"the first {self.saved} bytes are in {self.path}"
        head, tail = redact_cut(keep.head.decode("utf-8", "replace"), keep.tail.decode("utf-8", "replace"))
        return f"{head}\n\n[... {keep.cut} bytes clipped of {keep.total}; {kept} ...]\n\n{tail}"


def prune_spool(folder: Path, cap: int, count: int, keep: str | None = None) -> None:
    """Remove the oldest files of `folder` until what is left takes at most `cap` bytes in at most
    `count` files; `keep` (the file just written) stays. Another bantam pruning at the same time
    is harmless."""
    files = []
    with os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    files.append((info.st_mtime_ns, entry.name, info.st_size, entry.path))
    total, left = sum(size for _, _, size, _ in files), len(files)
    for _, _, size, path in sorted(files):
        if total <= cap and left <= count:
            return
        if path != keep:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            total, left = total - size, left - 1
