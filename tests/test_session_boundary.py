"""The boundary as a person sees it in a session: what "always" covers, changing the sandbox from
the session, the session's /tmp, the working directory and the notes a refused command gets. Real
bubblewrap, real shell commands, bantam in a real pseudo-terminal against a real local server."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from bantam.approval import Approvals, Verdict
from bantam.config import Config
from bantam.sandbox import session_tmp, unavailable
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import base_cfg, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.test_repl import Term
from tests import test_sandbox
from tests.test_sandbox import shell, toolbox

listener, outside = test_sandbox.listener, test_sandbox.outside  # the fixtures: a host server, a folder outside

if unavailable():
    pytest.skip(f"bubblewrap cannot run here: {unavailable()}", allow_module_level=True)


def tool_results(server) -> list[str]:
    return [m["content"] for m in server.chat_requests()[-1].body["messages"] if m["role"] == "tool"]


def answer(term: Term, question: str, reply: str) -> str:
    """Wait for `question` at the approval prompt, answer `reply`; what was shown before it."""
    before = term.expect(question)
    term.child.send(reply + "\r")
    return before


def converse(term: Term, *steps: tuple[str, str]) -> None:
    """Type each line in turn, and wait for what bantam says to it."""
    for line, said in steps:
        term.enter(line)
        term.expect(said)


# --- "always" for a destructive command ---------------------------------------------------------

def test_always_for_a_destructive_command_covers_that_exact_command_only(home, server):
    """`rm -rf build` offers no "always 'rm'" (which would let `rm -rf ~` through next): "always"
    covers that very command, and `rm -rf other` is asked again."""
    write_cfg(home, **base_cfg(server, approval="always"))
    (home / "build").mkdir()
    (home / "other").mkdir()
    server.add(tool_reply("shell_exec", {"command": "rm -rf build"}),
               tool_reply("shell_exec", {"command": "rm -rf  build"}),
               tool_reply("shell_exec", {"command": "rm -rf other"}),
               text_reply("cleaned"))
    term = Term(home)
    term.enter("clean up")
    why = "approval needed (approval=always; rm destroys what it touches, so 'always' covers only this exact command)"
    term.expect(f"{why}: rm -rf build")
    shown = answer(term, "run this? [y]es / [n]o [reason] / [a]lways this exact command / [e]dit:", "a")
    assert "[a]lways 'rm'" not in shown
    term.expect(f"{why}: rm -rf other")
    answer(term, "[a]lways this exact command / [e]dit:", "n keep it")
    term.expect("cleaned")
    assert term.quit() == 0
    assert not (home / "build").exists() and (home / "other").exists()
    assert tool_results(server) == ["\n\nexit: 0", "\n\nexit: 0", "error: not run: the user declined: keep it"]


def test_always_for_a_prefix_never_covers_its_destructive_form(home):
    """`always 'git push'` lets `git push origin main` through, not `git push --force origin main`."""
    asked: list = []
    box = toolbox(asked, [Verdict(True, remember=True), Verdict(False, "not forced")],
                  sandbox="workspace", approval="always")
    assert shell(box, "git push").endswith("exit: 128")  # not a repository, but it ran
    assert shell(box, "git push origin main").endswith("exit: 128")  # covered: not asked
    assert shell(box, "git push --force origin main") == "error: not run: the user declined: not forced"
    assert [(r.prefix, r.exact) for r in asked] == [("git push", False), ("git push --force origin main", True)]
    asked.clear()
    box = toolbox(asked, [Verdict(True, remember=True), Verdict(False, "not that")], sandbox="workspace", approval="always")
    assert shell(box, "sh -c 'echo hi'").endswith("hi\n\n\nexit: 0")
    assert shell(box, "sh -c 'rm -rf build'") == "error: not run: the user declined: not that"  # quoted, still rm
    assert [(r.prefix, r.exact) for r in asked] == [("sh", False), ("sh -c 'rm -rf build'", True)]


# --- changing the boundary from the session -----------------------------------------------------

def test_a_person_changes_the_boundary_for_the_session_and_nothing_is_written(home, server, listener, outside):
    """`/sandbox read-only`, `/sandbox off` take effect at once and say so, and write no file; `/cfg
    sandbox_network on` in a project not trusted writes the one line asked for and is in force for
    this session too (a person's own command is not a repository's file), and says what a later
    start will do with it."""
    config = write_cfg(home, **base_cfg(server))  # no boundary key: the project is not trusted
    before = config.read_text()
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{listener} && head -1 <&3"
    server.add(tool_reply("shell_exec", {"command": "touch ro.txt"}), text_reply("TRIED-RO"),
               tool_reply("shell_exec", {"command": connect}), text_reply("TRIED-NET"),
               tool_reply("shell_exec", {"command": f"touch {outside}/free.txt"}), text_reply("TRIED-OFF"))
    term = Term(home)
    converse(term, ("/sandbox read-only", "for this session (nothing written): sandbox=read-only: commands may write only"),
             ("write a file", "TRIED-RO"),
             ("/cfg sandbox_network on", "sandbox_network=true (written to .bantam.cfg; in force for this session; "
                                         ".bantam.cfg is not trusted as it is now, so a later start ignores it until /trust)"),
             ("reach the host", "TRIED-NET"),
             ("/sandbox off", "for this session (nothing written): sandbox off: commands the model starts run with "
                              "your full rights"),
             ("write outside", "TRIED-OFF"),
             ("/sandbox bogus", "usage: /sandbox [off|workspace|read-only] [network on|off]"))
    assert term.quit() == 0
    results = tool_results(server)
    assert "Read-only file system" in results[0] and not (home / "ro.txt").exists()
    assert results[1].startswith("hello from the host\n")
    assert results[2].endswith("exit: 0") and (outside / "free.txt").exists()
    assert config.read_text() == before + "sandbox_network=on\n"  # /cfg's one line; /sandbox wrote nothing


# --- the session's /tmp ----------------------------------------------------------------------------

def test_the_sessions_tmp_outlives_its_commands_and_the_result_says_where(home, server):
    """A file a command writes to /tmp is there for the session's next command, after a change of
    the boundary too, and on the host in ~/.bantam/tmp, which the result names."""
    write_cfg(home, **base_cfg(server))
    name = f"report-{os.getpid()}.txt"
    server.add(tool_reply("shell_exec", {"command": f"echo draft > /tmp/{name}"}), text_reply("WROTE-IT"),
               tool_reply("shell_exec", {"command": f"cat /tmp/{name}"}), text_reply("READ-IT"))
    term = Term(home)
    converse(term, ("write the report", "WROTE-IT"), ("/sandbox read-only", "for this session"),
             ("read the report", "READ-IT"))
    assert term.quit() == 0
    [folder] = Path(os.environ["HOME"], ".bantam", "tmp").iterdir()
    assert (folder / name).read_text() == "draft\n" and not Path("/tmp", name).exists()
    assert tool_results(server) == [
        f"\n[sandbox: /tmp is this session's own folder, kept between its commands: on the host it is {folder} "
        f"(the host's /tmp is not visible to commands); new there: {name}]\n\nexit: 0",
        "draft\n\n\nexit: 0"]


def session_tools(folder: Path, **values) -> tuple:
    """The file tools and shell_exec of a session in `folder`, with a /tmp of its own."""
    tmp = session_tmp()
    ctx = ToolContext(Config(**values), approvals=Approvals(), folder=folder, tmp=tmp)
    return make_toolbox(["shell_exec", "write_file", "read_file", "edit_file", "list_files"], ctx), tmp


def call(box, name: str, **args) -> str:
    return box.execute(name, json.dumps(args)).content


@pytest.mark.parametrize("mode", ["workspace", "read-only"])
def test_the_file_tools_see_the_sessions_tmp_as_its_commands_do(home, mode):
    """/tmp is one place for the model: what a command wrote there read_file reads, list_files
    lists, and what write_file or edit_file put there a command finds; none of it is on the
    host's /tmp. A path the session's folder shows at its own place stays there."""
    box, tmp = session_tools(home, sandbox=mode)
    name = f"r-{os.getpid()}-{mode}.txt"
    assert call(box, "shell_exec", command=f"echo draft > /tmp/{name}").endswith("exit: 0")
    assert call(box, "read_file", path=f"/tmp/{name}").endswith(" 1\tdraft")
    assert call(box, "write_file", path=f"/tmp/w-{name}", content="hello\n").startswith("wrote")
    assert call(box, "edit_file", path=f"/tmp/w-{name}", old_string="hello", new_string="bye").startswith("replaced")
    assert call(box, "shell_exec", command=f"cat /tmp/w-{name}").startswith("bye\n")
    assert {name, f"w-{name}"} <= {line.split(" ")[0] for line in call(box, "list_files", path="/tmp").splitlines()}
    assert (tmp / f"w-{name}").read_text() == "bye\n"
    assert not Path("/tmp", name).exists() and not Path("/tmp", f"w-{name}").exists()
    if mode == "workspace":  # the session's folder lies under /tmp here (pytest's): at its own path for both
        assert call(box, "write_file", path=str(home / "own.txt"), content="x").startswith("wrote")
        call(box, "shell_exec", command="echo in-folder > f.txt")
        assert call(box, "read_file", path=str(home / "f.txt")).endswith("1\tin-folder")
        assert (home / "own.txt").read_text() == "x"


def test_a_link_in_the_sessions_tmp_leads_nowhere_the_boundary_forbids(home, outside, monkeypatch):
    """A link a command leaves in /tmp is followed only where a read or write may go: not into
    bantam's own folders (keys), not out of the writable roots, and no other session's /tmp."""
    monkeypatch.setenv("BANTAM_HOME", str(outside / "bantam"))  # not under /tmp, as ~/.bantam is for a user
    secret = outside / "bantam" / "model.cfg"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("api_key=sk-live-secret\n")
    (outside / "theirs.txt").write_text("theirs\n")
    box, tmp = session_tools(home, sandbox="workspace")
    call(box, "shell_exec", command=f"ln -s {secret} /tmp/key; ln -s {outside} /tmp/out; true")
    assert "bantam's own files" in call(box, "read_file", path="/tmp/key")
    assert call(box, "write_file", path="/tmp/key", content="api_key=mine\n").startswith("error: not written")
    assert "is outside the writable roots" in call(box, "write_file", path="/tmp/out/new.txt", content="x")
    assert secret.read_text() == "api_key=sk-live-secret\n" and not (outside / "new.txt").exists()
    other, _ = session_tools(home, sandbox="workspace")
    call(other, "shell_exec", command="echo mine > /tmp/mine.txt")
    assert "bantam's own files" in call(box, "read_file", path=str(next(tmp.parent.glob("*/mine.txt"))))


def test_with_the_sandbox_off_tmp_is_the_hosts_for_everything(home):
    box, tmp = session_tools(home, sandbox="off")
    name = f"host-{os.getpid()}.txt"
    try:
        assert call(box, "write_file", path=f"/tmp/{name}", content="on the host\n").startswith("wrote")
        assert Path("/tmp", name).read_text() == "on the host\n"
        assert call(box, "shell_exec", command=f"cat /tmp/{name}").startswith("on the host")
    finally:
        Path("/tmp", name).unlink(missing_ok=True)


# --- the working directory, wherever it lives ------------------------------------------------------

@pytest.fixture
def project_in_tmp():
    path = Path(tempfile.mkdtemp(prefix="bantam-project-", dir="/tmp"))
    (path / "data.txt").write_text("payload\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("mode, writable", [("read-only", ()), ("workspace", None), ("workspace", ("elsewhere",))])
def test_the_project_is_the_working_directory_wherever_it_lives(home, project_in_tmp, mode, writable):
    """A project under /tmp (which commands see private) is still there, at its own path, and is
    the command's folder: read-only unless it is a writable root."""
    if writable:
        (project_in_tmp / "elsewhere").mkdir()
    values = {"sandbox": mode, **({"sandbox_writable": writable} if writable else {})}
    box = make_toolbox(["shell_exec"], ToolContext(Config(**values), approvals=Approvals(), folder=project_in_tmp))
    result = shell(box, "pwd; cat data.txt; echo x > ro.txt")
    assert result.startswith(f"{project_in_tmp}\npayload\n"), result
    if mode == "workspace" and not writable:
        assert result.endswith("exit: 0") and (project_in_tmp / "ro.txt").read_text() == "x\n"
    else:
        assert "ro.txt: Read-only file system" in result and not (project_in_tmp / "ro.txt").exists()


