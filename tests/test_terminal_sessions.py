"""The terminal and saved sessions (issue 32): a HOME that cannot be written, an interrupted prompt,
two terminals in one folder, and one count and one phrase for sessions everywhere. Driven through
a real pseudo-terminal (tests/test_repl.py's Term) against the real local fake server."""
import io
import re
import os
import sys
from pathlib import Path

import pexpect
import pytest

from bantam import transcripts
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import chunk, sse, text_reply
from tests.test_repl import Term, session_file, session_records


@pytest.fixture
def cfg(home, server):
    write_cfg(home, **base_cfg(server))
    return home


class Bantam(Term):
    """Term with arguments, keeping everything the terminal showed (`shown`)."""

    def __init__(self, cwd: Path, *args: str, **env: str):
        full = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "NO_COLOR": "1", **env}
        self.child = pexpect.spawn(sys.executable, ["-m", "bantam", *args], cwd=str(cwd), env=full,
                                   encoding="utf-8", dimensions=(40, 120), timeout=20)
        self.log = io.StringIO()
        self.child.logfile_read = self.log

    @property
    def shown(self) -> str:
        return self.log.getvalue()


def sent_messages(server, index: int) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in server.chat_requests()[index].body["messages"][1:]]


def test_the_terminal_works_without_a_writable_home(cfg, server, tmp_path):
    # A HOME below a regular file cannot be created or written, by root either (chmod would not stop root).
    (tmp_path / "plain-file").write_text("not a folder")
    server.add(text_reply("still here"))
    term = Bantam(cfg, HOME=str(tmp_path / "plain-file" / "home"))
    term.enter("hello")
    term.expect("still here")
    assert term.quit() == 0
    assert "Traceback" not in term.shown and term.shown.count("no prompt history this time") == 1
    assert sent_messages(server, 0) == [("user", "hello")]


def test_an_interrupted_prompt_is_closed_before_the_next_one(cfg, server):
    slow = sse([chunk("Slowly "), chunk("and "), chunk("slowly "), chunk("more", finish="stop")], delay=1.0)
    server.add(slow, text_reply("Quick answer."))
    term = Bantam(cfg)
    term.enter("tell me slowly")
    term.expect("Slowly")
    term.child.sendintr()
    term.expect("interrupted")
    term.enter("now quickly")
    term.expect("Quick answer.")
    term.quit()
    # the model sees the first request as abandoned, not the second as its continuation
    assert sent_messages(server, 1) == [("user", "tell me slowly"), ("assistant", transcripts.INTERRUPTED),
                                        ("user", "now quickly")]


def test_a_failed_request_is_closed_too(cfg, server):
    server.add(text_reply(""), text_reply("Second answer."))  # an empty answer: nothing to keep
    term = Bantam(cfg)
    term.enter("first")
    term.expect("the model returned an empty answer")
    term.enter("second")
    term.expect("Second answer.")
    term.quit()
    roles = [role for role, _ in sent_messages(server, 1)]
    assert roles == ["user", "assistant", "user"]


def test_a_second_terminal_saves_under_a_name_of_its_own_and_never_replaces_the_first_ones(cfg, server):
    server.add(text_reply("answer one"), text_reply("answer two"), text_reply("the second's summary"),
               text_reply("answer three"), text_reply("answer four"))
    own = f"{transcripts.project_id(cfg)}-2"
    first = Bantam(cfg)
    first.enter("first terminal")
    first.expect("answer one")
    second = Bantam(cfg)
    second.enter("second terminal")
    second.expect("answer two")
    second.expect(f"this one is saved as {own}")  # said once, at its first save
    second.enter("/save")  # saving on purpose keeps to its own name too
    second.expect(f"to {session_file(cfg, own)}")
    first.enter("first again")
    first.expect("answer three")
    assert first.quit() == 0
    second.enter("second again")  # the first has gone: still saved, still under its own name
    second.expect("answer four")
    assert second.quit() == 0
    _, saved = session_records(session_file(cfg))
    assert [m["content"] for m in saved] == ["first terminal", "answer one", "first again", "answer three"]
    _, saved = session_records(session_file(cfg, own))
    assert [m["content"] for m in saved] == ["second terminal", "answer two", "second again", "answer four"]
    assert second.shown.count("this one is saved as") == 1


