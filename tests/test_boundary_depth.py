"""The boundary at every depth: a protected name (.git, .bantam.cfg, model.cfg, .mcp.json) that a
command creates anywhere in the workspace is removed after it, one that exists is read-only to
it however recently it appeared, a command shares no IPC, UTS or cgroup namespace with the host,
and list_files does not list bantam's own folders. Real bubblewrap, real git, real files;
nothing is mocked."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from bantam.approval import Approvals
from bantam.config import Config
from bantam.sandbox import unavailable
from bantam.tools import ToolContext, make_toolbox

if unavailable():
    pytest.skip(f"bubblewrap cannot run here: {unavailable()}", allow_module_level=True)

FSMONITOR = "touch pwned-by-fsmonitor"  # what the user's next `git status` would run


def tool(name: str, **args) -> str:
    """One call as the model makes it, through the real tool layer, with nobody to ask."""
    box = make_toolbox([name], ToolContext(Config(sandbox="workspace"), approvals=Approvals(None)))
    return box.execute(name, json.dumps(args)).content


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_protected_names_a_command_creates_are_removed_at_every_depth(home):
    """A workspace without .git (a fresh folder, or a subfolder of a repository): `git init .` and
    a core.fsmonitor would run outside the sandbox at the user's next `git status`, so the new
    .git goes, and so do new config files below the top. What was there before stays, moved
    along with its folder or not."""
    (home / "vendor" / "lib").mkdir(parents=True)
    git("init", "-q", "vendor/kept", cwd=home)  # the user's own nested repository
    out = tool("shell_exec", command=(
        f"git init -q . && git config core.fsmonitor '{FSMONITOR}' && mkdir -p sub/deep && "
        f"git init -q sub/deep && git -C sub/deep config core.fsmonitor '{FSMONITOR}' && "
        "echo sandbox=off > sub/.bantam.cfg && echo sandbox=off > sub/deep/model.cfg && "
        "echo '{}' > vendor/lib/.mcp.json && echo kept > sub/deep/file.txt && mv vendor/kept moved && echo done"))
    assert "done" in out and out.endswith("exit: 0"), out
    made = [home / ".git", home / "sub" / ".bantam.cfg", home / "sub" / "deep" / ".git",
            home / "sub" / "deep" / "model.cfg", home / "vendor" / "lib" / ".mcp.json"]
    for path in made:
        assert not os.path.lexists(path), path
        assert f"[sandbox: the command created {path}, which is protected at any depth (" in out, path
    assert "next git command there would run its hooks and configuration outside the sandbox" in out
    assert (home / "sub" / "deep" / "file.txt").read_text() == "kept\n"  # only the protected names go
    assert (home / "moved" / ".git" / "HEAD").is_file()  # the user's repository, moved, not made
    for folder in (home, home / "sub" / "deep"):
        git("status", cwd=folder)
        assert not (folder / "pwned-by-fsmonitor").exists()


def test_a_folder_put_in_the_place_of_one_with_a_git_loses_the_git_made_in_it(home):
    """The same path is not the same folder: `mv sub old && mkdir sub && git init sub` leaves a
    new sub/.git where the user's was; the new one goes, the user's (now old/.git) stays."""
    git("init", "-q", "sub", cwd=home)
    out = tool("shell_exec", command=f"mv sub old && mkdir sub && git init -q sub && "
                                     f"git -C sub config core.fsmonitor '{FSMONITOR}' && echo done")
    assert "done" in out, out
    assert not os.path.lexists(home / "sub" / ".git")
    assert f"[sandbox: the command created {home / 'sub' / '.git'}, which is protected" in out
    assert (home / "old" / ".git" / "HEAD").is_file()


def test_a_git_the_user_makes_between_commands_is_read_only_to_the_next_one(home):
    """Each command sees the protected names as they are when it starts, not as an earlier
    command's look found them."""
    assert tool("shell_exec", command="true").endswith("exit: 0")
    git("init", "-q", "later", cwd=home)
    config = (home / "later" / ".git" / "config").read_text()
    out = tool("shell_exec", command=f"git -C later config core.fsmonitor '{FSMONITOR}'; "
                                     "echo x > later/.git/hooks/pre-commit; echo done")
    assert "Read-only file system" in out, out
    assert (home / "later" / ".git" / "config").read_text() == config
    assert not (home / "later" / ".git" / "hooks" / "pre-commit").exists()
    assert "the command created" not in out  # the user's, so it stays


@pytest.mark.parametrize("network", [False, True])
def test_a_command_shares_no_ipc_uts_or_cgroup_namespace_with_the_host(home, network):
    """System V shared memory is reachable without a file or a socket: a segment the host made
    is invisible to a sandboxed command, with the network off or on."""
    made = subprocess.run(["ipcmk", "-M", "1024"], capture_output=True, text=True, check=True)
    shmid = re.search(r"(\d+)\s*$", made.stdout).group(1)
    try:
        row = next(line.split() for line in subprocess.run(["ipcs", "-m"], capture_output=True, text=True,
                                                            check=True).stdout.splitlines()
                   if line.split()[1:2] == [shmid])
        key = row[0]  # e.g. 0x5d1b2f3c: the host lists it
        kinds = [kind for kind in ("ipc", "uts", "cgroup") if os.path.exists(f"/proc/self/ns/{kind}")]
        box = make_toolbox(["shell_exec"], ToolContext(Config(sandbox="workspace", sandbox_network=network),
                                                       approvals=Approvals(None)))
        out = box.execute("shell_exec", json.dumps(
            {"command": "ipcs -m; " + " ".join(f"readlink /proc/self/ns/{kind};" for kind in kinds)})).content
        assert "Shared Memory Segments" in out and key not in out, out
        for kind in kinds:
            assert os.readlink(f"/proc/self/ns/{kind}") not in out, kind
    finally:
        subprocess.run(["ipcrm", "-m", shmid], check=False)


def test_list_files_does_not_list_bantams_own_folders(home):
    """read_file refuses bantam's own files; their names and sizes are not listed either, by any
    path that leads there (a link, the parent folder), but clipped tool output, which the model is
    pointed to, is."""
    user = Path(os.environ["HOME"])
    (user / ".bantam" / "sessions").mkdir(parents=True)
    (user / ".bantam" / "sessions" / "s1.json").write_text("{}\n")
    (user / ".bantam" / "tool-output").mkdir()
    (user / ".bantam" / "tool-output" / "out-1.txt").write_text("clipped\n")
    (user / ".config" / "bantam").mkdir(parents=True)
    (user / ".config" / "bantam" / "config").write_text("api_key=sk-x\n")
    (user / ".config" / "other").mkdir()
    (user / ".config" / "other" / "settings").write_text("x\n")
    (home / "state").symlink_to(user / ".bantam")
    for path in ("~/.bantam", "~/.bantam/sessions", "~/.config/bantam", "~/.config/bantam/config", "state"):
        out = tool("list_files", path=path)
        assert out.startswith(f"error: not listed: {path} leads into "), out
        assert "bantam's own files" in out and "s1.json" not in out and "config (" not in out, out
    assert tool("list_files", path="~/.config") == "other/settings (2 bytes)"
    assert tool("list_files", path="~/.bantam/tool-output") == "out-1.txt (8 bytes)"
