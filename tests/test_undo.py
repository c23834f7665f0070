"""Undo (issue 31): a real `bantam --thread T -p ...` turn, where the fake model creates, edits,
renames, deletes, chmods and symlinks files through write_file, edit_file and shell_exec; then a
real `bantam undo --thread T` restores every byte and mode, in git repositories (whose git state
stays exactly as it was) and plain folders; files edited by hand are not lost; SIGKILL during an
undo leaves no half state."""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path

from bantam.undo import UndoGuard, plan, undoable
from bantam.undo.store import MAX_FILE_BYTES, Store
from bantam.undo.turns import changes
from bantam.tools import Outcome
from tests.conftest import base_cfg, run_bantam, wait_for, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply

TOOLS = "shell_exec,write_file,edit_file,read_file"
GIT = {"GIT_OPTIONAL_LOCKS": "0", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def state(folder: Path) -> dict[str, tuple]:
    """Every path below `folder` but .git: (kind, all permission bits, bytes or link target)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = os.lstat(path)
            rel = str(path.relative_to(folder))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                found[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return found


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True,
                          env={**os.environ, **GIT}).stdout


def git_state(folder: Path) -> dict[str, str]:
    """What a user sees of git, and every byte under .git."""
    dot_git = {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted((folder / ".git").rglob("*")) if p.is_file()}
    return {"files": json.dumps(dot_git), "status": git(folder, "status", "--porcelain", "--ignored"),
            "stash": git(folder, "stash", "list"), "log": git(folder, "log", "--all", "--format=%H %s"),
            "head": git(folder, "rev-parse", "HEAD"), "index": git(folder, "ls-files", "-s"),
            "reflog": git(folder, "reflog", "HEAD"), "refs": git(folder, "for-each-ref")}


def a_repository(work: Path) -> None:
    """A repository with history, a stash, a staged change, untracked and ignored files."""
    git(work, "init", "-q")
    (work / "a.txt").write_text("alpha\nbeta\n")
    (work / "b.txt").write_text("bee\n")
    (work / "gone.txt").write_bytes(b"\x00binary\xffbytes\r\n")
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(work / "run.sh", 0o750)
    (work / "old").mkdir()
    (work / ".gitignore").write_text("*.log\n.bantam.cfg\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "first")
    (work / "a.txt").write_text("alpha\nbeta\ngamma\n")
    git(work, "stash", "-q")
    (work / "b.txt").write_text("bee staged\n")
    git(work, "add", "b.txt")
    (work / "notes.md").write_text("untracked\r\nwith CRLF\r\n")
    (work / "debug.log").write_text("ignored\n")


def one_turn(server, work: Path, calls: list[tuple[str, dict]], thread: str = "T") -> None:
    for i, (name, args) in enumerate(calls):
        server.add(tool_reply(name, args, call_id=f"call_{i}"))
    server.add(text_reply("done"))
    r = run_bantam("--thread", thread, "-p", "change the files", cwd=work)
    assert r.returncode == 0, r.stderr


EVERY_KIND = [
    ("write_file", {"path": "new/made.txt", "content": "made by the model\n"}),
    ("edit_file", {"path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
    ("shell_exec", {"command": "mv b.txt c.txt && rm gone.txt && chmod 604 run.sh && chmod 700 old "
                               "&& ln -s a.txt link && ln -sfn c.txt notes.md && mkdir -p empty/inner "
                               "&& printf 'x' > debug.log"}),
]


def test_a_turn_is_undone_byte_for_byte_and_git_never_notices(home, server):
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never"))
    a_repository(home)
    before, git_before = state(home), git_state(home)
    one_turn(server, home, EVERY_KIND)
    changed = state(home)
    assert changed["c.txt"][2] == b"bee staged\n" and changed["link"] == ("link", "a.txt")
    assert changed["a.txt"][2] == b"alpha\nBETA\n" and "gone.txt" not in changed
    listed = run_bantam("undo", "--list", "--thread", "T", cwd=home)
    assert " 1  turn 1" in listed.stdout, listed.stdout
    r = run_bantam("undo", "--thread", "T", "--yes", cwd=home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "remove        new/made.txt" in r.stdout and "recreate      gone.txt" in r.stdout
    assert "debug.log: ignored" in r.stdout  # said, not pretended
    after = state(home)
    after.pop("debug.log"), before.pop("debug.log")  # ignored by git: not recorded, and so reported
    assert after == before
    assert git_state(home) == git_before
    assert run_bantam("undo", "--list", "--thread", "T", cwd=home).stdout.startswith("nothing to undo")


def test_two_turns_in_a_plain_folder_and_what_cannot_be_undone(home, server):
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never"))
    (home / "a.txt").write_text("alpha\nbeta\n")
    (home / "b.txt").write_text("bee\n")
    (home / "gone.txt").write_bytes(b"\x00\xff")
    (home / "run.sh").write_text("echo\n")
    os.chmod(home / "run.sh", 0o4711)  # every bit comes back, setuid included
    (home / "old").mkdir()
    (home / "debug.log").write_text("kept\n")
    (home / "notes.md").write_text("n\n")
    (home / "huge.bin").write_bytes(b"h" * (MAX_FILE_BYTES + 1))
    before = state(home)
    one_turn(server, home, EVERY_KIND)
    one_turn(server, home, [("shell_exec", {"command": "echo more >> a.txt && rm -r empty && echo x >> huge.bin && echo T=1 > .env.local && "
                                                       f"mkdir -p out && head -c {MAX_FILE_BYTES + 1} /dev/zero > out/big.bin"})])
    assert len(run_bantam("undo", "--list", "--thread", "T", cwd=home).stdout.splitlines()) == 2
    r = run_bantam("undo", "2", "--thread", "T", cwd=home)  # no terminal: acts, nothing conflicts
    assert r.returncode == 0, r.stdout + r.stderr
    assert "remove        out/big.bin" in r.stdout  # created by the turn: removing needs no copy of it
    assert "remove        .env.local" in r.stdout  # nor a file whose content is never kept (keys)
    assert "huge.bin: larger than 10 MB" in r.stdout  # its earlier content was not kept: said, not pretended
    after = state(home)
    assert after.pop("huge.bin")[2] == b"h" * (MAX_FILE_BYTES + 1) + b"x\n"
    before.pop("huge.bin")
    assert after == before


def test_files_edited_by_hand_since_the_turn_are_skipped_and_the_rest_undone(home, server):
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never"))
    (home / "a.txt").write_text("alpha\nbeta\n")
    (home / "b.txt").write_text("bee\n")
    one_turn(server, home, [("edit_file", {"path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
                            ("write_file", {"path": "b.txt", "content": "model's\n"}),
                            ("write_file", {"path": "new.txt", "content": "new\n"})])
    (home / "a.txt").write_text("my own edit\n")
    (home / "new.txt").write_text("mine now\n")
    r = run_bantam("undo", "--thread", "T", "--yes", cwd=home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"bantam undo: skipped {p}: changed since the turn (--force overwrites it)"
                                     for p in ("a.txt", "new.txt")]
    assert (home / "a.txt").read_text() == "my own edit\n" and (home / "new.txt").read_text() == "mine now\n"
    assert (home / "b.txt").read_text() == "bee\n"  # the file nobody touched is undone
    one_turn(server, home, [("write_file", {"path": "a.txt", "content": "the model's again\n"})])
    (home / "a.txt").write_text("edited again\n")
    r = run_bantam("undo", "--thread", "T", "--force", cwd=home)
    assert r.returncode == 0, r.stderr
    assert (home / "a.txt").read_text() == "my own edit\n" and "skipped" not in r.stderr
    kept = Store(home.parent / "home" / ".bantam" / "undo").blob_path(hashlib.sha256(b"edited again\n").hexdigest())
    assert kept.exists()  # the overwritten hand edit stays in the store


def test_redo_reapplies_the_turn_undone_last_while_nothing_changed_since(home, server):
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never"))
    (home / "c.txt").write_text("sea\n")
    one_turn(server, home, [("write_file", {"path": "a.txt", "content": "one\n"})])
    after_first = state(home)
    one_turn(server, home, [("shell_exec", {"command": "echo two > a.txt && echo bee > b.txt && rm c.txt && chmod 600 a.txt"})])
    after_second = state(home)
    assert run_bantam("undo", "--thread", "T", "--yes", cwd=home).returncode == 0
    assert state(home) == after_first
    r = run_bantam("undo", "--redo", "--thread", "T", cwd=home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("redo turn 2 of thread-T") and state(home) == after_second
    assert "1  turn 2" in run_bantam("undo", "--list", "--thread", "T", cwd=home).stdout  # undoable again
    assert run_bantam("undo", "2", "--thread", "T", "--yes", cwd=home).returncode == 0
    (home / "b.txt").write_text("mine\n")  # made by hand where the turn made it: redo would overwrite it
    r = run_bantam("undo", "--redo", "2", "--thread", "T", cwd=home)
    assert r.returncode == 1 and "changed since the undo" in r.stderr and "b.txt" in r.stderr
    assert (home / "b.txt").read_text() == "mine\n" and not (home / "a.txt").exists()  # nothing was done
    r = run_bantam("undo", "--redo", "2", "--thread", "T", "--force", cwd=home)
    assert r.returncode == 0, r.stderr
    assert state(home) == after_second
    assert run_bantam("undo", "--thread", "T", "--yes", cwd=home).returncode == 0
    one_turn(server, home, [("write_file", {"path": "d.txt", "content": "new work\n"})])
    r = run_bantam("undo", "--redo", "--thread", "T", cwd=home)  # a turn since the undo: nothing to redo
    assert r.returncode == 0 and "nothing to redo" in r.stderr and (home / "d.txt").exists()


def test_a_plain_prompt_records_nothing_and_read_only_turns_take_no_snapshot(home, server):
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never"))
    server.add(tool_reply("write_file", {"path": "x.txt", "content": "x"}), text_reply("done"))
    assert run_bantam("-p", "write", cwd=home).returncode == 0
    (home / "y.txt").write_text("y\n")
    one_turn(server, home, [("read_file", {"path": "y.txt"})])
    assert run_bantam("undo", "--list", cwd=home).stdout.startswith("nothing to undo")
    assert run_bantam("undo", "--list", "--thread", "T", cwd=home).stdout.startswith("nothing to undo")
    assert not (home.parent / "home" / ".bantam" / "undo" / "folders").exists()


def guarded_turn(store: Store, folder: Path, key: str, change, keep: int = 50) -> None:
    """One turn as the loop drives the guard: a request, one call that changes files, its outcome."""
    guard = UndoGuard(key, folder, keep, store=store)
    guard.before_request([{"role": "user", "content": "go"}])
    guard.before_call("shell_exec", "{}")
    change()
    guard.after_call("shell_exec", "{}", Outcome("ok"))


def test_turns_are_pruned_with_their_contents(home, tmp_path):
    store = Store(tmp_path / "store")
    for n in range(4):
        guarded_turn(store, home, "thread-p", lambda n=n: (home / f"f{n}").write_text(f"version {n}" * 100), keep=2)
    assert [r["seq"] for r in undoable("thread-p", store)] == [4, 3]
    guarded_turn(store, home, "thread-p", lambda: (home / "f0").unlink(), keep=2)
    p = plan("thread-p", 1, store)
    assert [a.path for a in p.actions] == ["f0"] and p.cut == 0
    blobs = [b for b in (store.path / "objects").rglob("*") if b.is_file()]
    assert len(blobs) == 4  # the folder's four files; nothing of the pruned turns is left behind


def test_the_watch_records_what_a_full_scan_would(home, tmp_path):
    """After each call only what the watch saw touched is described again: new folders and what
    git ignores in them, modes, links, a removed tree, an ignored file; a folder moved away is
    where it cannot be exact, so from then on the whole folder is scanned."""
    git(home, "init", "-q")
    (home / ".gitignore").write_text("*.log\nbuild/\n")
    for path in ("a.txt", "d/b.txt", "old/deep/x.txt", "keep.log"):
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(path)
    calls = [lambda: (home / "a.txt").write_text("changed"),
             lambda: subprocess.run("mkdir -p new/sub build && echo c > new/sub/c.txt && echo n > new/sub/n.log "
                                    "&& echo o > build/o.o", shell=True, cwd=home, check=True),
             lambda: subprocess.run("chmod 600 d/b.txt && ln -s a.txt link && rm -r old && echo more >> keep.log",
                                    shell=True, cwd=home, check=True),
             lambda: (home / "d").rename(home / "e")]
    store = Store(tmp_path / "store")
    guard = UndoGuard("thread-w", home, store=store)
    guard.before_request([{"role": "user", "content": "go"}])
    for n, call in enumerate(calls):
        guard.before_call("shell_exec", "{}")
        call()
        guard.after_call("shell_exec", "{}", Outcome("ok"))
        assert (guard.watch is not None) == (n < 3), n
        assert guard.record is not None and guard.before is not None
        assert guard.record["changes"] == changes(guard.before, Store(tmp_path / f"scan{n}").scan(home)), n
    assert {"new/sub/c.txt", "a.txt", "link", "old/deep/x.txt", "e/b.txt"} <= set(guard.record["changes"])
    assert guard.record["changes"]["new/sub/n.log"][1][0] == guard.record["changes"]["build"][1][0] == "i"  # ignored


# --- crash safety ---------------------------------------------------------------------------------

FILES = 400


def env_for(work: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(work.parent / "home"), "NO_COLOR": "1"}


def test_sigkill_at_random_points_of_an_undo_leaves_no_half_state(home, server):
    """Each trial: a turn rewrites, deletes and creates many files; `bantam undo` is killed at a
    random moment (half the time once its journal is on disk); then `bantam undo --list`, the next
    command that touches the store, finds the workspace either as before the undo (the turn still
    listed) or as after it (the turn gone), never between, and no temporary file behind."""
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never"))
    for i in range(FILES):
        (home / f"f{i:03d}").write_text(f"original {i}\n")
    original = state(home)
    journal = home.parent / "home" / ".bantam" / "undo" / "journal.json"
    rng = random.Random(31)
    outcomes = []
    for trial in range(6):
        one_turn(server, home, [("shell_exec", {"command": f"for f in f*; do echo t{trial} >> $f; done; "
                                                           f"rm f00*; mkdir -p d{trial}; touch d{trial}/x n{trial}"})])
        changed = state(home)
        undo = subprocess.Popen([sys.executable, "-m", "bantam", "undo", "--thread", "T", "--yes"], cwd=home,
                                env=env_for(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if trial % 2:
            wait_for(lambda: journal.exists() or undo.poll() is not None, "the undo's journal")
        time.sleep(rng.uniform(0, 0.3 if trial % 2 else 1.5))
        undo.send_signal(signal.SIGKILL)
        undo.wait()
        interrupted = journal.exists()  # killed in the middle: the next command completes it
        listed = run_bantam("undo", "--list", "--thread", "T", cwd=home).stdout
        now = state(home)
        assert now in (original, changed), f"trial {trial}: half undone"
        assert not [p for p in now if p.endswith(".undo")] and not journal.exists()
        assert ("nothing to undo" in listed) == (now == original), listed
        outcomes.append("completed after the kill" if interrupted else "undone" if now == original else "not begun")
        if now == changed:
            assert run_bantam("undo", "--thread", "T", "--yes", cwd=home).returncode == 0
        assert state(home) == original
    assert "completed after the kill" in outcomes, outcomes  # the kills did land in the middle


def test_a_turn_cut_by_sigkill_mid_command_can_be_undone(home, server):
    """The record is on disk before the command runs: what the command did before bantam was
    killed is found by the next bantam that uses the store, and undone."""
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never"))
    (home / "a.txt").write_text("alpha\n")
    before = state(home)
    server.add(tool_reply("shell_exec", {"command": "echo made > made.txt && echo more >> a.txt && mkdir d && "
                                                    "touch d/started && sleep 120"}), text_reply("never sent"))
    agent = subprocess.Popen([sys.executable, "-m", "bantam", "--thread", "T", "-p", "go"], cwd=home,
                             env=env_for(home), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    wait_for(lambda: (home / "d" / "started").exists(), "the command to begin")
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    listed = run_bantam("undo", "--list", "--thread", "T", cwd=home)
    assert " 1  turn 1" in listed.stdout and "4 change(s)" in listed.stdout, listed.stdout + listed.stderr
    r = run_bantam("undo", "--thread", "T", "--yes", cwd=home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert state(home) == before
    assert not list((home.parent / "home" / ".bantam" / "undo" / "turns").glob("*/*.base.json"))


def test_a_cut_turn_whose_folder_is_gone_keeps_what_its_finished_calls_found(home, tmp_path):
    store, work = Store(tmp_path / "store"), home / "w"
    work.mkdir()
    guard = UndoGuard("thread-c", work, store=store)
    guard.before_request([{"role": "user", "content": "go"}])
    guard.before_call("shell_exec", "{}")
    (work / "a").write_text("a")
    guard.after_call("shell_exec", "{}", Outcome("ok"))
    guard.before_call("shell_exec", "{}")  # the second call is cut: no after_call comes
    (work / "b").write_text("b")
    assert guard.hold is not None
    guard.hold.close()  # as when its process dies: the turn's lock goes with it
    shutil.rmtree(work)
    [record] = undoable("thread-c", store)
    assert list(record["changes"]) == ["a"] and not record["running"]


def test_bantams_own_store_inside_the_workspace_is_never_recorded(home, monkeypatch):
    monkeypatch.setenv("BANTAM_HOME", str(home / "state" / ".bantam"))
    store = Store()
    guarded_turn(store, home, "thread-s", lambda: (home / "x").write_text("x"))
    guarded_turn(store, home, "thread-s", lambda: (home / "y").write_text("y"))
    assert [list(r["changes"]) for r in undoable("thread-s", store)] == [["y"], ["x"]]


def test_files_that_hold_keys_never_reach_the_undo_store(home, server):
    """The snapshot before a turn copies the workspace into ~/.bantam/undo. A project's .bantam.cfg
    and model.cfg may carry an api_key, a .env its tokens, and any file may hold the key bantam was
    given: none of their bytes is stored, and an undo says it cannot restore them."""
    key, other, token = "sk-undo-key-0123456789abcdef", "sk-model-cfg-9876543210fedcba", "tok-env-55aa55aa55aa"
    write_cfg(home, **base_cfg(server, tools=TOOLS, approval="never", api_key=key))
    (home / "model.cfg").write_text(f"model=m\napi_key={other}\n")
    (home / "sub").mkdir()
    (home / "sub" / "model.cfg").write_text(f"api_key={other}\n")
    (home / ".env").write_text(f"TOKEN={token}\n")
    (home / "settings.yaml").write_text(f"provider:\n  key: {key}\n")
    (home / "plain.txt").write_text("plain\n")
    one_turn(server, home, [("shell_exec", {"command": "echo made > new.txt && echo MORE=1 >> .env && "
                                                       "echo '# edited' >> settings.yaml && echo more >> plain.txt"})])
    objects = home.parent / "home" / ".bantam" / "undo" / "objects"
    stored = [zlib.decompress(p.read_bytes()) for p in objects.rglob("*") if p.is_file()]
    assert b"plain\n" in stored  # the snapshot was taken
    for secret in (key, other, token):
        assert not [data for data in stored if secret.encode() in data], secret
    r = run_bantam("undo", "--thread", "T", "--yes", cwd=home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cannot undo   .env: it may hold keys" in r.stdout and "cannot undo   settings.yaml: it may hold keys" in r.stdout
    assert (home / "plain.txt").read_text() == "plain\n" and not (home / "new.txt").exists()
