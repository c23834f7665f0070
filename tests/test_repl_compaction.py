"""The compaction the terminal offers, driven through a real pseudo-terminal against a real local server."""
import pexpect
import pytest

from tests.conftest import base_cfg, wait_for, write_cfg
from tests.fakes.openai_server import chunk, sse, text_reply, usage
from tests.test_repl import Term, session_file, session_records


@pytest.fixture
def cfg(home, server):
    """A project whose model's window is 1,000 tokens, so that one answer fills it past 60%."""
    server.models = [{"id": "test-model", "context_length": 1000}]
    write_cfg(home, **base_cfg(server))
    return home


def offer(term: Term) -> None:
    term.enter("a big question")
    term.expect("Big answer.")
    term.expect("Compact conversation? [Y/n]:")
    term.child.send("y\r")


def test_ctrl_c_in_the_offered_compaction_only_interrupts_it(cfg, server):
    slow = sse([chunk("We "), chunk("discussed", finish="stop")], delay=5.0)
    server.add(text_reply("Big answer.", usage(700, 10)), slow, text_reply("Still here."))
    term = Term(cfg, NO_COLOR="1")
    offer(term)
    term.expect("compacting the conversation")  # said while the summary is requested
    wait_for(lambda: len(server.chat_requests()) == 2, "the summary request")
    term.child.sendintr()
    term.expect("interrupted")
    term.enter("go on")
    term.expect("Still here.")
    assert term.quit() == 0
    after = server.chat_requests()[2].body["messages"]
    assert [(m["role"], m["content"]) for m in after[1:]] == [
        ("user", "a big question"), ("assistant", "Big answer."), ("user", "go on")]
    _, saved = session_records(session_file(cfg))
    assert [m["content"] for m in saved][:2] == ["a big question", "Big answer."]


def test_the_offered_compaction_says_what_it_does(cfg, server):
    server.add(text_reply("Big answer.", usage(700, 10)), text_reply("We discussed it."))
    term = Term(cfg, NO_COLOR="1")
    offer(term)
    said = term.expect("compacted 2 messages into 1")
    assert "compacting the conversation" in said
    term.enter("/quit")
    term.child.expect(pexpect.EOF)
