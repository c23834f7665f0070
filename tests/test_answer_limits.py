"""Answers and limits (issue 32): an answer cut at the output limit, and input that cannot fit.

- The user's own `max_tokens` is never raised: the cut answer is written once, stderr says it was
  cut, the exit code is 1 (a budget ran out). Only a default limit is grown (seed 003), and then
  a pipe gets the whole answer alone, never the cut one before it.
- Input from a pipe is read only as far as could fit the context window: past that, or binary,
  it is refused at once (exit 2), with no request sent and memory bounded.
Everything here goes through real `bantam` processes and the real fake OpenAI server."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bantam import loop
from bantam.config import Config
from bantam.errors import LimitReached
from bantam.events import Event
from bantam.providers.openai import OpenAIProvider
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, Response, chunk, sse, text_reply, usage


def cut_text(text: str, completion: int) -> Response:
    """A streamed text answer stopped by the output limit after `completion` tokens."""
    return sse([chunk(text), chunk(finish="length"), chunk(usage=usage(10, completion), no_choices=True)])


def cut_tool_call(completion: int) -> Response:
    return sse([chunk(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "shell_exec", "arguments": '{"command": "ec'}}]),
                chunk(finish="length"), chunk(usage=usage(10, completion), no_choices=True)])


def max_tokens(server: FakeServer) -> list:
    return [r.body.get("max_tokens") for r in server.chat_requests()]


# --- a cut answer --------------------------------------------------------------------------------

def test_an_explicit_max_tokens_is_kept_and_the_cut_answer_is_written_once(server, home):
    server.add(cut_text("The first twenty tokens of", 20), text_reply("A second, whole answer."))
    write_cfg(home, **base_cfg(server, max_tokens="20"))
    r = run_bantam("-p", "explain", cwd=home)
    assert r.stdout.strip() == "The first twenty tokens of"  # one answer, the cut one
    assert max_tokens(server) == [20]  # the user's limit, asked once, never raised
    assert "answer cut at max_tokens=20; raise max_tokens" in r.stderr
    assert r.returncode == 1, r.stderr


def test_a_default_limit_is_grown_and_a_pipe_gets_only_the_whole_answer(server, home):
    server.add(cut_text("Half of the ans", 600), text_reply("The whole answer."))
    write_cfg(home, **base_cfg(server))
    r = run_bantam("-p", "explain", cwd=home)
    assert r.stdout == "The whole answer.\n"  # the cut attempt never reached the pipe
    assert max_tokens(server) == [None, 1200]
    assert "asking again with max_tokens=1200" in r.stderr and r.returncode == 0


def test_a_default_limit_cut_every_time_names_the_limit_reached(server, home):
    server.add(*[cut_text(f"Attempt {n} cut", 512) for n in (1, 2, 3)])
    write_cfg(home, **base_cfg(server))
    r = run_bantam("-p", "explain", cwd=home)
    assert r.stdout == "Attempt 3 cut\n"  # the last attempt, once
    assert max_tokens(server) == [None, 1024, 2048]
    assert "answer cut at max_tokens=2048 after 3 attempts; raise max_tokens" in r.stderr
    assert r.returncode == 1


def test_a_cut_tool_call_names_the_limit_it_gave_up_at_not_max_tokens_limit(server, home):
    server.add(*[cut_tool_call(512) for _ in range(3)])
    cfg = Config(endpoint=server.url, model="test-model")
    provider = OpenAIProvider(cfg)
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider))
    events: list[Event] = []
    with pytest.raises(LimitReached) as e:
        loop.run(provider, [{"role": "user", "content": "x"}], box, loop.Limits.from_config(cfg), events.append)
    assert "max_tokens=2048 after 3 attempts" in str(e.value) and "32768" not in str(e.value)
    assert max_tokens(server) == [None, 1024, 2048]


def test_an_explicit_max_tokens_cuts_a_tool_call_without_asking_again(server, home):
    server.add(cut_tool_call(20), text_reply("never asked"))
    cfg = Config(endpoint=server.url, model="test-model", forward={"max_tokens": 20})
    provider = OpenAIProvider(cfg)
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider))
    with pytest.raises(LimitReached, match=r"max_tokens=20\).*raise max_tokens"):
        loop.run(provider, [{"role": "user", "content": "x"}], box, loop.Limits.from_config(cfg), lambda e: None)
    assert max_tokens(server) == [20]


# --- input that cannot fit -----------------------------------------------------------------------

def feed(proc: subprocess.Popen, total: int, block: bytes, written: list[int]) -> None:
    """Write `total` bytes of `block`s to the process's stdin until it stops reading; `written`
    gets the count that went in (what it read, plus at most a pipe's buffer)."""
    assert proc.stdin is not None
    written.append(0)
    try:
        for _ in range(total // len(block)):
            proc.stdin.write(block)
            proc.stdin.flush()
            written[0] += len(block)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def test_fifty_megabytes_piped_in_are_refused_at_once_in_bounded_memory(server, home, tmp_path):
    write_cfg(home, **base_cfg(server))
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", "summarise this"], cwd=home,
                                stdin=subprocess.PIPE, stdout=o, stderr=e)
        written: list[int] = []
        writer = threading.Thread(target=feed, args=(proc, 50 * 1024 * 1024, b"lorem ipsum dolor\n" * 4096,
                                                     written))
        writer.start()
        proc.wait(120)
        writer.join(60)
    message = err.read_text()
    assert proc.returncode == 2, message
    assert "cannot fit the model's context window (200,000 tokens" in message
    assert "name the file in the prompt" in message
    assert out.read_bytes() == b"" and server.chat_requests() == []
    # it stopped reading after what could fit (1.2 MB): the 50 MB were never read, let alone held.
    # (Not the child's ru_maxrss: a forked child's peak counts its parent's pages before exec, and a
    # pytest worker that ran the local model holds 570 MB, as CI showed.)
    assert written[0] < 4 * 1024 * 1024, written


def test_a_configured_window_bounds_the_input_and_input_within_it_is_sent(server, home):
    server.add(text_reply("Read it."))
    write_cfg(home, **base_cfg(server, context_window="100"))  # 600 bytes at most
    r = run_bantam(cwd=home, input="x" * 601)
    assert r.returncode == 2 and "the input (more than 600 bytes) cannot fit" in r.stderr
    assert server.chat_requests() == []
    r = run_bantam(cwd=home, input="y" * 600)
    assert r.returncode == 0 and r.stdout == "Read it.\n", r.stderr
    assert server.chat_requests()[0].body["messages"][-1]["content"] == "y" * 600


def test_a_file_given_as_stdin_says_its_size(server, home, tmp_path):
    write_cfg(home, **base_cfg(server, context_window="100"))
    big = tmp_path / "big.txt"
    big.write_text("z" * 5000)
    with open(big, "rb") as f:
        r = subprocess.run([sys.executable, "-m", "bantam"], cwd=home, stdin=f, capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 2 and "the input (5,000 bytes) cannot fit" in r.stderr
    assert server.chat_requests() == []


@pytest.mark.parametrize("data, said", [
    (Path("/bin/ls").read_bytes(), "the input is binary (a NUL byte at byte"),
    ("café au lait\n".encode("latin-1"), "the input is not UTF-8 text (byte 3 of 13)"),
], ids=["an-executable", "latin-1"])  # not the bytes: a test's id goes into its environment (PYTEST_CURRENT_TEST)
def test_binary_input_is_refused_and_never_sent(server, home, data, said):
    write_cfg(home, **base_cfg(server))
    r = subprocess.run([sys.executable, "-m", "bantam", "-p", "what is this"], cwd=home, input=data,
                       capture_output=True, timeout=60)
    stderr = r.stderr.decode()
    assert r.returncode == 2 and said in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1  # one line, no traceback
    assert server.chat_requests() == []
