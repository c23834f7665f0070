"""The sandbox and approvals (issue 18), from outside: real bubblewrap, real shell commands, real
files, a real server on 127.0.0.1, bantam itself in a real pseudo-terminal. Nothing is mocked."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pexpect
import pytest

from bantam.approval import Approvals, Verdict
from bantam.config import Config
from bantam.sandbox import unavailable
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.test_repl import PROMPT_READY

if unavailable():
    pytest.skip(f"bubblewrap cannot run here: {unavailable()}", allow_module_level=True)


def toolbox(asked: list | None = None, answers: list[Verdict] | None = None, **values):
    """The real tool layer with `values` as configuration; `answers` stand in for the person."""
    ask = None
    if answers is not None:
        def ask(request):
            asked.append(request)
            return answers.pop(0)
    ctx = ToolContext(Config(**values), approvals=Approvals(ask))
    return make_toolbox(["shell_exec", "write_file"], ctx)


def shell(box, command: str, **extra) -> str:
    return box.execute("shell_exec", json.dumps({"command": command, **extra})).content


@pytest.fixture
def outside():
    """A directory outside every writable root, and not under /tmp (the sandbox has its own /tmp)."""
    path = Path(tempfile.mkdtemp(prefix="bantam-sandbox-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 that answers every connection with one line."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello from the host\n")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    sock.close()


# --- the filesystem ---------------------------------------------------------------------------

def test_workspace_writes_inside_and_is_refused_outside(home, outside):
    box = toolbox(sandbox="workspace")
    result = shell(box, f"echo in > inside.txt && echo out > {outside}/escaped.txt")
    assert (home / "inside.txt").read_text() == "in\n"
    assert not (outside / "escaped.txt").exists()
    assert "Read-only file system" in result
    assert f"[sandbox: writes are refused outside {home} and a private /tmp, and to .git," in result
    assert "escalate" not in result and "tell the user in your answer" in result  # no person to ask
    assert result.endswith("]\n\nexit: 1")
    asked: list = []
    result = shell(toolbox(asked, answers=[], sandbox="workspace"), f"echo out > {outside}/escaped.txt")
    assert "call shell_exec again with `escalate` set to the reason" in result and not asked


def test_a_tools_folder_under_tmp_is_seen_read_only_through_the_private_tmp(home):
    """The folder bantam_tools_dir names is the one the model is told to run scripts from: under
    /tmp (a clone made there) the private /tmp would hide it, so it is shown again, read-only."""
    tools = Path(tempfile.mkdtemp(prefix="bantam-tools-test-", dir="/tmp"))
    other = tools.parent / f"{tools.name}-other"
    try:
        (tools / "hello").write_text("#!/bin/sh\necho hi from the tools folder\n")
        (tools / "hello").chmod(0o755)
        box = toolbox(sandbox="workspace", bantam_tools_dir=str(tools))
        assert "hi from the tools folder" in shell(box, f"{tools}/hello && echo ran")  # a command line, not a path
        assert "exit: 0" not in shell(box, f"echo x > {tools}/new")
        assert not (tools / "new").exists()
        other.mkdir()
        (other / "secret.txt").write_text("not for the model\n")
        assert "not for the model" not in shell(box, f"cat {other}/secret.txt")  # only that folder is shown
        (other / "run.sh").write_text("#!/bin/sh\ncat \"$(dirname \"$0\")/secret.txt\"\n")
        (other / "run.sh").chmod(0o755)
        # a command line that is just a path under /tmp does not make its folder visible either
        assert "not for the model" not in shell(box, f"{other}/run.sh")
    finally:
        shutil.rmtree(tools, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def test_git_and_config_files_stay_read_only_in_the_workspace(home):
    (home / ".git").mkdir()
    (home / ".git" / "config").write_text("[core]\n")
    (home / ".bantam.cfg").write_text("model=m\n")
    box = toolbox(sandbox="workspace")
    result = shell(box, "echo evil >> .git/config; echo sandbox=off >> .bantam.cfg; "
                        "echo hook > .git/hooks-new; rm -f .bantam.cfg; echo fine > ok.txt")
    assert (home / ".git" / "config").read_text() == "[core]\n"
    assert (home / ".bantam.cfg").read_text() == "model=m\n"
    assert not (home / ".git" / "hooks-new").exists()
    assert (home / "ok.txt").read_text() == "fine\n"
    assert result.count("Read-only file system") >= 2


def test_a_config_file_the_command_creates_is_removed(home):
    box = toolbox(sandbox="workspace")
    result = shell(box, "echo sandbox=off > model.cfg && echo made")
    assert not (home / "model.cfg").exists()
    assert f"[sandbox: the command created {home / 'model.cfg'}, which is protected at any depth (bantam reads " \
        "it as configuration at its next start), so it was removed; nothing runs outside the sandbox here" in result


def test_read_only_mode_leaves_only_a_private_tmp(home):
    box = toolbox(sandbox="read-only")
    marker = f"/tmp/bantam-sandbox-test-{os.getpid()}-{time.monotonic_ns()}"
    result = shell(box, f"echo a > {marker} && cat {marker} && echo b > here.txt")
    assert "a\n" in result and "Read-only file system" in result
    assert not Path(marker).exists()  # that /tmp was the sandbox's own
    assert not (home / "here.txt").exists()
    assert "writes are refused outside a private /tmp" in result


def test_configured_writable_roots_replace_the_working_directory(home, outside):
    box = toolbox(sandbox="workspace", sandbox_writable=(str(outside),))
    result = shell(box, f"echo ok > {outside}/allowed.txt; echo no > here.txt")
    assert (outside / "allowed.txt").read_text() == "ok\n"
    assert not (home / "here.txt").exists()
    assert "Read-only file system" in result


def test_a_writable_root_that_does_not_exist_is_named(home):
    result = shell(toolbox(sandbox="workspace", sandbox_writable=("build",)), "true")
    assert result == f"error: not run: sandbox_writable names no directory at {home / 'build'}"


def test_write_file_obeys_the_same_roots(home, outside):
    box = toolbox(sandbox="workspace")
    assert box.execute("write_file", json.dumps({"path": "sub/a.txt", "content": "x"})).content \
        == "wrote 1 bytes to sub/a.txt"
    refused = box.execute("write_file", json.dumps({"path": str(outside / "b.txt"), "content": "x"}))
    assert refused.is_error and "no one to ask" in refused.content
    assert f"{outside / 'b.txt'} is outside the writable roots" in refused.content
    assert not (outside / "b.txt").exists()
    (home / ".git").mkdir()
    for protected in (".git/config", ".bantam.cfg", "model.cfg"):
        out = box.execute("write_file", json.dumps({"path": protected, "content": "x"}))
        assert out.is_error and "is protected" in out.content, protected
        assert not (home / protected).exists()
    never = toolbox(sandbox="workspace", approval="never")
    out = never.execute("write_file", json.dumps({"path": str(outside / "c.txt"), "content": "x"}))
    assert out.is_error and "approval=never" in out.content


def test_controlled_run_checks_run_in_the_sandbox(home, outside):
    from bantam.runs.tools import Workspace, in_workspace
    from bantam.sandbox import Sandbox
    check = ["bash", "-c", f"echo ok > inside.txt; echo no > {outside}/x.txt"]
    ws = Workspace(home, commands={"check": check}, sandbox=Sandbox.for_config(Config(), home))
    result = in_workspace(ws).execute("shell", json.dumps({"command": "check"}))
    assert result.is_error and "Read-only file system" in result.content
    assert (home / "inside.txt").exists() and not (outside / "x.txt").exists()


def test_sandbox_off_is_the_seeds_way(home, outside):
    box = toolbox(sandbox="off")
    result = shell(box, f"echo out > {outside}/free.txt && echo done")
    assert (outside / "free.txt").exists() and "done" in result
    assert box.execute("write_file", json.dumps({"path": str(outside / "w.txt"), "content": "x"})).content \
        .startswith("wrote")


# --- the network and processes ------------------------------------------------------------------

CONNECT = "exec 3<>/dev/tcp/127.0.0.1/{port} && head -1 <&3"


def test_network_off_cannot_reach_localhost(home, listener):
    result = shell(toolbox(sandbox="workspace"), CONNECT.format(port=listener))
    assert "hello from the host" not in result
    assert "[sandbox: the network is off for commands (sandbox_network=off), localhost included:" in result


def test_network_on_reaches_localhost(home, listener):
    result = shell(toolbox(sandbox="workspace", sandbox_network=True), CONNECT.format(port=listener))
    assert "hello from the host" in result and result.endswith("exit: 0")


def test_the_sandboxed_command_is_killed_at_the_timeout_with_its_children(home):
    tag = f"{time.monotonic_ns() % 10**6}.5"  # a sleep length no other process uses
    box = toolbox(sandbox="workspace", shell_timeout=1.0)
    result = shell(box, f"sleep {tag} & sleep {tag}; echo never")
    assert "[timed out after 1s; process group killed]" in result and "never" not in result
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _processes_with(f"sleep\0{tag}"):
        time.sleep(0.05)
    assert not _processes_with(f"sleep\0{tag}")


def test_the_sandboxed_command_dies_with_bantam_even_on_sigkill(home, server):
    tag = f"{time.monotonic_ns() % 10**6}.25"
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": f"sleep {tag} & sleep {tag}"}))
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", "wait"], cwd=home, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(_processes_with(f"sleep\0{tag}")) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the command never started"
        time.sleep(0.05)
    proc.kill()  # SIGKILL: bantam has no chance to clean up; bubblewrap's --die-with-parent does
    proc.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _processes_with(f"sleep\0{tag}"):
        time.sleep(0.05)
    assert not _processes_with(f"sleep\0{tag}")


def _processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_text():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def bare_path(tmp_path: Path) -> Path:
    """A PATH directory with bash and touch, and no bwrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "touch", "sh"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return bin_dir


