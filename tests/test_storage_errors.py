"""Storage bantam cannot write: a read-only folder or a full disk is one line on stderr naming
what failed and where, and exit 2, never a traceback; a run's saved state stays whole and
`resume` finishes the run once there is room again.

Real `bantam` processes, each in a mount namespace of bubblewrap where a folder is read-only, or
a small tmpfs (a disk that fills up), as it is even for root."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FULL_BYTES = 1 << 20  # the tmpfs standing in for a disk: a run's files fit, a filler does not


def bwrap_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
                           capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs a working bubblewrap")


def confined(cwd: Path, script: str, read_only: tuple[Path, ...] = (), full: tuple[Path, ...] = ()):
    """`sh -c SCRIPT` in `cwd`, with `read_only` folders bound read-only and each of `full` a
    FULL_BYTES tmpfs. $BANTAM runs bantam."""
    argv = ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for folder in read_only:
        argv += ["--ro-bind", str(folder), str(folder)]
    for folder in full:
        folder.mkdir(exist_ok=True)
        argv += ["--size", str(FULL_BYTES), "--tmpfs", str(folder)]
    argv += ["--chdir", str(cwd), "--setenv", "BANTAM", f"{sys.executable} -m bantam", "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_daemon_in_a_read_only_folder_says_so_in_one_line(home):
    agent = home / "agent"
    agent.mkdir()
    (agent / "config.json").write_text(json.dumps({"endpoint": "http://127.0.0.1:9/v1", "model": "m"}))
    r = confined(home, "$BANTAM daemon", read_only=(agent,))
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert line.startswith(f"bantam: cannot write {agent}/") and line.endswith(": Read-only file system"), line


def test_a_run_whose_runs_folder_is_read_only_says_so_in_one_line(home):
    runs = home / "runs"
    runs.mkdir()
    (home / "answers.json").write_text(json.dumps(['{"final": "done"}']))
    r = confined(home, "$BANTAM run 'say done' --runs-dir runs --scripted answers.json", read_only=(runs,))
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert line.startswith("bantam: cannot write runs/") and line.endswith(": Read-only file system"), line
    assert list(runs.iterdir()) == []


FILL = """import os
if not os.path.exists("filled"):
    open("filled", "w").close()
    try:
        with open("big", "wb") as f:
            while True:
                f.write(b"x" * 65536)
                f.flush()
    except OSError:
        pass
print("filled")
"""


def test_a_disk_that_fills_during_a_run_stops_it_in_one_line_and_resume_finishes_it(home):
    ws = home / "ws"
    ws.mkdir()
    (ws / "fill.py").write_text(FILL)
    (home / "run.toml").write_text('[tools]\ncommand_timeout_seconds = 60.0\n[tools.commands]\n'
                                   'fill = ["{python}", "fill.py"]\n')
    fill = {"tool": "shell", "arguments": {"command": "fill"}}
    read = {"tool": "read_file", "arguments": {"path": "fill.py"}}
    plan = {"plan": [{"description": "fill", **fill}, {"description": "read", **read}]}
    (home / "answers.json").write_text(json.dumps([json.dumps(plan), json.dumps(fill), json.dumps(read),
                                                   '{"final": "filled"}']))
    script = ("$BANTAM run 'fill the disk' --workspace ws --config run.toml --scripted answers.json "
              "--runs-dir runs 2> run.err; echo $? > run.rc\n"
              "cp runs/*/state.json stopped.json\n"
              "for big in runs/*/workspace/big; do : > $big; done\n"  # room again
              "$BANTAM resume $(ls runs) --runs-dir runs --retry-blocked > resume.out 2> resume.err; "
              "echo $? > resume.rc\n"
              "cp runs/*/state.json state.json\n")
    r = confined(home, script, full=(home / "runs",))
    assert r.returncode == 0, r.stderr
    err = (home / "run.err").read_text()
    assert (home / "run.rc").read_text().strip() == "2", err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"bantam: cannot write {home}/runs/") and line.endswith("No space left on device"), err
    stopped = json.loads((home / "stopped.json").read_text())  # whole JSON: the last save is intact
    assert stopped["status"] == "running"
    assert (home / "resume.rc").read_text().strip() == "0", (home / "resume.err").read_text()
    assert (home / "resume.out").read_text() == "filled\n"
    assert json.loads((home / "state.json").read_text())["status"] == "completed"