# --- notes on a refused command --------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    "curl -sS http://127.0.0.1:{port}/",
    "wget -q http://127.0.0.1:{port}/",
    f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {{port}}))\"",
])
def test_a_connection_that_fails_with_the_network_off_says_the_network_is_off(home, listener, command):
    program = command.split()[0]
    if not shutil.which(program):
        pytest.skip(f"{program} is not installed")
    result = shell(toolbox(sandbox="workspace"), command.format(port=listener))
    assert "hello from the host" not in result
    assert "[sandbox: the network is off for commands (sandbox_network=off), localhost included: 127.0.0.1 is " \
        "the command's own loopback, not the host's;" in result


def test_reading_bantams_own_folder_names_it_wherever_home_is(home, monkeypatch):
    """With HOME under /var/tmp, a read of ~/.bantam is explained as bantam's own folder, not as the
    private /tmp (whose name a path like /var/tmp/... holds)."""
    user = Path(tempfile.mkdtemp(prefix="bantam-home-", dir="/var/tmp"))
    try:
        monkeypatch.setenv("HOME", str(user))
        (user / ".bantam").mkdir()
        (user / ".bantam" / "trust.json").write_text("{}")
        result = shell(toolbox(sandbox="workspace"), "cat ~/.bantam/trust.json")
        assert f"cat: {user}/.bantam/trust.json: No such file or directory" in result
        assert f"[sandbox: {user}/.bantam is bantam's own folder (its keys, sessions and trust decisions): " \
            "commands see it empty and cannot change it, whatever the mode;" in result
        assert "/tmp is private" not in result
    finally:
        shutil.rmtree(user, ignore_errors=True)
