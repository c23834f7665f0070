"""One write path for every file change the model asks for (fsutil.Boundary.write): write_file and
edit_file, in the core and in the daemon, check and write the same object. Real files, real
symbolic links, a real race; the tools are driven through the real Toolbox. Nothing is mocked."""
from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path

import pytest

from bantam.approval import Approvals, Request, Verdict
from bantam.config import Config
from bantam.errors import ToolError
from bantam.sandbox import PROTECTED_NAMES, Sandbox, guarded_dirs
from bantam.tools import ToolContext, make_toolbox
from tests.daemon.test_daemon import model  # noqa: F401  (the daemon agent's fake model server)
from tests.daemon.test_daemon_tools import agent, call  # noqa: F401

RC = "export PATH=$HOME/bin:$PATH\n"


def toolbox(asked: list | None = None, **values):
    """The core file tools as the agent gets them; `asked` collects the questions a person would
    see (answered no), without it there is no one to ask."""
    def ask(request: Request) -> Verdict:
        assert asked is not None
        asked.append(request)
        return Verdict(False, "not that")
    approvals = Approvals(ask if asked is not None else None)
    ctx = ToolContext(Config().with_values(**values), approvals=approvals)
    return make_toolbox(("write_file", "edit_file", "read_file"), ctx)


def edit(box, path: str, old: str, new: str):
    return box.execute("edit_file", json.dumps({"path": path, "old_string": old, "new_string": new}))


def write(box, path: str, content: str, **extra):
    return box.execute("write_file", json.dumps({"path": path, "content": content, **extra}))


@pytest.fixture
def bashrc(home) -> Path:
    rc = Path(os.environ["HOME"]) / ".bashrc"  # the test's HOME, beside (not under) the workspace
    rc.write_text(RC)
    return rc


# --- (a) edit_file asks the same question write_file does --------------------------------------

@pytest.mark.parametrize("values", [dict(sandbox="workspace"), dict(sandbox="read-only", approval="always"),
                                    dict(sandbox="workspace", approval="never")])
def test_edit_file_through_a_link_out_of_the_workspace_is_refused(home, bashrc, values):
    (home / "rc").symlink_to(bashrc)
    box = toolbox(**values)
    for path in ("rc", str(bashrc), "~/.bashrc"):
        out = edit(box, path, "PATH=", "PATH=/evil:")
        assert out.is_error and "not written" in out.content, (path, out.content)
        assert "is outside the writable roots" in out.content, out.content
    assert bashrc.read_text() == RC
    assert (home / "rc").is_symlink()


def test_edit_file_outside_asks_a_person_and_a_no_is_kept(home, bashrc):
    asked: list = []
    box = toolbox(asked, sandbox="workspace")
    out = edit(box, "~/.bashrc", "PATH=", "PATH=/evil:")
    assert out.content == "error: not written: the user declined: not that"
    assert [(r.action, r.text, r.prefix) for r in asked] == [("write", "~/.bashrc", str(bashrc.parent))]
    assert asked[0].why.startswith("write outside the sandbox: ~/.bashrc is outside the writable roots")
    assert bashrc.read_text() == RC


def test_a_link_from_one_place_in_the_workspace_to_another_still_works(home):
    (home / "real").mkdir()
    (home / "real" / "notes.txt").write_text("one two\n")
    (home / "alias").symlink_to("real")
    (home / "n.txt").symlink_to("real/notes.txt")
    box = toolbox(sandbox="workspace")
    assert edit(box, "alias/notes.txt", "one", "1").content == "replaced 1 occurrence(s) in alias/notes.txt"
    assert edit(box, "n.txt", "two", "2").content == "replaced 1 occurrence(s) in n.txt"
    assert write(box, "alias/new.txt", "x").content == "wrote 1 bytes to alias/new.txt"
    assert (home / "real" / "notes.txt").read_text() == "1 2\n" and (home / "real" / "new.txt").read_text() == "x"
    assert (home / "n.txt").is_symlink()  # written through, the link itself stays


