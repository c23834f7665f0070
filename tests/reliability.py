"""The fault matrix: every server fault, in every mode that talks to a model, on both wire formats.

`run_case(fault, mode, wire, directory)` runs real bantam processes against a real local server
that commits the fault once, then answers well; it returns None when bantam did the right thing
(a retry that succeeds, or one clear error with nothing partial left on disk), else what went
wrong. tests/test_reliability.py asserts every case; `python -m tests.reliability_report` writes
the table in docs/reliability.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.faults import FAULTS, RECOVERS, fault, good_answer, good_tool_call
from tests.fakes.openai_server import FakeServer

MODES = ("oneshot", "thread", "subagent", "repl", "daemon", "run")
ROOT = Path(__file__).resolve().parent.parent
WIRES = ("openai", "anthropic")
CLOSED_PORT_URL = "http://127.0.0.1:9/v1"


def env_for(home: Path) -> dict[str, str]:
    """No configuration of the person running the tests: HOME is the case's own, and with no
    XDG_CONFIG_HOME the user's file is the one under it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "BANTAM_", "AGENT_", "OPENAI_", "ANTHROPIC_")) and k != "XDG_CONFIG_HOME"}
    return {**env, "HOME": str(home), "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "NO_COLOR": "1"}


def configure(directory: Path, url: str, wire: str, tools: str = "shell_exec,write_file") -> None:
    """The project's file names the server; the tools are the user's choice, so they go in the
    user's own file (~/.config/bantam/config under the case's HOME): a project file the user has
    not trusted may narrow the tools, never add one (spawn_agent)."""
    (directory / ".bantam.cfg").write_text(
        f"endpoint={url}\nmodel=test-model\nprovider={wire}\ntimeout=1\nretry_delays=0,0,0\n"
        "api_key=sk-reliability-secret-1234\n")
    user = directory / "home" / ".config" / "bantam" / "config"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(f"tools={tools}\n")


def bantam(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bantam", *args], cwd=directory, env=env_for(directory / "home"),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def one_clear_error(r: subprocess.CompletedProcess) -> str | None:
    if r.returncode != 1:
        return f"exit {r.returncode}, wanted 1: {r.stderr[-300:]}"
    if "Traceback" in r.stderr or not r.stderr.strip().splitlines()[-1].startswith("error: "):
        return f"not one clear error: {r.stderr[-300:]}"
    return None


def run_case(name: str, mode: str, wire: str, directory: Path) -> str | None:
    (directory / "home").mkdir(parents=True, exist_ok=True)
    recovers = RECOVERS[name]
    with FakeServer() as server:
        bad = fault(name, wire)
        url = server.url if bad is not None else CLOSED_PORT_URL
        if mode == "subagent":
            if bad is None:
                return None  # a closed port cannot fail the child alone; the parent's case covers it
            configure(directory, url, wire, tools="shell_exec,spawn_agent")
            server.add(good_tool_call("spawn_agent", {"task": "child task"}, wire), bad)
            if recovers:
                server.add(good_answer("child ok\nSTATUS: success", wire))
            server.add(good_answer("recovered", wire))
            return check_subagent(bantam(directory, "-p", "hello"), server, recovers)
        configure(directory, url, wire)
        if bad is not None:
            server.add(bad, good_answer("recovered", wire))
        if mode == "daemon":
            return check_daemon(directory, url, wire, recovers, bad is not None)
        if mode == "run":
            server.script.clear()
            answers = json.loads((ROOT / "examples" / "read_number" / "scripted.json").read_text())
            server.add(*([bad] if bad is not None else []), *[good_answer(a, wire) for a in answers])
            return check_run(directory, recovers)
        if mode == "oneshot":
            return check_exit(bantam(directory, "-p", "hello"), recovers)
        if mode == "thread":
            return check_exit(bantam(directory, "--thread", "t", "-p", "hello"), recovers) or \
                check_thread(directory / "home" / ".bantam" / "threads" / "t.jsonl", recovers)
        return check_repl(directory, recovers)


def check_exit(r: subprocess.CompletedProcess, recovers: bool) -> str | None:
    if recovers:
        return None if r.returncode == 0 and r.stdout == "recovered\n" else \
            f"exit {r.returncode}, stdout {r.stdout!r}: {r.stderr[-300:]}"
    return one_clear_error(r)


def check_thread(path: Path, recovers: bool) -> str | None:
    try:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
    except (OSError, ValueError) as e:
        return f"thread file unreadable: {e}"
    roles = [m["role"] for m in lines]
    wanted = ["user", "assistant"] if recovers else ["user"]
    return None if roles == wanted else f"thread holds {roles}, wanted {wanted}"


def check_subagent(r: subprocess.CompletedProcess, server: FakeServer, recovers: bool) -> str | None:
    if r.returncode != 0 or r.stdout != "recovered\n":
        return f"parent exit {r.returncode}, stdout {r.stdout!r}: {r.stderr[-300:]}"
    parent_last = [r for r in server.requests if r.method == "POST"][-1].body  # not GET /models
    results = [m for m in parent_last["messages"] if m.get("role") == "tool"] or [
        b for m in parent_last["messages"] if isinstance(m.get("content"), list)
        for b in m["content"] if b.get("type") == "tool_result"]
    status = json.loads(results[0]["content"])["status"]
    wanted = "success" if recovers else "failure"
    return None if status == wanted else f"child status {status}, wanted {wanted}"


def check_repl(directory: Path, recovers: bool) -> str | None:
    import pexpect
    child = pexpect.spawn(sys.executable, ["-m", "bantam"], cwd=str(directory), env=env_for(directory / "home"),
                          encoding="utf-8", dimensions=(40, 120), timeout=60)
    try:
        child.expect_exact("\x1b[?2004h")
        child.send("hello\r")
        child.expect_exact("recovered" if recovers else "error: ")
        child.expect_exact("\x1b[?2004h")  # the prompt is back
        child.send("/quit\r")
        child.expect(pexpect.EOF)
    except (pexpect.TIMEOUT, pexpect.EOF):
        return f"the terminal did not come back: {child.before[-300:]!r}"
    finally:
        child.close()
    if child.exitstatus != 0:
        return f"exit {child.exitstatus}"
    sessions = list((directory / "home" / ".bantam" / "sessions").glob("*.jsonl"))
    # a head record, then one line per message (the system prompt is rebuilt on load, not saved)
    messages = [json.loads(line) for line in sessions[0].read_text().splitlines()][1:] if sessions else []
    roles = [m["role"] for m in messages]
    if roles != ["user", "assistant"]:
        return f"session holds {roles}, wanted ['user', 'assistant']"
    # a failed turn is closed by a marker (transcripts.close_turn), never a partial answer
    answer = str(messages[1].get("content"))
    closed = answer.startswith("[no answer")
    return None if closed != recovers else f"the answer kept is {answer[:80]!r}"


def check_daemon(directory: Path, url: str, wire: str, recovers: bool, reachable: bool) -> str | None:
    """The daemon stays up through the fault, answers the mail when the server lets it, stops cleanly,
    and messages.jsonl holds whole lines and no partial reply."""
    import signal
    import time
    agent = directory / "agent"
    agent.mkdir()
    (agent / "config.json").write_text(json.dumps({
        "model": "test-model", "api_base": url, "provider": wire, "api_key": "sk-reliability-secret-1234",
        "retry_delays": [0, 0, 0], "timeout": 1, "trigger_tick": 0.2, "inbox_tick": 0.2, "heartbeat_s": 0,
        "poll_s": 0.1}))
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "agent"], cwd=directory,
                            env=env_for(directory / "home"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        (agent / "mail_inbox").mkdir(parents=True, exist_ok=True)
        (agent / "mail_inbox" / "note.txt").write_text("hello")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            life = (agent / "LIFE.md").read_text() if (agent / "LIFE.md").exists() else ""
            replies = [m for m in daemon_messages(agent) if m.get("role") == "assistant"]
            if (reachable and any("recovered" in str(m.get("content")) for m in replies)
                    and (recovers or "error:" in life)) or (not reachable and "error:" in life):
                break
            if proc.poll() is not None:
                return f"the daemon died with exit {proc.returncode}"
            time.sleep(0.1)
        else:
            return f"no answer and no logged error in time: {life[-300:]}"
        proc.send_signal(signal.SIGTERM)
        if proc.wait(15) != 0:
            return f"stopped with exit {proc.returncode}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    replies = [m for m in daemon_messages(agent) if m.get("role") == "assistant"]
    if any(m.get("content") and "recovered" not in str(m["content"]) for m in replies):
        return f"a partial reply was kept: {replies}"
    return None


def check_run(directory: Path, recovers: bool) -> str | None:
    """A controlled run (the read-number demo) completes after the retry, or stops with exit 1;
    either way its state.json and logs load."""
    r = bantam(directory, "run", "Read example.txt and report twice the number in it.",
               "--workspace", str(ROOT / "examples" / "read_number" / "workspace"), "--require-read", "example.txt")
    states = list((directory / "runs").glob("*/state.json"))
    if len(states) != 1:
        return f"{len(states)} runs, exit {r.returncode}: {r.stderr[-300:]}"
    try:
        state = json.loads(states[0].read_text())
        for log in states[0].parent.glob("*.jsonl"):
            [json.loads(line) for line in log.read_text().splitlines()]
    except ValueError as e:
        return f"run files unreadable: {e}"
    if recovers:
        return None if r.returncode == 0 else f"exit {r.returncode}: {r.stderr[-300:]}"
    if r.returncode != 1 or "Traceback" in r.stderr:
        return f"exit {r.returncode}, wanted 1: {r.stderr[-300:]}"
    return None if state.get("status") != "completed" else "a failed run says completed"


def daemon_messages(agent: Path) -> list[dict]:
    import fcntl
    try:
        with open(agent / "messages.jsonl", "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            return [json.loads(line) for line in f.read().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def cases():
    return [(f, m, w) for w in WIRES for m in MODES for f in FAULTS]
