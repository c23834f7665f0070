"""What goes to stdout and what to stderr, and in which order, when they are not one terminal.

stdout carries the answer alone, each response's line ended before anything more comes on stderr
(the usage line), so `bantam -p ... | cat` on a terminal shows them on lines of their own; the
terminal's `> ` prompts go to stderr, so `bantam > out.txt` collects answers only. The usage line
counts Anthropic's cache writes. Real processes, a real pseudo-terminal, real local servers."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes import anthropic_server as anth
from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.openai_server import text_reply, tool_reply, usage


def both_streams(*args: str, cwd) -> str:
    """bantam's stdout and stderr into one pipe, in the order they were written."""
    r = subprocess.run([sys.executable, "-m", "bantam", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
                       env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 0, r.stdout
    return r.stdout


def test_the_answer_ends_its_line_before_the_usage_line(home, server):
    server.add(text_reply("no newline at the end", usage(100, 5)))
    write_cfg(home, **base_cfg(server))
    out = both_streams("-p", "x", cwd=home)
    assert out.startswith("no newline at the end\n[test-model: 100 prompt + 5 completion"), out
    assert out.endswith("]\n") and out.count("no newline at the end") == 1


def test_text_before_a_tool_call_and_the_answer_are_lines_of_their_own(home, server):
    looking = tool_reply("shell_exec", {"command": "echo x"})
    looking.chunks.insert(0, b'data: {"choices": [{"index": 0, "delta": {"content": "looking"}}]}\n\n')
    server.add(looking, text_reply("done: x", usage(20, 3)))
    write_cfg(home, **base_cfg(server))
    out = both_streams("-p", "x", cwd=home)
    assert out.startswith("looking\n[tool call: shell_exec("), out
    assert "\ndone: x\n[test-model: 30 prompt sent in 2 requests" in out, out


def test_the_usage_line_counts_anthropics_cache_writes(home):
    with AnthropicServer() as server:
        server.add(anth.text_reply("cached", input_tokens=120, cache_read=1000, cache_creation=300),
                   anth.text_reply("again", input_tokens=20, cache_read=1300))
        write_cfg(home, **base_cfg(server, provider="anthropic"))
        r = run_bantam("-p", "x", cwd=home)
        assert r.returncode == 0 and r.stdout == "cached\n", r.stderr
        assert "[test-model: 1420 prompt (1000 cached, 300 written to cache, 120 uncached) + 5 completion" \
            in r.stderr, r.stderr
        r = run_bantam("-p", "x", cwd=home)  # nothing written: the seed's two numbers, as before
        assert "[test-model: 1320 prompt (1300 cached, 20 uncached) + 5 completion" in r.stderr, r.stderr


def test_the_terminals_prompts_stay_off_a_redirected_stdout(home, server, tmp_path):
    server.add(text_reply("the answer"))
    write_cfg(home, **base_cfg(server))
    out = tmp_path / "out.txt"
    master, slave = pty.openpty()
    with open(out, "w") as answers:
        bantam = subprocess.Popen([sys.executable, "-m", "bantam"], cwd=home, stdin=slave, stdout=answers,
                                  stderr=slave, env={**os.environ, "NO_COLOR": "1", "TERM": "xterm"})
    os.close(slave)
    screen = b""

    def read_until(text: bytes, times: int = 1) -> None:
        nonlocal screen
        deadline = time.monotonic() + 60
        while screen.count(text) < times:
            assert time.monotonic() < deadline, screen
            if select.select([master], [], [], 0.2)[0]:
                try:
                    screen += os.read(master, 4096)
                except OSError:
                    break
    try:
        read_until(b"> ")
        os.write(master, b"hello\n")
        read_until(b"completion")
        read_until(b"> ", 2)  # the next prompt, after the answer
        os.write(master, b"\x04")
        assert bantam.wait(timeout=60) == 0
    finally:
        if bantam.poll() is None:
            bantam.kill()
        os.close(master)
    assert out.read_text() == "the answer\n"
    assert screen.count(b"> ") >= 2
