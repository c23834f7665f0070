"""Issue 13, processes and reads: whatever ends bantam (SIGTERM, SIGHUP, SIGKILL), no command it
started keeps running; a restarted daemon says a command was interrupted and does not run it
again; a server that never stops sending cannot grow bantam past a bounded size (peak RSS
measured). Real bantam processes, real shells, real servers on 127.0.0.1."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bantam.daemon.bus import MessageFile
from tests.conftest import wait_for as poll, base_cfg, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.daemon.test_daemon import configure, messages, model, started  # noqa: F401 (model: a fixture)

RSS_LIMIT_KB = 300 * 1024
# sleep lengths unique to this test process: a test adds at most a few hundred, so each pytest-xdist
# worker (pids close together) gets a range of 1,000 of its own; with ranges 10 apart, a worker's
# BASE + 115 was another's BASE + 15 and the two tests counted each other's sleeps
BASE = 100_000 + os.getpid() % 5_000 * 1_000




def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds `marker` (a unique sleep length)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and int(entry.name) != os.getpid():
                found.append(int(entry.name))
    return found


def sleeping(seconds: int) -> list[int]:
    """Pids of `sleep SECONDS` processes (the length is unique to a test)."""
    return [pid for pid in processes_with(f"sleep {seconds}") if _cmdline(pid) == f"sleep\0{seconds}\0".encode()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def marked_command(home: Path, seconds: int) -> str:
    """A command with a child that outlives its shell unless its group is killed."""
    return f"echo started >> {home}/started.txt; sleep {seconds} & sleep {seconds}; echo finished >> {home}/ran.txt"


def start_bantam(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bantam", *args], cwd=home, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_no_command_outlives_bantam(home, server, sig):
    seconds = BASE + int(sig)
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": marked_command(home, seconds)}), text_reply("done"))
    proc = start_bantam(home, "-p", "run it")
    poll(lambda: (home / "started.txt").exists() and len(sleeping(seconds)) == 2, "the command")
    proc.send_signal(sig)
    assert proc.wait(30) == (-9 if sig == signal.SIGKILL else 128 + sig)  # TERM, HUP: handled, then exit
    poll(lambda: not processes_with(f"sleep {seconds}"), f"the command's processes to end after {sig.name}")
    assert not (home / "ran.txt").exists()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_daemon_leaves_no_command_and_the_restart_says_it_was_interrupted(home, model, tmp_path, sig):
    seconds = BASE + 100 + int(sig)
    agent = configure(home / "agent", model, watch="poll")
    model.on("run the job", tool_reply("BASH", {"command": marked_command(home, seconds)}, call_id="job1"))
    log = open(tmp_path / "daemon.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "agent"], cwd=home,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        poll(lambda: started(agent), "start")
        MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "run the job"})
        poll(lambda: len(sleeping(seconds)) == 2, "the command")
        daemon.send_signal(sig)
        daemon.wait(30)
        poll(lambda: not processes_with(f"sleep {seconds}"), "the command's processes to end")
        daemon = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "agent"], cwd=home,
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        note = poll(lambda: [c for c in map(str, (m.get("content") for m in messages(agent))) if "interrupted" in c],
                    "the interrupted note")
        assert "BASH call tc:job1" in note[0] and "was NOT run again" in note[0] and f"sleep {seconds}" in note[0]
        poll(lambda: any("was NOT run again" in str(m.get("content")) for r in model.chat_requests()
                         for m in r.body["messages"]), "the model to hear of it")
        assert (home / "started.txt").read_text().count("started") == 1  # not silently re-run
        assert not (home / "ran.txt").exists()
    finally:
        daemon.kill()
        daemon.wait(30)


def test_a_killed_supervisor_stops_its_daemons_and_the_next_start_works(home, model, tmp_path):
    one, two = configure(home / "one", model, watch="poll"), configure(home / "two", model, watch="poll")
    log = open(tmp_path / "daemon.log", "w")
    supervisor = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "one", "two"], cwd=home,
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    poll(lambda: started(one) and started(two), "both daemons")
    children = [int(p) for p in processes_with(str(home / "one")) + processes_with(str(home / "two"))
                if int(p) != supervisor.pid]
    assert children
    supervisor.kill()
    supervisor.wait(30)
    poll(lambda: not any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in children),
         "the daemons to stop")
    again = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "one"], cwd=home,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        poll(lambda: (one / "LIFE.md").read_text().count(" start: ") == 2, "the second start")
        assert again.poll() is None
    finally:
        again.kill()
        again.wait(30)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]
    except (OSError, IndexError):
        return "Z"


# --- MCP servers ------------------------------------------------------------------------------

# An MCP server (the fake one of tests/fakes/mcp_servers.py) that first starts a child in a session
# of its own, out of its process group: by a shell's `setsid ... &`, or by Python's
# start_new_session. The child's `sleep SECONDS` is the marker the test looks for.
PYTHON_DAEMONIZER = ("import runpy, subprocess, sys; subprocess.Popen(['sleep', sys.argv[1]], start_new_session=True); "
                     "sys.argv = ['mcp_servers', 'tools', sys.argv[2]]; runpy.run_module('tests.fakes.mcp_servers', run_name='__main__')")


def lingering_server(how: str, seconds: int, pidfile: Path) -> dict:
    fake = f"{sys.executable} -m tests.fakes.mcp_servers tools {pidfile}"
    command, args = {"shell": ("sh", ["-c", f"setsid sleep {seconds} & exec {fake}"]),
                     "python": (sys.executable, ["-c", PYTHON_DAEMONIZER, str(seconds), str(pidfile)])}[how]
    root = Path(__file__).resolve().parent.parent
    return {"command": command, "args": args, "cwd": str(root), "env": {"PYTHONPATH": str(root)}}


@pytest.mark.parametrize("how", ["shell", "python"])
@pytest.mark.parametrize("end", ["exit", "SIGTERM", "SIGKILL"])
def test_an_mcp_servers_children_in_their_own_session_end_with_bantam(home, server, how, end):
    pytest.importorskip("mcp")
    seconds = BASE + 300 + 10 * ["exit", "SIGTERM", "SIGKILL"].index(end) + ["shell", "python"].index(how)
    servers = Path(os.environ["HOME"], ".config", "bantam", "mcp.json")
    servers.parent.mkdir(parents=True)
    servers.write_text(json.dumps({"mcpServers": {"linger": lingering_server(how, seconds, home / "pid")}}))
    write_cfg(home, **base_cfg(server))
    # the model's command waits for the test's word, while the server starts beside it
    server.add(tool_reply("shell_exec", {"command": f"until [ -e {home}/go ]; do sleep 0.05; done"}),
               text_reply("done"))
    proc = start_bantam(home, "-p", "wait for it")
    try:
        poll(lambda: server.chat_requests() and sleeping(seconds), "the server and its own-session child")
        if end == "exit":
            (home / "go").touch()
            assert proc.wait(60) == 0
        else:
            proc.send_signal(getattr(signal, end))
            proc.wait(60)
    finally:
        proc.kill()
    poll(lambda: not processes_with(f"sleep {seconds}"), f"the server's tree to end after bantam's {end}")


# --- bounded reads ----------------------------------------------------------------------------

class Endless(BaseHTTPRequestHandler):
    """Every answer is endless: one SSE line that never ends, a JSON body that never ends, a model
    list that never ends, a web page that never ends (by path)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        page = "page" in self.path
        self._endless("text/html" if page else "application/json", b"<p>" if page else b"[")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "/line/" in self.path:
            self._endless("text/event-stream", b"data: {\"choices\": [{\"delta\": {\"content\": \"")
        else:
            self._endless("application/json", b'{"choices": [{"message": {"content": "')

    def _endless(self, kind: str, start: bytes):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.end_headers()
        try:
            self.wfile.write(start)
            piece = b"x" * 65536
            while True:
                self.wfile.write(piece)
        except OSError:
            pass