def test_the_lock_goes_with_the_process(cfg, server):
    server.add(text_reply("one"), text_reply("two"))
    first = Bantam(cfg)
    first.enter("a")
    first.expect("one")
    assert first.quit() == 0
    later = Bantam(cfg)  # the first one has ended: this one saves (a new conversation)
    later.enter("b")
    later.expect("two")
    assert later.quit() == 0
    assert "another bantam" not in later.shown
    _, saved = session_records(session_file(cfg))
    assert [m["content"] for m in saved] == ["b", "two"]


def test_continue_without_a_session_says_the_same_in_both_forms(cfg):
    terminal = run_bantam("-c", cwd=cfg)  # stdin is /dev/null: the terminal's path
    one_shot = run_bantam("-c", "-p", "hi", cwd=cfg)
    assert terminal.returncode == one_shot.returncode == 2
    assert terminal.stderr == one_shot.stderr
    assert transcripts.NO_PROJECT_SESSION in terminal.stderr


def test_nothing_saved_reads_the_same_in_list_and_bantam_sessions(cfg):
    listed = run_bantam("sessions", cwd=cfg)
    assert listed.returncode == 0 and listed.stdout == ""  # the completion scripts read ids from stdout
    assert transcripts.NO_SESSIONS in listed.stderr
    term = Bantam(cfg)
    term.enter("/list")
    term.expect(transcripts.NO_SESSIONS)
    term.enter("/continue")
    term.expect(transcripts.NO_PROJECT_SESSION)
    assert term.quit() == 0


def test_continue_resumes_without_offering_to_and_counts_agree(cfg, server):
    transcripts.save(transcripts.project_id(cfg), [{"role": "system", "content": "old prompt"},
                                             {"role": "user", "content": "what is 2+2?"},
                                             {"role": "assistant", "content": "4"}], project=cfg)
    server.add(text_reply("a summary"))
    term = Bantam(cfg, "-c")
    greeting = term.expect("loaded ")
    term.expect(": 2 messages")
    term.enter("/save")
    term.expect("saved 2 messages")
    term.enter("/list")
    term.expect("2 msgs")
    assert term.quit() == 0
    assert "saved conversation" not in greeting  # it is being resumed: no offer to
    listing = run_bantam("sessions", cwd=cfg).stdout
    assert "2 messages" in listing



def test_a_long_unbreakable_table_cell_wraps_instead_of_being_cut(cfg, server):
    path = "/srv/data/" + "a-very-long-directory-name-without-spaces/" * 3 + "final-file.txt"
    server.add(text_reply(f"Here:\n\n| file | size |\n|------|------|\n| {path} | 10 |\n"))
    term = Bantam(cfg, COLUMNS="60")
    term.child.setwinsize(40, 60)
    term.enter("list it")
    after = term.expect("[test-model")
    term.quit()
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", after[after.rindex("┌"):after.rindex("┘") + 1])
    cells = [line.split("│")[1].strip() for line in drawn.splitlines() if line.startswith("│")]
    assert "…" not in drawn and path in "".join(cells[1:])  # every piece of the path, in order


def test_a_prompt_typed_while_a_request_runs_is_sent_next(cfg, server):
    slow = sse([chunk("Slowly "), chunk("and "), chunk("slowly "), chunk("done.", finish="stop")], delay=0.7)
    server.add(slow, text_reply("Second answer."))
    term = Bantam(cfg)
    term.enter("first question")
    term.expect("Slowly")
    term.child.send("typed ahead\r")  # Enter while the answer still streams
    during = term.expect("done.")
    assert "typed ahead" not in during  # not echoed over the streaming answer and its status line
    term.expect("Second answer.")  # the typed-ahead prompt was sent, as it was typed
    assert term.quit() == 0
    assert sent_messages(server, 1)[-1] == ("user", "typed ahead")
