"""The boundary as a person sees it in a session: what "always" covers, changing the sandbox from
the session, the session's /tmp, the working directory and the notes a refused command gets. Real
bubblewrap, real shell commands, bantam in a real pseudo-terminal against a real local server."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from bantam.approval import Approvals, Verdict
from bantam.config import Config
from bantam.sandbox import unavailable
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import base_cfg, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.test_repl import Term
from tests.test_sandbox import shell, toolbox

if unavailable():
    pytest.skip(f"bubblewrap cannot run here: {unavailable()}", allow_module_level=True)


def tool_results(server) -> list[str]:
    return [m["content"] for m in server.chat_requests()[-1].body["messages"] if m["role"] == "tool"]


def answer(term: Term, question: str, reply: str) -> str:
    """Wait for `question` at the approval prompt, answer `reply`; what was shown before it."""
    before = term.expect(question)
    term.child.send(reply + "\r")
    return before


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