def test_bantams_own_config_is_out_of_reach_even_from_a_home_workspace(home, monkeypatch):
    user = Path(os.environ["HOME"])
    config = user / ".config" / "bantam" / "config"
    config.parent.mkdir(parents=True)
    config.write_text("endpoint=https://api.example\n")
    monkeypatch.chdir(user)  # the home folder itself is the workspace: ~/.bashrc is inside it
    box = toolbox(sandbox="workspace")
    out = edit(box, ".config/bantam/config", "api.example", "evil.example")
    assert out.is_error and "bantam's own files" in out.content
    assert config.read_text() == "endpoint=https://api.example\n"
    assert write(box, ".bashrc", "ok\n").content == "wrote 3 bytes to .bashrc"  # inside: allowed


def test_a_home_folder_workspace_is_said_once(home, capsys):
    user = Path(os.environ["HOME"])
    box = Sandbox.for_config(Config().with_values(sandbox="workspace"), user)
    assert "the writable root is your home folder itself" in box.describe()
    box.for_prompt("on-request", True)
    box.for_prompt("on-request", True)
    assert capsys.readouterr().err.count("your home folder itself") == 1  # once per process
    assert "home folder" not in Sandbox.for_config(Config().with_values(sandbox="workspace"), home).describe()


# --- (b) the protected names, at every depth ---------------------------------------------------

NESTED = [".git/config", "sub/.git/hooks/pre-commit", "sub/.bantam.cfg", "a/b/.mcp.json", "x/y/model.cfg",
          "sub/.git"]


@pytest.mark.parametrize("path", NESTED)
def test_protected_names_are_refused_at_any_depth(home, path):
    (home / ".git").mkdir()
    (home / ".git" / "config").write_text("[core]\n")
    (home / "sub" / ".git" / "hooks").mkdir(parents=True)
    box = toolbox(sandbox="workspace")
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    out = write(box, path, "[core]\n\tfsmonitor = touch pwned\n")
    assert out.is_error and "is protected" in out.content, out.content
    if (home / path).is_file():
        out = edit(box, path, "[core]", "[core]\n\tfsmonitor = touch pwned")
        assert out.is_error and "is protected" in out.content, out.content
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before
    assert not (home / "a").exists() and not (home / "x").exists()  # no folder left behind either


def test_a_link_onto_a_protected_name_is_refused_too(home):
    (home / ".git").mkdir()
    (home / ".git" / "config").write_text("[core]\n")
    (home / "gitdir").symlink_to(".git")
    (home / "cfg").symlink_to("sub/.bantam.cfg")
    box = toolbox(sandbox="workspace")
    assert "is protected: .git" in edit(box, "gitdir/config", "[core]", "[core]\n\thooksPath=/x").content
    assert "is protected: .bantam.cfg" in write(box, "cfg", "sandbox=off\n").content
    assert (home / ".git" / "config").read_text() == "[core]\n" and not (home / "sub").exists()


def test_the_list_is_one_constant():
    assert set(PROTECTED_NAMES) >= {".git", ".bantam.cfg", "model.cfg", ".mcp.json"}
    boundary = Sandbox.for_config(Config().with_values(sandbox="workspace")).boundary()
    assert boundary.protected == frozenset(PROTECTED_NAMES)
    assert set(guarded_dirs()) <= set(boundary.guarded)


# --- (c) a link swapped in between the check and the write -------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2  # linux/fs.h: swap the two names in one step


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2), so `link` is always there: a folder or a link."""
    if _libc.renameat2(-100, bytes(a), -100, bytes(b), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def race(tmp_path: Path, write_one, attempts: int = 3000) -> tuple[int, int, list[str]]:
    """`write_one(path)` for ws/link/fNNN while another thread keeps swapping ws/link between a
    real folder inside ws and a link to a folder outside. Returns (written inside, refused,
    the names that landed outside)."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "link").mkdir()
    (ws / "other").symlink_to(outside)
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            exchange(ws / "link", ws / "other")

    swapper = threading.Thread(target=swap)
    swapper.start()
    refused = 0
    try:
        for n in range(attempts):
            try:
                write_one(ws / "link" / f"f{n:05}")
            except (ToolError, OSError):
                refused += 1
    finally:
        stop.set()
        swapper.join()
    real = ws / "link" if (ws / "link").is_dir() and not (ws / "link").is_symlink() else ws / "other"
    return len(list(real.iterdir())), refused, sorted(os.listdir(outside))