@pytest.fixture
def endless():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


MEASURE = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
           "print(r.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
           "print(r.stderr[-2000:])")


def peak_rss(home: Path, *args: str) -> tuple[int, int, str]:
    """Run bantam under a fresh parent: (exit code, peak RSS in kB of bantam, its stderr)."""
    r = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "bantam", *args], cwd=home,
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    code, rss, err = r.stdout.split("\n", 2)
    return int(code), int(rss), err


@pytest.mark.parametrize("path,stream,message", [
    ("/line/v1", "true", "line longer than 4 MB"),
    ("/json/v1", "false", "a body larger than 16 MB"),
    ("/json/v1", "true", "a body larger than 16 MB"),
])
def test_an_endless_answer_is_an_error_not_memory_growth(home, endless, path, stream, message):
    write_cfg(home, endpoint=endless + path, model="m", stream=stream, retry_delays="0")
    code, rss, err = peak_rss(home, "-p", "hi")
    assert code == 1 and message in err, err
    print(f"{path} stream={stream}: peak RSS {rss} kB")
    assert rss < RSS_LIMIT_KB, f"peak RSS {rss} kB"


def test_an_endless_model_list_is_an_error(home, endless):
    write_cfg(home, endpoint=endless + "/json/v1", model="m")
    code, rss, err = peak_rss(home, "models")
    assert code == 1 and "a body larger than 16 MB" in err
    assert rss < RSS_LIMIT_KB, f"peak RSS {rss} kB"


