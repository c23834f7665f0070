"""What a hostile model or server writes cannot drive the user's terminal, crash bantam, or reach
stdout as a cut-off answer: a real bantam process against the real local fake server."""
import json
import os
import sys

import pexpect
import pytest

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes import anthropic_server as anth
from tests.fakes.faults import fault
from tests.fakes.openai_server import FakeServer, Response, chunk, sse, text_reply, tool_reply, usage

# An answer whose escape sequences are each split between two deltas: OSC 52 (set the clipboard),
# CSI 2J and H (clear the screen, cursor home), OSC 0 ended by ST (window title), an 8-bit CSI
# (U+009B), ESC c (reset the terminal) and a bare ESC at the very end.
ANSWER = ["Safe start. \x1b]52;c;", "cm0gLXJmIH4=\x07 clip", "board. \x1b[2", "J\x1b[H cleared. \x1b]0;",
          "pwned title\x1b", "\\ titled. \x9b3", "1m C1. \x1b", "c end. ünï 👨‍👩‍👧\ttab\x1b"]
SHOWN = "Safe start.  clipboard.  cleared.  titled.  C1.  end. ünï 👨‍👩‍👧\ttab"
REASONING = ["think \x1b]52;c;ZXZpbA", "==\x07 then \x1b[", "2J done"]
THOUGHT = "think  then  done"
MODEL_SEQUENCES = ("\x1b]", "\x1b[2J", "\x1b[H", "\x1bc", "\x9b", "\x9d", "52;c;", "cm0gLXJmIH4", "pwned")


@pytest.fixture
def cfg(home, server):
    write_cfg(home, **base_cfg(server))
    return home


def hostile_answer() -> Response:
    events = [chunk(reasoning=piece) for piece in REASONING] + [chunk(piece) for piece in ANSWER]
    return sse([*events, chunk(finish="stop"), chunk(usage=usage(), no_choices=True)])


def test_escape_sequences_of_the_model_never_reach_a_pipe(cfg, server):
    server.add(hostile_answer())
    r = run_bantam("-p", "hi", cwd=cfg)
    assert r.returncode == 0, r.stderr
    assert r.stdout == SHOWN + "\n"
    assert THOUGHT in r.stderr
    for stream in (r.stdout, r.stderr):
        assert not any(c in stream for c in "\x1b\x07\x9b\x9c\x9d"), repr(stream)
        assert not any(s in stream for s in MODEL_SEQUENCES), repr(stream)


def test_escape_sequences_of_the_model_never_reach_a_terminal(cfg, server):
    """Streamed live into a real pseudo-terminal: the only sequence on screen is bantam's own
    erasing of its `...requesting...` status (colour is off)."""
    server.add(hostile_answer())
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "-p", "hi"], cwd=str(cfg), encoding="utf-8",
                          env={**os.environ, "NO_COLOR": "1", "TERM": "xterm"}, dimensions=(40, 120), timeout=30)
    child.expect(pexpect.EOF)
    child.close()
    screen = child.before
    assert child.exitstatus == 0, screen
    assert SHOWN.replace("\t", "") in screen.replace("\t", "")
    assert THOUGHT in screen
    bantams_own = screen.replace("\r\x1b[K", "")
    assert not any(c in bantams_own for c in "\x1b\x07\x9b\x9c\x9d"), repr(screen)


def test_a_servers_error_message_and_model_names_are_cleaned(cfg, server):
    server.models = [{"id": "test-model"}, {"id": "evil\x1b]52;c;aGk=\x07-model\x1b[2J"}]
    r = run_bantam("models", cwd=cfg)
    assert r.returncode == 0, r.stderr
    assert "  evil-model\n" in r.stdout and "\x1b" not in r.stdout + r.stderr
    bad = {"error": {"message": "bad \x1b]0;title\x07request\x1b[2J"}}
    server.add(Response(status=400, headers={"Content-Type": "application/json"},
                        chunks=[json.dumps(bad).encode()], chunked=False))
    r = run_bantam("-p", "hi", cwd=cfg)
    assert r.returncode == 1
    assert "HTTP 400: bad request" in r.stderr and "\x1b" not in r.stderr, repr(r.stderr)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_tool_arguments_nested_100000_deep_are_an_error_the_model_reads(home, wire):
    with (anth.AnthropicServer() if wire == "anthropic" else FakeServer()) as s:
        write_cfg(home, **base_cfg(s, provider=wire))
        if wire == "anthropic":
            s.add(anth.tool_reply("shell_exec", DEEP), anth.text_reply("carried on"))
        else:
            s.add(tool_reply("shell_exec", DEEP), text_reply("carried on"))
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout == "carried on\n"
        assert "Traceback" not in r.stderr
        second = [q for q in s.requests if q.method == "POST"][1].body["messages"]
        tool_results = [m["content"] for m in second if m.get("role") == "tool"] or [
            b["content"] for m in second if isinstance(m.get("content"), list)
            for b in m["content"] if b.get("type") == "tool_result"]
        assert len(tool_results) == 1 and "nested more than 100 levels deep" in str(tool_results[0])


def deep_sse() -> Response:
    return Response(headers={"Content-Type": "text/event-stream"}, chunks=[f"data: {DEEP}\n\n".encode()])


def deep_body(status: int = 200) -> Response:
    return Response(status=status, headers={"Content-Type": "application/json"}, chunks=[DEEP.encode()],
                    chunked=False)


@pytest.mark.parametrize("reply", [deep_sse, deep_body, lambda: deep_body(500)], ids=["sse", "body", "error-body"])
def test_a_response_nested_100000_deep_is_one_clear_error(cfg, server, reply):
    server.add(*[reply() for _ in range(4)])  # every attempt: the first and three retries
    r = run_bantam("-p", "hi", cwd=cfg)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and len(errors[0]) < 600, r.stderr[-2000:]
    assert r.stdout == ""


def endless_answer() -> Response:
    """A stream of text deltas that never ends (until bantam hangs up)."""
    piece = f"data: {json.dumps(chunk('an answer that never ends ' * 300))}\n\n".encode()

    def forever():
        while True:
            yield piece
    return Response(headers={"Content-Type": "text/event-stream"}, chunks=forever())


def test_an_endless_answer_on_every_attempt_leaves_stdout_empty(home, server):
    write_cfg(home, **base_cfg(server, retry_delays="0,0"))
    server.add(*[endless_answer() for _ in range(3)])
    r = run_bantam("-p", "hi", cwd=home, timeout=600)
    assert r.returncode == 1
    assert r.stdout == ""  # a pipe gets whole answers only, on the failure path too
    assert "the response stream passed 32 MB without ending" in r.stderr
    assert "was not written: the response failed" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_an_answer_cut_off_on_the_last_attempt_is_not_written_to_a_pipe(home, wire):
    with (anth.AnthropicServer() if wire == "anthropic" else FakeServer()) as s:
        write_cfg(home, **base_cfg(s, provider=wire, retry_delays="0"))
        s.add(fault("reset", wire), fault("reset", wire))
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 1
        assert r.stdout == "", r.stdout
        assert "was not written: the response failed" in r.stderr
