"""What bantam reads in its own process for the model (AGENTS.md, skills, the daemon's own files,
the read tools, an editor's diff, settings files) cannot carry a secret out: one read path
(fsutil.open_inside) refuses a link out of its folder, the kernel's files, bantam's own folders,
FIFOs and devices, and reads with a bound; every request body is redacted before it is sent.

Real bantam processes, real symlinks, FIFOs and /proc; the scripted fake server on 127.0.0.1
records exactly what left the machine."""
import ast
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bantam.config import Config
from bantam.errors import Refused
from bantam.fsutil import read_inside
from bantam.prompt import agents_md
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import ROOT, run_bantam, wait_for
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply

SECRET = "ghp_readpath0123456789abcdef"  # a token bantam's environment holds and no request may


def bantam_p(server, cwd, *extra, timeout=60):
    return run_bantam("-p", "hello", "--endpoint", server.url, "--model", "test-model", *extra, cwd=cwd,
                      env={"GH_TOKEN": SECRET}, timeout=timeout)


def sent(server) -> bytes:
    return b"".join(r.raw for r in server.chat_requests())


def finishes(fn, *args):
    """fn(*args) in a thread, which must end: a read that blocks fails the test instead of hanging it."""
    result = {}

    def run():
        try:
            result["value"] = fn(*args)
        except BaseException as e:  # noqa: B036 (the test looks at what it was)
            result["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), f"{fn.__name__}{args} blocked"
    return result


# --- AGENTS.md: the project's file, read into the system prompt -------------------------------

def test_agents_md_linked_to_the_environment_never_reaches_the_provider(home, server):
    (home / "AGENTS.md").symlink_to("/proc/self/environ")
    server.add(text_reply("hi"))
    r = bantam_p(server, home)
    assert r.returncode == 0, r.stderr
    assert SECRET.encode() not in sent(server) and b"GH_TOKEN" not in sent(server)
    assert b"not read: AGENTS.md leads into /proc" in sent(server)  # the model is told why
    assert "not read: AGENTS.md leads into /proc" in r.stderr and "Traceback" not in r.stderr


def test_a_link_the_model_makes_is_refused_when_the_next_session_reads_it(home, server):
    server.add(tool_reply("shell_exec", {"command": "ln -s /proc/self/environ AGENTS.md"}), text_reply("linked"))
    assert bantam_p(server, home).returncode == 0
    assert (home / "AGENTS.md").is_symlink()
    server.add(text_reply("hi"))
    r = bantam_p(server, home)
    assert r.returncode == 0, r.stderr
    assert SECRET.encode() not in sent(server)


@pytest.mark.parametrize("make", ["fifo", "dev-zero"])
def test_agents_md_that_never_ends_neither_hangs_nor_exhausts_memory(home, server, make):
    if make == "fifo":
        os.mkfifo(home / "AGENTS.md")
    else:
        (home / "AGENTS.md").symlink_to("/dev/zero")
    server.add(text_reply("hi"))
    r = bantam_p(server, home, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "hi", r.stderr
    assert "not read: AGENTS.md" in r.stderr and "Traceback" not in r.stderr


def test_the_read_path_class(home, tmp_path):
    """Each way out, through the function every in-process read uses."""
    outside = tmp_path / "outside.txt"
    outside.write_text("SECRET OUTSIDE")
    (home / "CLAUDE.md").write_text("# rules")
    (home / "AGENTS.md").symlink_to("CLAUDE.md")  # a link inside the project is fine
    assert agents_md(home) == "# rules"
    cases = {"out": outside, "proc": Path("/proc/self/status"), "dev": Path("/dev/zero"),
             "own": Path(os.environ["HOME"], ".bantam")}
    cases["own"].mkdir()
    (cases["own"] / "cfg").write_text("api_key=sk-own")
    cases["own"] = cases["own"] / "cfg"
    for name, target in cases.items():
        (home / name).symlink_to(target)
        with pytest.raises(Refused, match="not read"):
            read_inside(home, name, 1000)
    os.mkfifo(home / "pipe")
    assert isinstance(finishes(read_inside, home, "pipe", 1000).get("error"), Refused)
    (home / "big").write_bytes(b"x" * 5000)
    assert read_inside(home, "big", 100) == b"x" * 100  # bounded


# --- the model's read tools ---------------------------------------------------------------------

@pytest.mark.parametrize("tool", ["read_file", "read_image", "read_pdf"])
def test_read_tools_refuse_fifos_devices_and_the_kernels_files(home, tool):
    box = make_toolbox((tool,), ToolContext(Config(), folder=home))
    os.mkfifo(home / "pipe")
    (home / "environ").symlink_to("/proc/self/environ")
    for path, why in (("pipe", "not a regular file"), ("/dev/zero", "leads into /dev"),
                      ("environ", "leads into /proc"), ("/proc/self/environ", "leads into /proc")):
        outcome = finishes(box.execute, tool, json.dumps({"path": path}))["value"]
        assert outcome.is_error and why in outcome.content, (path, outcome.content)


def test_an_editors_diff_never_reads_a_device(home):
    from bantam.acp import updates
    assert finishes(updates.read_text, Path("/dev/zero"))["value"] is None
    os.mkfifo(home / "pipe")
    assert finishes(updates.read_text, home / "pipe")["value"] is None
    (home / "f.txt").write_text("old")
    assert updates.read_text(home / "f.txt") == "old"


# --- settings files bantam reads ----------------------------------------------------------------

def test_mcp_json_that_never_ends_is_one_clear_line(home):
    os.mkfifo(home / ".mcp.json")
    r = run_bantam("mcp", "list", cwd=home, timeout=60)
    assert r.returncode == 2 and "not read: " in r.stderr and "Traceback" not in r.stderr, r.stderr
    os.unlink(home / ".mcp.json")
    (home / ".mcp.json").symlink_to("/dev/zero")
    r = run_bantam("mcp", "list", cwd=home, timeout=60)
    assert r.returncode == 2 and ".mcp.json leads into /dev" in r.stderr, r.stderr


def test_a_project_config_linked_to_the_environment_is_refused(home, server):
    (home / ".bantam.cfg").symlink_to("/proc/self/environ")
    r = bantam_p(server, home)
    assert r.returncode == 2 and "not read: " in r.stderr and SECRET not in r.stderr + r.stdout, r.stderr


# --- the daemon's own files, and where its key goes ----------------------------------------------

def test_daemon_memory_linked_to_its_config_keeps_the_keys_out(home):
    from bantam.daemon import layout, prompt, settings
    agent = layout.AgentDir(home / "agent")
    layout.create(agent)
    key, token = "sk-daemon-0123456789", "123456:telegram-token-abcdef"
    (agent / "config.json").write_text(json.dumps({"api_key": key, "endpoint": "http://127.0.0.1:9/v1",
                                                   "telegram_token": token, "telegram_chat_id": "1"}))
    for name in ("MEMORY.md", "SOUL.md", "LIFE.md"):
        os.unlink(agent / name)
        (agent / name).symlink_to("config.json")
    s, _ = settings.load(agent / "config.json")
    text = prompt.system_prompt(agent, s, False) + prompt.life_message(agent, s)["content"]
    assert key not in text and token not in text
    assert "not read: agent/MEMORY.md leads to" in text


def test_daemon_takes_the_users_endpoint_model_and_key_together(home, tmp_path):
    """A new agent folder: the endpoint, model and key of the user's file, like every mode."""
    key = "sk-user-0123456789abcdef"
    with FakeServer() as model:
        model.add(*[text_reply("ok")] * 5)
        config = Path(os.environ["HOME"], ".config", "bantam", "config")
        config.parent.mkdir(parents=True)
        config.write_text(f"endpoint={model.url}\nmodel=user-model\napi_key={key}\n")
        proc = subprocess.Popen([sys.executable, "-m", "bantam", "daemon"], cwd=home, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            request = wait_for(lambda: model.chat_requests(), "the daemon's first request")[0]
        finally:
            proc.terminate()
            proc.wait(30)
        assert request.body["model"] == "user-model"
        assert request.headers.get("authorization") == f"Bearer {key}"
        written = json.loads((home / "agent" / "config.json").read_text())
        assert "endpoint" not in written and "model" not in written


def test_daemon_never_sends_the_users_key_to_another_endpoint(home):
    key = "sk-user-0123456789abcdef"
    with FakeServer() as users, FakeServer() as other:
        other.add(*[text_reply("ok")] * 5)
        config = Path(os.environ["HOME"], ".config", "bantam", "config")
        config.parent.mkdir(parents=True)
        config.write_text(f"endpoint={users.url}\napi_key={key}\n")
        (home / "agent").mkdir()
        (home / "agent" / "config.json").write_text(json.dumps({"api_base": other.url, "model": "m",
                                                                "heartbeat_s": 0}))
        proc = subprocess.Popen([sys.executable, "-m", "bantam", "daemon"], cwd=home, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            request = wait_for(lambda: other.chat_requests(), "the daemon's first request")[0]
        finally:
            proc.terminate()
            proc.wait(30)
        assert key not in json.dumps(request.headers) and not users.chat_requests()


# --- the second line: every request body is redacted -------------------------------------------

def test_a_secret_in_the_conversation_leaves_as_stars(home, server):
    server.add(text_reply("noted"))
    r = run_bantam("-p", f"my token is {SECRET}", "--endpoint", server.url, "--model", "test-model", cwd=home,
                   env={"GH_TOKEN": SECRET})
    assert r.returncode == 0, r.stderr
    assert SECRET.encode() not in sent(server) and b"my token is ***" in sent(server)


# --- the class: no file is read in-process but through the read path, or by a reason -------------

# module:function -> why a direct read is safe there: the file is bantam's own (written by bantam
# in its own folders, which the model cannot reach) or is not a file the model or a project chose.
OWN_READS = {
    "acp/conversation.py:write_text": "the editor's text (fs/read_text_file), not a file",
    "acp/conversation.py:tool_started": "updates.read_text, which reads through sandbox.read_for_model",
    "acp/conversation.py:tool_finished": "updates.read_text, as above",
    "batch/agent.py:saved_result": "a task's result in ~/.bantam/threads",
    "batch/agent.py:run": "opens its own descriptor",
    "batch/tasks.py:identity": "the batch's own state file, in ~/.bantam",
    "bundled.py:join": "an embedded model's chunks (package data, checked against the pinned SHA-256) and the joined file",
    "cache.py:_read": "~/.bantam/cache",
    "config.py:write_value": "the config file the user asked /cfg to change (read to keep its lines)",
    "daemon/bg.py:lost": "the daemon's bg/ records, written by the daemon",
    "daemon/bus.py:_finish_journal": "the conversation's journal, written by the daemon",
    "daemon/bus.py:_overwrite": "writes, not reads",
    "daemon/telegram.py:send_forever": "the outbox, written by the daemon",
    "daemon/telegram.py:_read_offset": "the daemon's offset file",
    "daemon/triggers.py:_same_fire": "the trigger queue, written by the daemon",
    "daemon/triggers.py:inject_next": "the trigger queue, written by the daemon",
    "fsutil.py:read": "JsonlLog: bantam's own logs",
    "fsutil.py:_rewrite": "JsonlLog: bantam's own logs",
    "lineeditor.py:writable_history": "appends",
    "mcp/cache.py:load": "~/.bantam's MCP tool-list cache",
    "mcp/hub.py:_client": "writes the server's log",
    "mcp/hub.py:_evidence": "the server's log, written by bantam",
    "providers/aids/__init__.py:_profiles": "package data",
    "providers/kv_cache.py:restore": "~/.bantam's saved prompt state",
    "providers/llama_probe.py:_cpu_flags": "/proc/cpuinfo: never sent anywhere",
    "providers/llama_probe.py:_remember": "~/.bantam's probe cache",
    "providers/llama_probe.py:ensure_runs": "~/.bantam's probe cache",
    "providers/local.py:check_gguf": "reads the model file's magic bytes only",
    "runs/context.py:file_part": "the run's own artifacts (run store)",
    "runs/optimize.py:_trace": "the run's own files",
    "runs/optimize.py:traces": "the run's own files",
    "runs/store.py:in_use": "the run's lock",
    "runs/store.py:load": "the run's own state",
    "runs/store.py:goal_changed": "the run's own goal copy",
    "transcripts.py:_project_of": "~/.bantam/sessions",
    "transcripts.py:read": "~/.bantam/sessions",
    "transcripts.py:result": "~/.bantam/threads",
    "trust.py:_read_json": "~/.bantam's trust store",
    "undo/store.py:get": "~/.bantam/undo's own blobs",
    "undo/__init__.py:before_call": "the recorder's own open() method (it writes the turn's record), not a file",
    "undo/turns.py:open_record": "the turn's scan file in ~/.bantam/undo, opened to hold its flock while the turn lives",
    "undo/turns.py:finish_cut": "a cut turn's scan file in ~/.bantam/undo, opened to test its flock",
    "undo/watch.py:__init__": "the inotify descriptor, not a file",
    "undo/store.py:read_json": "~/.bantam/undo's own records",
    "undo/store.py:describe": "undo's record of a file it snapshotted",
    "web/app.py:build_app": "package data",
}


def direct_reads() -> list[str]:
    found = []
    src = ROOT / "src" / "bantam"
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text())
        owner = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    owner[id(sub)] = node.name  # the innermost function wins (walked last)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            builtin = isinstance(fn, ast.Name) and fn.id == "open"
            method = isinstance(fn, ast.Attribute) and fn.attr in ("read_text", "read_bytes", "open") and not (
                isinstance(fn.value, ast.Name) and fn.value.id in ("os", "webbrowser"))
            if builtin or method:
                found.append(f"{path.relative_to(src).as_posix()}:{owner.get(id(node), '<module>')}")
    return found


def test_every_in_process_read_goes_through_the_read_path_or_names_its_reason():
    unexplained = sorted({site for site in direct_reads() if site not in OWN_READS})
    assert not unexplained, ("read these through fsutil.open_inside/read_inside (or, for a file bantam "
                             f"itself wrote in its own folders, list it in OWN_READS with why): {unexplained}")


def test_the_daemons_logs_are_never_written_or_read_through_a_link(home):
    """LIFE.md and messages.jsonl sit where the model writes: a link it puts there leads nowhere."""
    from bantam.daemon.bus import MessageFile
    from bantam.daemon.layout import AgentDir, life
    agent = AgentDir(home / "agent")
    agent.root.mkdir()
    target = home / "bashrc"
    target.write_text("# the user's file\n")
    (agent / "LIFE.md").symlink_to(target)
    with pytest.raises(OSError):
        life(agent, "tool", "echo owned")
    assert target.read_text() == "# the user's file\n"
    (agent / "config.json").write_text(json.dumps({"api_key": "sk-daemon-0123456789"}) + "\n")
    (agent / "messages.jsonl").symlink_to("config.json")
    with pytest.raises(OSError):
        MessageFile(agent / "messages.jsonl").read()
