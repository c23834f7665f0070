"""The browser view and the terminal are two front ends of one Conversation (issue 29): neither
subclasses the other, and each keeps to its own folder, a value, with the process's folder never
moved. Both run here in one process, at the same time, against real local model servers."""
from __future__ import annotations

import inspect
import io
import json
import os
import threading
from pathlib import Path

from bantam import transcripts
from bantam.conversation import Conversation
from bantam.repl import Repl
from bantam.web.session import WebSession
from tests.conftest import base_cfg, wait_for, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply

PLAN = json.dumps({"plan": [{"description": "Read a.txt", "tool": "read_file", "arguments": {"path": "a.txt"}}]})
READ = '{"tool": "read_file", "arguments": {"path": "a.txt"}}'


def test_the_browser_view_is_no_terminal():
    assert Repl not in inspect.getmro(WebSession) and WebSession not in inspect.getmro(Repl)
    assert Conversation not in inspect.getmro(WebSession)  # it owns one: composition


def project(folder: Path, name: str, server: FakeServer) -> None:
    """A project whose model writes out.txt, records where its command ran, then answers; and
    what a controlled run there needs, named by paths relative to the project."""
    (folder / "ws").mkdir(parents=True)
    (folder / "ws" / "a.txt").write_text(f"alpha of {name}\n")
    (folder / "answers.json").write_text(json.dumps([PLAN, READ, json.dumps({"final": f"{name} read a"})]))
    write_cfg(folder, **base_cfg(server), sandbox="workspace", approval="never", tools="write_file,shell_exec")
    server.add(tool_reply("write_file", {"path": "out.txt", "content": f"written by {name}"}),
               tool_reply("shell_exec", {"command": "pwd > where.txt"}), text_reply(f"{name} is done"))


def test_a_terminal_and_a_browser_conversation_side_by_side_keep_to_their_folders(home, tmp_path):
    before = os.getcwd()
    term, web = tmp_path / "term", tmp_path / "web"
    with FakeServer() as term_model, FakeServer() as web_model:
        project(term, "term", term_model)
        project(web, "web", web_model)
        lines = iter(["write it", "/run --workspace ws --scripted answers.json --require-read a.txt read a"])
        out, err = io.StringIO(), io.StringIO()
        moved: list[str] = []

        def read(prompt: str) -> str:  # the next line once the previous one (a background run too) is done
            wait_for(lambda: not repl.run_active.is_set(), "the terminal's run to end")
            if os.getcwd() != before:
                moved.append(os.getcwd())
            try:
                return next(lines)
            except StopIteration:
                raise EOFError from None
        repl = Repl({}, read=read, out=out, err=err, folder=term)
        page = WebSession({}, web)
        terminal = threading.Thread(target=repl.run, name="test-terminal")
        terminal.start()
        for line in ("write it", "/run --workspace ws --scripted answers.json --require-read a.txt read a"):
            assert page.submit(line) == "started"
            wait_for(lambda: page.job is None, f"the page's {line!r} to end")
            assert os.getcwd() == before
        terminal.join(120)
        assert not terminal.is_alive() and not moved
        page.close()

    shown = [e.get("text") for e in page.log if e["type"] == "output"]
    assert "web read a" in shown and "term read a\n" in out.getvalue(), (page.log, out.getvalue(), err.getvalue())
    for folder, name in ((term, "term"), (web, "web")):
        assert (folder / "out.txt").read_text() == f"written by {name}"
        assert (folder / "where.txt").read_text().strip() == str(folder.resolve())
        runs = list((folder / "runs").iterdir())  # <folder>/runs, its workspace copied from <folder>/ws
        assert len(runs) == 1 and (runs[0] / "workspace" / "a.txt").read_text() == f"alpha of {name}\n"
    mine = {s.project for s in transcripts.listing()}  # each autosaved as its own folder's conversation
    assert {str(term.resolve()), str(web.resolve())} <= mine
    assert os.getcwd() == before and sorted(p.name for p in Path(before).iterdir()) == []