def test_missing_bubblewrap_is_a_clear_refusal_not_a_fallback(home, server, tmp_path):
    """With no bwrap on PATH the command is not run, and the model hears why."""
    bin_dir = bare_path(tmp_path)
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "touch ran.txt"}), text_reply("ok"))
    done = run_bantam("-p", "go", cwd=home, env={"PATH": str(bin_dir)})
    assert done.returncode == 0, done.stderr
    assert not (home / "ran.txt").exists()
    result = server.chat_requests()[1].body["messages"][-1]["content"]
    assert "not run: the sandbox needs bubblewrap (bwrap), which is not installed" in result
    assert "--yolo" in result


# What bubblewrap 0.8 prints where unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0,
# user.max_user_namespaces=0): a stand-in `bwrap` says it, since a test must not change the host's sysctls.
NO_USERNS = ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
             "non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl "
             "kernel.unprivileged_userns_clone=1'.")


def test_namespaces_not_allowed_is_a_clear_refusal(home, server, tmp_path):
    bin_dir = bare_path(tmp_path)
    (bin_dir / "bwrap").write_text(f"#!{shutil.which('bash')}\necho \"{NO_USERNS}\" >&2\nexit 1\n")
    (bin_dir / "bwrap").chmod(0o755)
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "touch ran.txt"}), text_reply("ok"))
    done = run_bantam("-p", "go", cwd=home, env={"PATH": str(bin_dir)})
    assert done.returncode == 0, done.stderr
    assert not (home / "ran.txt").exists()
    result = server.chat_requests()[1].body["messages"][-1]["content"]
    assert result.startswith(f"error: not run: bubblewrap cannot create its namespaces here ({NO_USERNS}); "
                             "user namespaces may be disabled")