def test_the_daemons_fetch_of_an_endless_page_is_cut(home, model, endless, tmp_path):
    pytest.importorskip("bs4")
    agent = configure(home / "agent", model, watch="poll", tool_timeout=60)
    model.on("fetch it", tool_reply("WEB_FETCH", {"url": f"{endless}/page"}, call_id="f1"))
    log = open(tmp_path / "daemon.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "agent"], cwd=home,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        poll(lambda: started(agent), "start")
        MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "fetch it"})
        result = poll(lambda: [m["content"] for m in messages(agent) if m["role"] == "tool"], "the fetch", 120)
        peak = int(next(line.split()[1] for line in Path(f"/proc/{daemon.pid}/status").read_text().splitlines()
                        if line.startswith("VmHWM:")))
    finally:
        daemon.kill()
        daemon.wait(30)
    assert "only the first 2 MB of the page were read" in result[0]
    print(f"daemon WEB_FETCH of an endless page: peak RSS {peak} kB")
    assert peak < RSS_LIMIT_KB, f"peak RSS {peak} kB"


def test_a_controlled_runs_check_dies_with_a_killed_bantam(home):
    seconds = BASE + 2
    ws = home / "ws"
    ws.mkdir()
    (ws / "task.txt").write_text("write yes")
    (home / "run.toml").write_text(f"""
[runtime]
planning_strategy = "files"
execute_plan = true
[tools]
write_paths = ["answer.txt"]
required_verifications = ["check"]
[tools.commands]
check = ["bash", "-c", "touch ../check-started; sleep {seconds} & sleep {seconds}"]
""")
    (home / "answers.json").write_text(json.dumps(["```\nyes\n```", '{"final": "done"}']))
    proc = start_bantam(home, "run", "answer yes", "--workspace", str(ws), "--require-read", "task.txt",
                        "--config", str(home / "run.toml"), "--scripted", str(home / "answers.json"))
    poll(lambda: len(sleeping(seconds)) == 2, "the check command", 60)
    proc.kill()
    proc.wait(30)
    poll(lambda: not processes_with(f"sleep {seconds}"), "the check's processes to end")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_the_terminal_ends_on_a_closed_terminal_and_its_command_with_it(home, server, sig):
    """A model's command in the interactive terminal, then the terminal window is closed (SIGHUP) or
    the session is terminated: bantam exits (the terminal does not swallow it as a Ctrl+C)."""
    from tests.test_repl import Term
    seconds = BASE + 10 + int(sig)
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": marked_command(home, seconds)}), text_reply("done"))
    term = Term(home)
    term.enter("run it")
    poll(lambda: len(sleeping(seconds)) == 2, "the command")
    term.child.kill(sig)
    poll(lambda: not term.child.isalive(), "bantam to exit")
    poll(lambda: not processes_with(f"sleep {seconds}"), "the command's processes to end")