def test_a_swapped_link_never_leads_a_write_outside(tmp_path):
    if not hasattr(_libc, "renameat2"):
        pytest.skip("this C library has no renameat2 (glibc 2.28 or later has)")
    boundary = Sandbox("workspace", (tmp_path.resolve() / "ws",)).boundary()
    written, refused, landed = race(tmp_path.resolve(), lambda path: boundary.write(path, b"x"))
    assert landed == []
    assert written + refused == 3000 and written > 0 and refused > 0  # the race did happen, both ways



def test_a_write_an_always_lets_through_never_follows_a_swapped_link_out(home, tmp_path):
    """'Always in DIR' covers later writes below DIR; each is walked from DIR without following a
    link, so a link swapped in between the approval's check and the write cannot lead it out
    (it was written from the folder the check resolved, following whatever link stood there)."""
    if not hasattr(_libc, "renameat2"):
        pytest.skip("this C library has no renameat2 (glibc 2.28 or later has)")
    ws = tmp_path.resolve() / "ws"
    answers = [Verdict(True, remember=True)]

    def ask(request: Request) -> Verdict:
        return answers.pop() if answers else Verdict(False, "asked again")
    box = make_toolbox(("write_file",), ToolContext(Config().with_values(sandbox="workspace"),
                                                    approvals=Approvals(ask)))

    def write_one(path: Path) -> None:
        if not (ws / "first.txt").exists():  # the one answer: always in ws
            assert box.execute("write_file", json.dumps({"path": str(ws / "first.txt"), "content": "x"})).content \
                == f"wrote 1 bytes to {ws / 'first.txt'}"
        out = box.execute("write_file", json.dumps({"path": str(path), "content": "x"}))
        if out.is_error:
            raise ToolError(out.content)
    written, refused, landed = race(tmp_path.resolve(), write_one, attempts=1500)
    assert landed == []
    assert written > 0 and refused > 0  # the race did happen, both ways

# --- (d) the daemon's WRITE_FILE and EDIT_FILE: the same boundary, around the agent's home -------

def test_the_daemons_edit_file_stays_inside_its_boundary(agent, home, bashrc):  # noqa: F811
    (home / "rc").symlink_to(bashrc)
    out = call(agent, "EDIT_FILE", path="rc", old_string="PATH=", new_string="PATH=/evil:")
    assert out.startswith("error: not written: this needs a person's approval (write outside the sandbox: "), out
    # by its path: pytest's HOME lies under /tmp, which is the session's own /tmp for the model's
    # commands and file tools alike, where there is no .bashrc to edit
    out = call(agent, "EDIT_FILE", path=str(bashrc), old_string="PATH=", new_string="PATH=/evil:")
    assert out.startswith("error: "), out
    assert bashrc.read_text() == RC
    (home / "sub" / ".git").mkdir(parents=True)
    (home / "sub" / ".git" / "config").write_text("[core]\n")
    out = call(agent, "EDIT_FILE", path="sub/.git/config", old_string="[core]", new_string="[core]\n\tx=y")
    assert "is protected: .git" in out and (home / "sub" / ".git" / "config").read_text() == "[core]\n"
    out = call(agent, "WRITE_FILE", path="sub/.bantam.cfg", content="sandbox=off\n")
    assert "is protected: .bantam.cfg" in out and not (home / "sub" / ".bantam.cfg").exists()
    assert call(agent, "WRITE_FILE", path="notes.md", content="a b\n") == f"wrote 4 bytes to {home / 'notes.md'}"
    assert call(agent, "EDIT_FILE", path="notes.md", old_string="a", new_string="A") == \
        "replaced 1 occurrence(s) in notes.md"
