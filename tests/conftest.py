import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeServer

ROOT = Path(__file__).resolve().parent.parent

# The tests that run real inference on "the embedded model" were written for the 135M SmolLM2 (its
# answers, its speed: seconds a test); the default for users is a larger model (bundled.EMBEDDED),
# tested by the tests that name it (tests/test_work_done.py unsets this).
os.environ.setdefault("BANTAM_EMBEDDED", "SmolLM2-135M-Instruct")

# A run started in the background (`nohup ... &`) inherits SIGINT and SIGHUP ignored, and so would
# every bantam and shell the tests start, which then cannot be interrupted as the tests require.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private HOME and working directory for each test; no real user file is touched."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "LLM_URL", "LLM_MODEL", "LLM_API_KEY",
                "AGENT_TOOL_BUDGET", "AGENT_MAX_FANOUT", "BANTAM_TOOLS_DIR", "BANTAM_HOME",
                "NO_COLOR", "BANTAM_NO_COLOR", "SOCKS_PROXY", "socks_proxy", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def server():
    with FakeServer() as s:
        yield s


def write_cfg(directory: Path, name: str = ".bantam.cfg", trusted: bool = True, **values) -> Path:
    """A project config file. A test that sets a boundary key (config.BOUNDARY_KEYS: sandbox=off,
    tools=, the budgets, ..., under any of their names) is the user choosing it, so the folder is
    trusted as the user would (`bantam trust`) unless `trusted` is False (the tests of an
    untrusted project)."""
    from bantam import config, trust
    path = Path(directory, name)
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    if trusted and {config.ALIASES.get(k, k) for k in values} & set(config.BOUNDARY_KEYS):
        trust.trust(directory)
    return path


def base_cfg(server: FakeServer, **extra) -> dict:
    """A config pointing at the fake server, with retries that do not wait."""
    return {"endpoint": server.url, "model": "test-model", "retry_delays": "0,0,0", **extra}


def run_bantam(*args: str, cwd: Path, input: str | None = None, env: dict | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "bantam", *args], cwd=cwd, input=input,
                          capture_output=True, text=True, env=full_env, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)


def bantam_here(*args: str, cwd: Path, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """What run_bantam gives, from bantam's command line run in this process (cli.main with the
    streams, environment and folder given): no interpreter start. For what a process is needed
    for (signals, a terminal, the sandbox, a crash, imports) use run_bantam. The streams are real
    files, so bantam sees piped input as a process does."""
    import tempfile

    from bantam.cli import main
    with tempfile.TemporaryFile() as i, tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as e, \
            open(os.devnull, "rb") as nothing:
        i.write((input or "").encode())
        i.seek(0)
        stdin, stdout, stderr = (io.TextIOWrapper(f, encoding="utf-8", write_through=True)
                                 for f in (i if input is not None else nothing, o, e))
        code = main(list(args), stdin=stdin, stdout=stdout, stderr=stderr,
                    environ={**os.environ, **(env or {})}, cwd=str(cwd))
        o.seek(0)
        e.seek(0)
        out, err = o.read().decode("utf-8", "replace"), e.read().decode("utf-8", "replace")
        for wrapper in (stdin, stdout, stderr):
            wrapper.detach()  # the files are closed by the `with`, once
    return subprocess.CompletedProcess(["bantam", *args], code, out, err)


def wait_for(check, what: str = "the condition", timeout: float = 60.0):
    """Poll `check` until it returns something true (returned), or fail naming `what`: the way
    every test waits for an event, with a deadline generous enough for a loaded CI machine."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if entry.name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def process_gone(pid: int, within: float = 30.0) -> bool:
    """Wait until process `pid` no longer runs (gone, or a zombie nobody has reaped yet)."""
    import time
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n 3 --dist loadgroup`, the README's command), tests that share one of
    our fixtures wider than a test (a browser, a real model server: module or session scope) go to
    one worker together, so the fixture starts once rather than once on every worker. A fixture's
    own wide fixtures come after it in the closure, so the group is the last one's: the tests of
    litellm (which needs the llama.cpp server) and of the llama.cpp server run on one worker."""
    for item in items:
        shared = [defs[-1] for defs in item._fixtureinfo.name2fixturedefs.values()
                  if defs[-1].scope != "function" and getattr(defs[-1].func, "__module__", "").startswith("tests.")]
        if shared:
            item.add_marker(pytest.mark.xdist_group(f"{shared[-1].func.__module__}.{shared[-1].argname}"))
