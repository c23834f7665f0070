"""The sandbox's read side (issue 28): bantam's own folders are hidden from commands, Unix sockets
are closed with the network off, and the folder of clipped tool output stays bounded. Real
bubblewrap, real sockets, real files; nothing is mocked.

HOME is moved out of /tmp here: the sandbox's /tmp is private, so a home under pytest's tmp_path
would be invisible to commands whatever bantam hides, and prove nothing."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from bantam import seccomp
from bantam.approval import Approvals
from bantam.config import Config
from bantam.errors import ToolError
from bantam.sandbox import Sandbox, unavailable
from bantam.tools import ToolContext, make_toolbox
from bantam.tools.shell import SPOOL_CAP, SPOOL_FOLDER_CAP, run_shell

if unavailable():
    pytest.skip(f"bubblewrap cannot run here: {unavailable()}", allow_module_level=True)

SECRET = "sk-secret-0123456789abcdefXYZ"


def shell(command: str, **values) -> str:
    """shell_exec as the model calls it, through the real tool layer and approvals."""
    box = make_toolbox(["shell_exec"], ToolContext(Config(**values), approvals=Approvals(None)))
    return box.execute("shell_exec", json.dumps({"command": command})).content


@pytest.fixture
def outside():
    """A directory outside /tmp (the sandbox's /tmp is its own) and outside every writable root."""
    path = Path(tempfile.mkdtemp(prefix="bantam-read-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def user(home, outside, monkeypatch):
    """A user whose home is outside /tmp, with a key in ~/.config/bantam/config, bantam's trust
    store in ~/.bantam, and a clipped output of an earlier command; the work folder is beside it."""
    user_home = outside / "home"
    (user_home / ".config" / "bantam").mkdir(parents=True)
    (user_home / ".config" / "bantam" / "config").write_text(f"api_key={SECRET}\n")
    (user_home / ".bantam" / "tool-output").mkdir(parents=True)
    (user_home / ".bantam" / "trust.json").write_text('{"projects": {}}\n')
    (user_home / ".bantam" / "tool-output" / "earlier.txt").write_text("earlier output\n")
    work = outside / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.chdir(work)
    return user_home


# --- bantam's own folders are hidden ----------------------------------------------------------

LOOK = ("cat ~/.config/bantam/config; base64 -w0 ~/.config/bantam/config; cat ~/.bantam/trust.json; "
        "echo; echo \"CONFIG:$(ls -A ~/.config/bantam | tr '\\n' ' ')\"; "
        "echo \"STATE:$(ls -A ~/.bantam | tr '\\n' ' ')\"; cat ~/.bantam/tool-output/earlier.txt")


def _shows_nothing_of_the_real_files(out: str) -> None:
    assert SECRET not in out and base64.b64encode(f"api_key={SECRET}\n".encode()).decode() not in out
    assert '"projects"' not in out
    assert "bantam/config: No such file" in out and "trust.json: No such file" in out, out
    assert "\nCONFIG:\n" in out and "\nSTATE:tool-output \n" in out, out  # empty but for tool-output


@pytest.mark.parametrize("mode", ["workspace", "read-only"])
def test_bantam_folders_are_empty_to_commands(user, mode):
    out = shell(LOOK, sandbox=mode)
    _shows_nothing_of_the_real_files(out)
    assert "earlier output" in out  # the clipped outputs stay readable: the model is given their paths


def test_bantam_folders_are_hidden_when_the_home_itself_is_the_workspace(user, monkeypatch):
    """The guarded dirs then lie inside the writable root: they are hidden, and read-only."""
    monkeypatch.chdir(user)
    out = shell(LOOK + f"; echo endpoint=http://evil >> {user}/.config/bantam/config; "
                "touch ~/.bantam/planted; echo fine > ok.txt", sandbox="workspace")
    _shows_nothing_of_the_real_files(out)
    assert "Read-only file system" in out
    assert (user / ".config" / "bantam" / "config").read_text() == f"api_key={SECRET}\n"
    assert not (user / ".bantam" / "planted").exists()
    assert (user / "ok.txt").read_text() == "fine\n"  # the rest of the root is still writable


def test_a_missing_bantam_config_folder_inside_the_workspace_cannot_be_created(user, monkeypatch):
    """With no ~/.config/bantam yet, a command in the home folder could otherwise create
    ~/.config/bantam/config for bantam's next start."""
    shutil.rmtree(user / ".config" / "bantam")
    monkeypatch.chdir(user)
    out = shell("mkdir -p ~/.config/bantam; echo sandbox=off > ~/.config/bantam/config", sandbox="workspace")
    assert "Read-only file system" in out
    assert not (user / ".config" / "bantam" / "config").exists()


def test_moved_bantam_folders_are_hidden_too(user, outside, monkeypatch):
    """$BANTAM_HOME and $XDG_CONFIG_HOME name the folders bantam uses: those are hidden."""
    (outside / "state").mkdir()
    (outside / "state" / "trust.json").write_text('{"projects": {}}\n')
    (outside / "xdg" / "bantam").mkdir(parents=True)
    (outside / "xdg" / "bantam" / "config").write_text(f"api_key={SECRET}\n")
    monkeypatch.setenv("BANTAM_HOME", str(outside / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(outside / "xdg"))
    out = shell(f"cat {outside}/xdg/bantam/config {outside}/state/trust.json; "
                f"echo \"STATE:$(ls -A {outside}/state)\"", sandbox="workspace")
    assert SECRET not in out and '"projects"' not in out
    assert "config: No such file" in out and "trust.json: No such file" in out and "\nSTATE:\n" in out


def test_a_clipped_output_can_be_read_in_the_next_command(user):
    first = shell("seq 1 50000", sandbox="workspace", tool_output_limit=1000)
    path = first.split("full output in ")[1].split(" ...]")[0]
    assert Path(path).parent == user / ".bantam" / "tool-output"
    second = shell(f"wc -l < {path}; tail -n 1 {path}", sandbox="workspace")
    assert second.startswith("50000\n50000\n"), second


def test_a_writable_root_inside_bantams_folder_is_refused(user):
    inside = user / ".bantam" / "agent"
    inside.mkdir()
    box = Sandbox("workspace", (inside,))
    with pytest.raises(ToolError, match="lies inside .*bantam's own folder"):
        box.wrap(["true"])


# --- Unix sockets -----------------------------------------------------------------------------

@pytest.fixture
def unix_servers(outside):
    """A stream and a datagram Unix socket outside the workspace, each bound and not blocking:
    whatever a command sent is waiting there once the command has returned."""
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream.bind(str(outside / "stream.sock"))
    stream.listen(8)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(str(outside / "dgram.sock"))
    for s in (stream, dgram):
        s.setblocking(False)
    yield outside / "stream.sock", outside / "dgram.sock", stream, dgram
    stream.close()
    dgram.close()


SEND = {  # three ways to reach a named socket: connect, sendto, sendto from a socketpair
    "connect": "s = socket.socket(socket.AF_UNIX); s.connect({stream!r}); s.sendall(b'id_rsa')",
    "sendto": "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'id_rsa', {dgram!r})",
    "socketpair": "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b'id_rsa', {dgram!r})",
}


def _received(stream: socket.socket, dgram: socket.socket) -> bytes:
    got = b""
    try:
        conn, _ = stream.accept()
        with conn:
            got += conn.recv(100)
    except BlockingIOError:
        pass
    try:
        got += dgram.recv(100)
    except BlockingIOError:
        pass
    return got


@pytest.mark.parametrize("how", SEND)
def test_unix_sockets_outside_are_closed_with_the_network_off(user, unix_servers, how):
    stream_path, dgram_path, stream, dgram = unix_servers
    script = "import socket; " + SEND[how].format(stream=str(stream_path), dgram=str(dgram_path))
    out = shell(f"{sys.executable} -c \"{script}\"", sandbox="workspace")
    assert _received(stream, dgram) == b""
    assert "Operation not permitted" in out and out.endswith("exit: 1")
    assert ("[sandbox: with the network off (sandbox_network=off), sockets other than IPv4/IPv6 on the "
            "command's own loopback (Unix-domain, vsock, packet, ...) cannot be opened") in out


@pytest.mark.parametrize("how", SEND)
def test_unix_sockets_work_with_the_network_on(user, unix_servers, how):
    """The same commands reach the servers when the user turned the network on: the test above
    fails for the filter's reason, not its own."""
    stream_path, dgram_path, stream, dgram = unix_servers
    script = "import socket; " + SEND[how].format(stream=str(stream_path), dgram=str(dgram_path))
    out = shell(f"{sys.executable} -c \"{script}\"", sandbox="workspace", sandbox_network=True)
    assert out.endswith("exit: 0"), out
    assert _received(stream, dgram) == b"id_rsa"


def test_everyday_programs_still_work_under_the_filter(user):
    """The filter refuses AF_UNIX sockets, datagram socketpairs and io_uring; ordinary programs
    use none of those (stream socketpairs, which event loops use, stay allowed)."""
    commands = [
        "cd /tmp && git init -q repo && cd repo && echo x > f && git add f && git -c user.name=a -c user.email=a@b "
        "commit -qm one && git status --short && git log --oneline | wc -l",
        f"{sys.executable} -c 'import subprocess; print(subprocess.run([\"true\"]).returncode)'",
        f"{sys.executable} -c 'import asyncio; asyncio.run(asyncio.sleep(0)); print(\"loop\")'",
        f"{sys.executable} -c 'import socket; a, b = socket.socketpair(); a.send(b\"p\"); print(b.recv(1))'",
        "ls / > /dev/null && grep -c root /etc/passwd && id -u && sort < /etc/hostname > /dev/null",
    ]
    out = shell(" && ".join(f"({c})" for c in commands) + " && echo ALL-OK", sandbox="workspace")
    assert out.endswith("ALL-OK\n\n\nexit: 0"), out
    assert "\nloop\n" in out and "b'p'" in out


def test_the_filter_is_built_for_both_known_architectures():
    for machine in ("x86_64", "aarch64"):
        code = seccomp.program(machine)
        assert code is not None and len(code) % 8 == 0 and len(code) // 8 < 256
    assert seccomp.program("riscv64") is None  # unknown: no filter, and describe() says so


# --- the folder of clipped outputs is bounded -------------------------------------------------

def test_clipped_outputs_stay_within_the_folder_cap(home):
    folder = Path.home() / ".bantam" / "tool-output"
    folder.mkdir(parents=True)
    folder.chmod(0o755)  # as an older bantam or a person may have left it
    old = []
    for i in range(20):  # 80 MiB of earlier outputs, sparse: the sizes count, not the blocks
        path = folder / f"shell-old-{i:02}.txt"
        with open(path, "wb") as f:
            f.truncate(SPOOL_CAP)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
        old.append(path)
    paths = []
    for _ in range(3):
        r = run_shell("head -c 20000000 /dev/zero | tr '\\0' a", 60, 30_000)
        assert r.exit_code == 0
        paths.append(Path(re.search(r" in (/\S+) \.\.\.\]", r.output)[1]))  # the result names the file
    sizes = {p: p.stat().st_size for p in folder.iterdir()}
    assert sum(sizes.values()) <= SPOOL_FOLDER_CAP
    assert all(p in sizes and sizes[p] == SPOOL_CAP for p in paths)  # the newest are kept, whole
    assert not old[0].exists() and old[-1].exists()  # the oldest went first
    assert paths[-1].read_bytes()[:10] == b"a" * 10
    assert stat.S_IMODE(paths[-1].stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_the_users_tools_dir_under_bantams_folder_stays_runnable(user):
    """bantam_tools_dir is announced to the model to run: shown again, read-only, when it lies in
    a hidden folder."""
    tools = user / ".bantam" / "tools"
    tools.mkdir()
    (tools / "hello").write_text("#!/bin/sh\necho hello from the tools dir\n")
    (tools / "hello").chmod(0o755)
    out = shell("~/.bantam/tools/hello; ls -A ~/.bantam | tr '\\n' ' '", sandbox="workspace",
                bantam_tools_dir=str(tools))
    assert out.startswith("hello from the tools dir\ntool-output tools \n"), out


def test_in_process_read_tools_refuse_bantams_own_folders(tmp_path, monkeypatch):
    """read_file, read_image and read_pdf run in bantam's own process, outside bubblewrap: they
    refuse bantam's folders (the user's config holds the key), by path and through a link, in
    every sandbox mode, while clipped tool output stays readable."""
    from bantam import config as bantam_config
    from bantam.tools import ToolContext, make_toolbox
    home = tmp_path / "home"
    (home / ".config" / "bantam").mkdir(parents=True)
    (home / ".config" / "bantam" / "config").write_text("api_key=sk-user-0123456789\n")
    (home / ".bantam" / "tool-output").mkdir(parents=True)
    (home / ".bantam" / "tool-output" / "out-1.txt").write_text("clipped output\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(home / ".config" / "bantam" / "config")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("BANTAM_HOME", raising=False)
    monkeypatch.chdir(work)
    for mode in ("off", "workspace"):
        cfg = bantam_config.Config(sandbox=mode, tools=("read_file", "read_image", "read_pdf"))
        box = make_toolbox(cfg.tools, ToolContext(cfg, None, "", lambda e: None))
        for name in ("read_file", "read_image", "read_pdf"):
            for path in ("~/.config/bantam/config", "link", str(home / ".bantam" / "trust.json")):
                out = box.execute(name, json.dumps({"path": path}))
                assert out.is_error and "not read:" in out.content and "sk-user" not in out.content, (name, path)
        kept = box.execute("read_file", json.dumps({"path": str(home / ".bantam" / "tool-output" / "out-1.txt")}))
        assert "clipped output" in kept.content


def test_a_nested_repositorys_git_and_config_files_are_read_only_to_commands(user):
    """Protected names at every depth: a vendored repository's hooks and config (run by the user's
    next `git` there) and a nested project's config stay read-only, as the top-level ones do."""
    import subprocess
    work = Path.cwd()
    subprocess.run(["git", "init", "-q", "vendor/lib"], cwd=work, check=True)
    (work / "vendor" / "lib" / ".bantam.cfg").write_text("model=m\n")
    hooks = work / "vendor" / "lib" / ".git" / "hooks"
    out = shell("echo 'touch pwned' > vendor/lib/.git/hooks/pre-commit; "
                "git -C vendor/lib config core.fsmonitor 'touch pwned'; "
                "echo sandbox=off >> vendor/lib/.bantam.cfg; echo ok > vendor/lib/file.txt; echo done",
                sandbox="workspace")
    assert "done" in out, out
    assert not (hooks / "pre-commit").exists()
    assert "fsmonitor" not in (work / "vendor" / "lib" / ".git" / "config").read_text()
    assert (work / "vendor" / "lib" / ".bantam.cfg").read_text() == "model=m\n"
    assert (work / "vendor" / "lib" / "file.txt").read_text() == "ok\n"  # the rest stays writable


def test_a_fixed_command_names_a_file_under_tmp_and_it_is_there(tmp_path):
    """A controlled run's check (`{config_dir}/verify.py`) in a clone under /tmp: the private /tmp
    of the sandbox would hide it. The folders of absolute paths a fixed argv names are visible again,
    read-only; a shell command's text names nothing, so nothing the model writes is widened."""
    import subprocess
    checks = Path(tempfile.mkdtemp(prefix="bantam-checks-", dir="/tmp"))
    try:
        (checks / "verify.py").write_text("print('verified')\n")
        box = Sandbox("workspace", (tmp_path.resolve(),), network=True)  # (no seccomp fd to hand over)
        argv = box.wrap([sys.executable, str(checks / "verify.py")])
        box.release()
        ran = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert ran.stdout == "verified\n", ran.stderr
        write = box.wrap(["/bin/sh", "-c", f"echo x > {checks}/new.txt"])
        box.release()
        assert subprocess.run(write, capture_output=True, timeout=60).returncode != 0
        assert not (checks / "new.txt").exists()  # visible, not writable
    finally:
        shutil.rmtree(checks, ignore_errors=True)
