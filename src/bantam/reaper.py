"""Every process group bantam starts dies with bantam, however bantam ends (SIGKILL included).

    reaper.watch(proc.pid)      # right after start: the group proc leads is now bantam's
    reaper.release(proc.pid)    # after bantam killed and reaped it itself
    argv = reaper.whole_tree(argv)  # a program that is not the model's (an MCP server): its
                                    # descendants in sessions of their own die with it too

How: on the first `watch`, bantam starts one small watchdog process (its own session, so a
terminal's Ctrl+C or SIGHUP does not reach it) whose stdin is the read end of a pipe that only
bantam holds. bantam writes `+PGID` / `-PGID` lines to it. When bantam is gone, by exit, signal
or SIGKILL, the kernel closes the pipe, the watchdog reads EOF and SIGKILLs every group still
registered, then exits. Needs nothing of bantam alive, and works on every POSIX system.

A process group holds what a program starts in its own session only: `setsid sleep 1000 &`
leaves it. The model's commands run in the sandbox, whose pid namespace holds every descendant.
A program bantam starts outside the sandbox for the user (an MCP server) runs through
`whole_tree`: bubblewrap gives it a pid namespace of its own and nothing else (the filesystem,
network, devices and user stay the host's); the kernel SIGKILLs every process of a pid namespace
when its first process ends, and --die-with-parent ends that one when bwrap's parent (bantam) dies,
by SIGKILL too. So the whole tree ends with the program's own exit or with bantam's, whichever
comes first, and needs nothing of bantam alive. Where bubblewrap cannot make a pid namespace, the
program runs as given, and its process group is what dies with it.

Why not PR_SET_PDEATHSIG on the child: it reaches only the direct child (the kernel clears it on
fork, so in `bash -c 'sleep 100; echo'` the sleep survives), it fires when the *thread* that
forked dies (bantam runs commands from worker threads), and setting it needs `preexec_fn`, which
Python documents as unsafe in a threaded program. Why not a subreaper: PR_SET_CHILD_SUBREAPER
makes bantam adopt orphans, but when bantam itself is killed they go up to init and live on.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading

# The watchdog's whole program: read the registry until EOF, then kill what is left.
WATCHDOG = """\
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN)
groups = {}
for line in sys.stdin.buffer:
    op, pgid, sig = line[:1], *line[1:].split()
    if op == b"+": groups[int(pgid)] = int(sig)
    else: groups.pop(int(pgid), None)
for pgid, sig in groups.items():
    try: os.killpg(pgid, sig)
    except OSError: pass
"""

_lock = threading.Lock()
_pipe: int | None = None  # the write end, held by bantam alone (close-on-exec)
_owner = 0                # the pid that started the watchdog (a forked child must start its own)


def watch(pgid: int, sig: int = 9) -> None:
    """From now on, the process group `pgid` gets `sig` (SIGKILL by default) if bantam dies."""
    _send(f"+{pgid} {int(sig)}\n")


def release(pgid: int) -> None:
    _send(f"-{pgid} 0\n")


def _send(line: str) -> None:
    global _pipe, _owner
    with _lock:
        if _pipe is None or _owner != os.getpid():
            _pipe, _owner = _start(), os.getpid()
        if _pipe < 0:
            return
        try:
            os.write(_pipe, line.encode())  # a short line to a pipe: written whole, never blocks long
        except OSError:
            _pipe = -1  # the watchdog is gone (killed by hand): commands still die on every normal path


def _start() -> int:
    read, write = os.pipe()  # both ends close-on-exec: no command bantam starts inherits them
    try:
        subprocess.Popen([sys.executable, "-S", "-I", "-c", WATCHDOG], stdin=read,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        os.close(write)
        return -1
    finally:
        os.close(read)
    return write


# bubblewrap with a pid namespace and nothing else of a sandbox: the whole host is bound as it is
# (devices too), and the new namespace gets its own /proc, so the program's `ps` and /proc/self agree
TREE = ("--dev-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--die-with-parent", "--")


def whole_tree(argv: list[str]) -> list[str]:
    """`argv` run so that every process it starts, in its own session or a new one, dies when it
    exits and when bantam dies (see the module's docstring); `argv` itself where bubblewrap
    cannot do that here. Only the program's own pids change: it sees and signals its own tree.
    Start it from a thread that lives as long as bantam (the MCP hub's event loop): the kernel's
    parent-death signal, which --die-with-parent is, may follow the thread that forked."""
    bwrap = _tree_bwrap()
    return [bwrap, *TREE, *argv] if bwrap else list(argv)


def trees_die_with_bantam() -> bool:
    """Whether `whole_tree` gives a program a pid namespace here: then its whole tree dies with
    bantam, by SIGKILL too, and nothing needs to wait for it to end."""
    return bool(_tree_bwrap())


@functools.cache
def _tree_bwrap() -> str:
    """bubblewrap's path when it can make a pid namespace here (tried once), else ""."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ""
    try:
        probe = subprocess.run([bwrap, *TREE, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return bwrap if probe.returncode == 0 else ""