# --- approvals with no one to ask -----------------------------------------------------------------

def test_escalation_with_no_one_to_ask_is_refused_and_not_run(home, outside):
    result = shell(toolbox(sandbox="workspace"), f"touch {outside}/x", escalate="it must write there")
    assert result.startswith("error: not run: this needs a person's approval")
    assert "no one to ask" in result and not (outside / "x").exists()
    result = shell(toolbox(sandbox="workspace", approval="never"), f"touch {outside}/x", escalate="please")
    assert "approval=never" in result and not (outside / "x").exists()


def test_escalation_approved_runs_outside_the_sandbox(home, outside):
    asked: list = []
    box = toolbox(asked, [Verdict(True, f"touch {outside}/x")], sandbox="workspace")
    result = shell(box, f"touch {outside}/x", escalate="it must write there")
    assert result == "\n\nexit: 0" and (outside / "x").exists()
    assert asked[0].why == "the model asks to run this outside the sandbox: it must write there"


def test_one_shot_with_approval_always_refuses_finishes_and_tells_the_model(home, server):
    write_cfg(home, **base_cfg(server, approval="always"))
    server.add(tool_reply("shell_exec", {"command": "touch ran.txt"}), text_reply("understood"))
    done = run_bantam("-p", "make a file", cwd=home)
    assert done.returncode == 0 and done.stdout.strip() == "understood"
    assert not (home / "ran.txt").exists()
    first, second = server.chat_requests()
    assert "Sandbox: your commands and file writes may go only to" in first.body["messages"][0]["content"]
    result = second.body["messages"][-1]["content"]
    assert result.startswith("error: not run: this needs a person's approval (approval=always)")


