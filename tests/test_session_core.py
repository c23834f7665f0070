"""The workspace is a value (issue 29): sessions built by bantam.session carry their folder down
to the tools, the sandbox and the prompt, so two of them run side by side in one process and
neither sees the other's folder, nor moves the process's."""
import ast
import itertools
import json
import os
import re
import threading
from dataclasses import replace
from pathlib import Path

from bantam import session
from bantam.providers import Reply

SRC = Path(__file__).resolve().parent.parent / "src" / "bantam"


class Scripted:
    """An in-process model that answers with a fixed list of tool calls, then a final text, and
    keeps what it was sent. The first request waits at `barrier`, so both sessions are in flight
    at the same time."""

    def __init__(self, calls: list[tuple[str, dict]], barrier: threading.Barrier):
        self.model = "scripted"
        self.calls, self.barrier = calls, barrier
        self.seen: list[list[dict]] = []
        self.learned_window, self.prices, self.url = None, None, None

    def complete(self, messages, tools, on_event, options=None) -> Reply:
        if not self.seen:
            self.barrier.wait(timeout=60)
        self.seen.append([dict(m) for m in messages])
        step = len(self.seen) - 1
        if step < len(self.calls):
            name, args = self.calls[step]
            call = {"id": f"c{step}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            return Reply({"role": "assistant", "content": None, "tool_calls": [call]}, finish_reason="tool_calls")
        return Reply({"role": "assistant", "content": "done"}, finish_reason="stop")

    def list_models(self) -> list[str]:
        return [self.model]


def _project(folder: Path, name: str) -> None:
    folder.mkdir()
    (folder / "AGENTS.md").write_text(f"rule of project {name}\n")
    (folder / "input.txt").write_text(f"input of {name}\n")
    (folder / f"only-in-{name}").write_text("")


def test_two_sessions_with_different_folders_run_side_by_side_in_one_process(home, tmp_path):
    first, second = tmp_path / "alpha", tmp_path / "beta"
    _project(first, "alpha")
    _project(second, "beta")
    before = os.getcwd()
    barrier = threading.Barrier(2)
    results: dict[str, list[dict]] = {}
    errors: list[BaseException] = []

    def work(folder: Path, name: str) -> None:
        try:
            cfg = session.load_config({"tools": "shell_exec,write_file,read_file", "sandbox": "off"}, folder)
            model = Scripted([("shell_exec", {"command": "pwd; ls"}),
                              ("write_file", {"path": "out.txt", "content": f"written by {name}"}),
                              ("read_file", {"path": "input.txt"})], barrier)
            s = session.build(cfg, folder, provider=model)
            messages = s.messages([{"role": "user", "content": "go"}])
            s.run(messages)
            results[name] = model.seen[-1]
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(first, "alpha")),
               threading.Thread(target=work, args=(second, "beta"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert os.getcwd() == before  # nobody moved the process
    for folder, name, other in ((first, "alpha", "beta"), (second, "beta", "alpha")):
        seen = results[name]
        system = seen[0]["content"]
        assert f"rule of project {name}" in system and f"rule of project {other}" not in system
        shell, write, read = (m["content"] for m in seen if m["role"] == "tool")
        assert shell.splitlines()[0] == str(folder.resolve())
        assert f"only-in-{name}" in shell and f"only-in-{other}" not in shell
        assert (folder / "out.txt").read_text() == f"written by {name}"
        assert "out.txt" in write and not write.startswith("error")
        assert f"input of {name}" in read and other not in read
    assert not (Path(before) / "out.txt").exists()


def test_sandboxed_session_writes_relative_paths_in_its_own_folder(home, tmp_path, monkeypatch):
    """With the sandbox on, the writable root is the session's folder, not the process's: a
    relative write lands there, and the process's folder is outside the boundary."""
    import shutil
    import tempfile
    folder = tmp_path / "project"
    folder.mkdir()
    process = Path(tempfile.mkdtemp(prefix="bantam-process-", dir="/var/tmp"))  # not below /tmp: the session's own
    monkeypatch.chdir(process)
    cfg = session.load_config({"tools": "write_file", "sandbox": "workspace", "approval": "never"}, folder)
    s = session.build(cfg, folder, session.FrontEnd(with_model=False))
    ok = s.toolbox.execute("write_file", json.dumps({"path": "sub/new.txt", "content": "x"}))
    assert not ok.is_error, ok.content
    assert (folder / "sub" / "new.txt").read_text() == "x"
    refused = s.toolbox.execute("write_file", json.dumps({"path": str(process / "stray.txt"), "content": "x"}))
    assert refused.is_error and not (process / "stray.txt").exists()
    assert s.sandbox().roots == (folder.resolve(),)
    shutil.rmtree(process)


def test_a_session_folder_must_be_absolute(home):
    import pytest
    with pytest.raises(ValueError):
        session.absolute_folder("relative/folder")


# Front ends turn the user's folder into a session's folder; nothing else reads the process's folder.
FRONT_ENDS = {"cli.py", "oneshot.py", "repl.py", "web/__init__.py", "batch/__init__.py", "batch/agent.py", "batch/redisq.py", "mcpserve/cli.py", "undo/cli.py"}
# Known and owned elsewhere, to be removed from this list as that work lands (issue 29):
PENDING = {
    "providers/local.py": "known_commands reads Path.cwd(); the local.py split reads RequestOptions.folder",
}


def _sources() -> list[tuple[str, str]]:
    return [(p.relative_to(SRC).as_posix(), p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))]


# cli.main(cwd=...) runs one command line in a given folder in place of the process's (a test's
# in-process run) and puts the process's back after it; nothing else may change it.
STANDS_IN = {"cli.py"}


def test_nothing_in_bantam_changes_the_process_folder():
    found = [name for name, text in _sources() if re.search(r"\bos\.chdir\(|\bos\.fchdir\(", text)]
    assert set(found) <= set(PENDING) | STANDS_IN, found


def test_only_front_ends_read_the_process_folder():
    found = [name for name, text in _sources() if re.search(r"Path\.cwd\(\)|os\.getcwd\(\)", text)]
    assert set(found) <= FRONT_ENDS | set(PENDING), sorted(set(found) - FRONT_ENDS - set(PENDING))


def test_a_new_configuration_makes_a_new_session_built_the_same_way(home, tmp_path):
    """with_config: a changed setting is a new session (the old one is left as it was), built as
    the front end built the first (its approvals, event sink, undo key), with a provider for the
    new settings and the same /tmp, so a file a command left there is still found."""
    from bantam.approval import Approvals
    folder = tmp_path / "project"
    folder.mkdir()
    approvals, seen = Approvals(), []
    first_cfg = session.load_config({"tools": "shell_exec", "sandbox": "workspace", "approval": "never", "model": "one",
                                     "endpoint": "http://127.0.0.1:9/v1"}, folder)
    front = session.FrontEnd(on_event=seen.append, approvals=approvals, undo="key", with_mcp=False)
    first = session.build(first_cfg, folder, front)
    wrote = first.toolbox.execute("shell_exec", json.dumps({"command": "echo kept > /tmp/x.txt"})).content
    assert wrote.endswith("exit: 0"), wrote
    assert (first.toolbox.ctx.tmp / "x.txt").read_text() == "kept\n"  # the session's /tmp, not the host's
    second_cfg = session.load_config({"tools": "shell_exec,read_file", "sandbox": "workspace", "approval": "never", "model": "two",
                                      "endpoint": "http://127.0.0.1:9/v1"}, folder)
    second = first.with_config(second_cfg)
    assert second is not first and first.cfg is first_cfg and list(first.toolbox.tools) == ["shell_exec"]
    assert list(second.toolbox.tools) == ["shell_exec", "read_file"]
    assert second.provider is not None and second.provider.model == "two" and first.provider.model == "one"
    assert second.approvals is approvals and second.toolbox.ctx.on_event == seen.append and second.front == front
    assert second.folder == first.folder and second.toolbox.ctx.tmp == first.toolbox.ctx.tmp
    assert "kept" in second.toolbox.execute("shell_exec", json.dumps({"command": "cat /tmp/x.txt"})).content
    third = second.with_config(second_cfg, undo="other")  # a change to the front end's value, the rest kept
    assert third.front == replace(front, undo="other") and second.front.undo == "key"
    assert third.approvals is approvals and third.toolbox.ctx.tmp == first.toolbox.ctx.tmp


def test_the_builder_takes_a_configuration_a_folder_and_what_the_front_end_adds(home, tmp_path):
    """Whatever a front end brings is one FrontEnd value (a model already made stays apart: it
    belongs to the configuration); the default is a session no one watches or is asked in."""
    import inspect
    assert list(inspect.signature(session.build).parameters) == ["cfg", "folder", "front", "provider"]
    folder = tmp_path / "project"
    folder.mkdir()
    s = session.build(session.load_config({"sandbox": "off"}, folder), folder, provider=Scripted([], threading.Barrier(1)))
    assert s.front == session.FrontEnd(approvals=s.approvals) and s.approvals.ask is None
    assert s.provider is not None and s.provider.model == "scripted"


# Who may start a turn of the core loop: the session (Session.run, which every front end calls),
# the tools that run a sub-agent's turn inside their parent's, and controlled runs, which bring a
# provider and guards of their own to it (docs/architecture.md).
TURN_RUNNERS = {"session.py", "tools/spawn.py", "tools/subagent.py", "runs/loop.py"}
# The functions that start a turn, by module: the core loop's, and a sub-agent's in its parent's.
STARTS_A_TURN = {("bantam.loop", "run"), ("bantam.tools.spawn", "spawn"), ("bantam.tools.subagent", "run_child")}


def _turn_calls(name: str, text: str) -> list[str]:
    """The calls in module `name` (a path under src/bantam) that start a turn, under whatever names
    they were imported: loop.run, spawn, run_child, and a tool context's run_loop."""
    tree = ast.parse(text)
    package = ["bantam", *name.split("/")[:-1]]
    names = []  # how this module calls each of them
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            where = ".".join((package[:len(package) - node.level + 1] if node.level else [])
                             + (node.module.split(".") if node.module else []))
            for a, (module, function) in itertools.product(node.names, STARTS_A_TURN):
                if f"{where}.{a.name}" == module:  # the module: `loop.run(...)`
                    names.append(f"{a.asname or a.name}.{function}")
                elif (where, a.name) == (module, function):  # the function itself: `run_child(...)`
                    names.append(a.asname or a.name)
    pattern = "|".join([*map(re.escape, names), r"(.*\.)?ctx\.run_loop"])
    calls = (node for node in ast.walk(tree) if isinstance(node, ast.Call))
    return [f"{ast.unparse(c.func)} (line {c.lineno})" for c in calls if re.fullmatch(pattern, ast.unparse(c.func))]


def test_every_front_end_runs_its_turns_through_the_session():
    """A front end that calls loop.run (or a sub-agent's internals) itself runs its turns with
    limits, guards and a provider of its own making, which drift from every other front end's:
    Session.run is the one way in."""
    found = {name: calls for name, text in _sources() if name not in TURN_RUNNERS and (calls := _turn_calls(name, text))}
    assert not found, found


def test_what_a_front_end_adds_to_tool_calls_reaches_them_and_outlives_a_new_configuration(home, tmp_path):
    """The front end's part of each tool call (tools.ToolFront: here an editor's live output and
    the daemon's unreadable files) is given once, with the FrontEnd: every call sees it, children's
    calls too (less a thread's durable agents), and a session built again under a new configuration
    keeps it, instead of a front end setting it on each built session's context."""
    from bantam.tools import ToolFront
    from bantam.transcripts import DurableAgents
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "keys.cfg").write_text("api_key=hidden\n")
    (folder / "notes.txt").write_text("open\n")
    pieces: list[bytes] = []
    calls = ToolFront(on_output=pieces.append, secret=(folder / "keys.cfg",), durable=DurableAgents(tmp_path, 1))
    cfg = session.load_config({"tools": "shell_exec,read_file", "sandbox": "off"}, folder)
    first = session.build(cfg, folder, session.FrontEnd(tool_front=calls, with_model=False, with_mcp=False))
    second = first.with_config(session.load_config({"tools": "shell_exec,read_file", "sandbox": "off",
                                                    "tool_output_limit": "5000"}, folder))
    for s in (first, second):
        pieces.clear()
        ran = s.toolbox.execute("shell_exec", json.dumps({"command": "echo streamed"}))
        assert ran.content.startswith("streamed") and b"streamed" in b"".join(pieces), (ran.content, pieces)
        assert "open" in s.toolbox.execute("read_file", json.dumps({"path": "notes.txt"})).content
        refused = s.toolbox.execute("read_file", json.dumps({"path": "keys.cfg"}))
        assert refused.is_error and "hidden" not in refused.content, refused.content
        assert s.toolbox.ctx.front.durable is calls.durable
        child = s.toolbox.ctx.child(lambda e: None)
        assert child.front == replace(calls, durable=None, extend=None)


def test_a_core_tool_under_another_name_is_offered_one_way():
    """The daemon and controlled runs offer the core tools under their own names; each does it with
    bantam.tools.Offered (a name, a description, parameters and what it may change) and runs it in
    the context its front end makes, rather than an adapter class of its own around core_tool."""
    found = [name for name, text in _sources() if not name.startswith("tools/") and re.search(r"\bcore_tool\b", text)]
    assert not found, found
    from bantam.daemon.tools import CORE_TOOLS
    from bantam.runs.tools import TOOLS
    from bantam.tools import REGISTRY, Offered
    offered = [*CORE_TOOLS, *TOOLS.values()]
    assert all(isinstance(t, Offered) and t.core in REGISTRY for t in offered)
    # each is a subset of the core tool's arguments, data kept as the core tool keeps it
    from bantam.tools import core_tool
    for t in offered:
        core = core_tool(t.core)
        assert set(t.parameters["properties"]) <= set(core.parameters["properties"]), t.name
        assert set(t.raw_arguments) == set(core.raw_arguments) & set(t.parameters["properties"]), t.name
