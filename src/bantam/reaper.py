"""Every process group bantam starts dies with bantam, however bantam ends (SIGKILL included).

    reaper.watch(proc.pid)      # right after start: the group proc leads is now bantam's
    reaper.release(proc.pid)    # after bantam killed and reaped it itself

How: on the first `watch`, bantam starts one small watchdog process (its own session, so a
terminal's Ctrl+C or SIGHUP does not reach it) whose stdin is the read end of a pipe that only
bantam holds. bantam writes `+PGID` / `-PGID` lines to it. When bantam is gone, by exit, signal
or SIGKILL, the kernel closes the pipe, the watchdog reads EOF and SIGKILLs every group still
registered, then exits. Needs nothing of bantam alive, and works on every POSIX system.

Why not PR_SET_PDEATHSIG on the child: it reaches only the direct child (the kernel clears it on
fork, so in `bash -c 'sleep 100; echo'` the sleep survives), it fires when the *thread* that
forked dies (bantam runs commands from worker threads), and setting it needs `preexec_fn`, which
Python documents as unsafe in a threaded program. Why not a subreaper: PR_SET_CHILD_SUBREAPER
makes bantam adopt orphans, but when bantam itself is killed they go up to init and live on.
"""
from __future__ import annotations

import os
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