def test_the_model_reads_why_the_sandbox_refused(home, server, outside):
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": f"touch {outside}/x"}), text_reply("I will ask"))
    done = run_bantam("-p", "make the file", cwd=home)
    assert done.returncode == 0 and not (outside / "x").exists()
    result = server.chat_requests()[1].body["messages"][-1]["content"]
    assert "Read-only file system" in result and "[sandbox: writes are refused outside" in result
    # one-shot: nobody to ask, so `escalate` is neither offered nor suggested
    assert "escalate" not in result and "tell the user in your answer" in result


def test_yolo_turns_both_off(home, server):
    write_cfg(home, **base_cfg(server, approval="always"))
    server.add(tool_reply("shell_exec", {"command": "touch ../yolo.txt"}), text_reply("done"))
    done = run_bantam("--yolo", "-p", "go", cwd=home)
    assert done.returncode == 0, done.stderr
    assert (home.parent / "yolo.txt").exists()
    assert "Sandbox:" not in server.chat_requests()[0].body["messages"][0]["content"]


# --- approvals through a real pseudo-terminal --------------------------------------------------------

def test_terminal_approvals_yes_no_always_edit(home, server):
    write_cfg(home, **base_cfg(server, approval="always"))
    server.add(tool_reply("shell_exec", {"command": "touch a.txt"}),
               tool_reply("shell_exec", {"command": "touch b.txt"}),
               tool_reply("shell_exec", {"command": "touch c.txt"}),
               tool_reply("shell_exec", {"command": "touch d.txt"}),
               tool_reply("shell_exec", {"command": "mkdir e-dir"}),
               text_reply("all done"))
    env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "bantam"], cwd=str(home), env=env, encoding="utf-8",
                          dimensions=(40, 120), timeout=30)
    child.expect_exact("sandbox=workspace: commands may write only")
    child.expect_exact(PROMPT_READY)
    child.send("make files\r")
    answers = ["y", "n not that one", "a", None, "e touch edited.txt"]
    commands = ["touch a.txt", "touch b.txt", "touch c.txt", "touch d.txt", "mkdir e-dir"]
    for command, answer in zip(commands, answers):
        if answer is None:  # `touch` was allowed for the session: not asked again
            continue
        child.expect_exact(f"approval needed (approval=always): {command}")
        assert "approval needed (approval=always): touch d.txt" not in child.before
        prefix = command.split()[0]
        child.expect_exact(f"run this? [y]es / [n]o [reason] / [a]lways '{prefix}' / [e]dit:")
        child.send(answer + "\r")
    child.expect_exact("all done")
    child.expect_exact(PROMPT_READY)
    child.send("/quit\r")
    child.expect(pexpect.EOF)
    assert sorted(p.name for p in home.glob("*.txt")) == ["a.txt", "c.txt", "d.txt", "edited.txt"]
    results = [m["content"] for m in server.chat_requests()[-1].body["messages"] if m["role"] == "tool"]
    assert results[1] == "error: not run: the user declined: not that one"
    assert results[0] == results[2] == results[3] == "\n\nexit: 0"
    # the edited command ran, and the model is told so: it must not take `touch edited.txt` for its `mkdir`
    assert results[4] == "[the user replaced your command before it ran; what ran instead: touch edited.txt]\n\n\nexit: 0"


def test_always_remembers_a_prefix_but_never_a_compound_command(home):
    asked: list = []
    box = toolbox(asked, [Verdict(True, "git status", remember=True), Verdict(False, "no chains"),
                          Verdict(False, "")], sandbox="workspace", approval="always")
    assert shell(box, "git status").endswith("exit: 128")  # not a repository, but it ran
    assert shell(box, "git status --short").endswith("exit: 128")  # `git status` allowed: not asked
    assert shell(box, "git status; touch chained.txt") == "error: not run: the user declined: no chains"
    assert shell(box, "git log") == "error: not run: the user declined"
    assert [r.text for r in asked] == ["git status", "git status; touch chained.txt", "git log"]
    assert [r.prefix for r in asked] == ["git status", "", "git log"]  # a chain is never remembered
    assert not (home / "chained.txt").exists()


def test_a_write_outside_is_asked_and_always_covers_its_directory(home, outside):
    asked: list = []
    box = toolbox(asked, [Verdict(True, remember=True)], sandbox="workspace")
    for name in ("one.txt", "two.txt"):
        out = box.execute("write_file", json.dumps({"path": str(outside / name), "content": name}))
        assert out.content == f"wrote 7 bytes to {outside / name}"
    assert len(asked) == 1 and asked[0].action == "write" and asked[0].prefix == str(outside)
    assert asked[0].why == f"write outside the sandbox: {outside / 'one.txt'} is outside the writable roots " \
        f"({home} and a private /tmp)"
    assert box.execute("write_file", json.dumps({"path": "inside.txt", "content": "x"})).content \
        == "wrote 1 bytes to inside.txt"  # inside the roots: not asked
    assert len(asked) == 1


def test_always_inside_the_sandbox_never_lets_the_same_prefix_out(home, outside):
    asked: list = []
    box = toolbox(asked, [Verdict(True, remember=True), Verdict(False, "stay inside")],
                  sandbox="workspace", approval="always")
    assert shell(box, "touch a.txt").endswith("exit: 0")
    result = shell(box, f"touch {outside}/b.txt", escalate="it goes there")
    assert result == "error: not run: the user declined: stay inside"
    assert [r.action for r in asked] == ["run", "escape"] and not (outside / "b.txt").exists()


def test_always_in_a_folder_never_covers_bantams_own_files_or_protected_names(home):
    """'Always in DIR' lets later writes in DIR through unasked, but never into ~/.bantam,
    ~/.config/bantam, a .git (whose hooks the user's next git runs) or another protected name,
    however the path gets there: those are asked every time, and offer no 'always'."""
    user = Path(os.environ["HOME"])
    (user / ".config" / "bantam").mkdir(parents=True)
    (user / ".bantam").mkdir()
    (user / "proj" / ".git" / "hooks").mkdir(parents=True)
    (user / "state").symlink_to(user / ".bantam")
    asked: list = []
    box = toolbox(asked, [Verdict(True, remember=True)] + [Verdict(False, "not there")] * 5, sandbox="workspace")

    def write(path: Path) -> str:
        return box.execute("write_file", json.dumps({"path": str(path), "content": "x"})).content
    assert write(user / "notes.txt") == f"wrote 1 bytes to {user / 'notes.txt'}"
    assert write(user / "more" / "notes.txt") == f"wrote 1 bytes to {user / 'more' / 'notes.txt'}"
    assert len(asked) == 1  # covered by the "always"
    own = [user / ".config" / "bantam" / "config", user / ".bantam" / "trust.json", user / "state" / "trust.json",
           user / "proj" / ".git" / "hooks" / "pre-commit", user / "proj" / "sub" / ".mcp.json"]
    for path in own:
        assert write(path) == "error: not written: the user declined: not there", path
        assert not path.exists()
    assert [r.prefix for r in asked] == [str(user)] + [""] * 5
    assert asked[1].why.endswith(f"{user / '.config' / 'bantam'} is bantam's own folder, so it is asked every time")
    assert asked[4].why.endswith(".git is protected at any depth, so it is asked every time")


def test_always_for_a_command_never_covers_one_that_names_protected_or_bantams_files(home):
    """The same for commands: `always 'ls'` covers `ls -la`, not `ls .git/hooks` nor `ls ~/.bantam`,
    however the shell would spell them (quotes, globs); nor, outside the sandbox, `cp` into a hook."""
    asked: list = []
    box = toolbox(asked, [Verdict(True, remember=True)] + [Verdict(False, "")] * 4,
                  sandbox="workspace", approval="always")
    assert shell(box, "ls -a").endswith("exit: 0")
    assert shell(box, "ls -la").endswith("exit: 0")
    for command in ("ls .git/hooks", "ls ~/.bantam", "ls .gi?/hooks", "ls '.g'it"):
        assert shell(box, command) == "error: not run: the user declined", command
    assert [r.prefix for r in asked] == ["ls", "", "", "", ""]
    asked.clear()
    box = toolbox(asked, [Verdict(True, remember=True), Verdict(False, "")], sandbox="workspace")
    assert shell(box, "cp -n /dev/null copy.txt", escalate="copy it").endswith("exit: 0")
    assert shell(box, "cp /dev/null .git/hooks/pre-commit", escalate="a hook") == "error: not run: the user declined"
    assert [r.prefix for r in asked] == ["cp", ""] and not (home / ".git").exists()
