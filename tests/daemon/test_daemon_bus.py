"""messages.jsonl under pressure: healing, concurrent writers in separate processes, and a rewrite
killed with SIGKILL half-way and completed by the next daemon. Real files, real processes."""
import json
import os
import signal
import subprocess
import sys
import time

from bantam.daemon.bus import MessageFile, heal, system_message
from tests.daemon.test_daemon import configure, contents, daemons, messages, model, wait_for  # noqa: F401

CALL = {"id": "c1", "type": "function", "function": {"name": "BASH", "arguments": "{}"}}


def lines(*items) -> bytes:
    return b"".join((i if isinstance(i, bytes) else json.dumps(i).encode()) + b"\n" for i in items)


def test_reading_heals_the_file(tmp_path):
    path = tmp_path / "messages.jsonl"
    user, reply = {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}
    path.write_bytes(lines(
        user, b"{not json", b"[1, 2]", {"role": "robot"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},  # its result never came
        {"role": "tool", "tool_call_id": "zz", "content": "an orphan"},
        {"role": "system", "content": "a mid-stream system message"},
        reply) + b'{"role": "user", "content": "torn')
    conv = MessageFile(path)
    expected = [user, system_message("a mid-stream system message"), reply]
    assert conv.read() == expected
    assert path.read_bytes() == lines(*expected)  # rewritten healthy, in place
    assert heal(path.read_bytes()) == (expected, True)


def test_a_message_inside_a_block_moves_after_it(tmp_path):
    path = tmp_path / "messages.jsonl"
    call = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    late = {"role": "user", "content": "arrived mid-step"}
    result = {"role": "tool", "tool_call_id": "c1", "content": "done"}
    path.write_bytes(lines(call, late, result))
    assert MessageFile(path).read() == [call, result, late]


def test_an_append_after_an_unterminated_line_stays_a_line(tmp_path):
    path = tmp_path / "messages.jsonl"
    path.write_bytes(b'{"role": "user", "content": "no newline"}')
    conv = MessageFile(path)
    conv.append({"role": "user", "content": "next"})
    assert [m["content"] for m in conv.read()] == ["no newline", "next"]


WRITER = r"""
import sys
from bantam.daemon.bus import MessageFile
conv = MessageFile(sys.argv[1])
tag = sys.argv[2]
for i in range(int(sys.argv[3])):
    conv.append({"role": "user", "content": f"{tag}-{i} " + "z" * 6000})
"""


def test_two_processes_append_at_once_while_a_third_rewrites(tmp_path):
    """6 kB lines (more than the pipe-atomic 4 kB), two appenders and a stream of rewrites:
    every line arrives once, whole."""
    path = tmp_path / "messages.jsonl"
    path.write_bytes(lines({"role": "user", "content": "first"}))
    count = 150
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, str(count)])
               for tag in ("a", "b")]
    conv = MessageFile(path)
    rewrites = 0
    while any(w.poll() is None for w in writers):
        conv.edit(lambda cur: [{"role": "user", "content": f"first {rewrites}"}] + cur[1:])
        rewrites += 1
    assert all(w.returncode == 0 for w in writers)
    raw = path.read_bytes()
    parsed = [json.loads(line) for line in raw.splitlines()]  # no torn line anywhere
    tags = [m["content"].split(" ")[0] for m in parsed[1:]]
    assert sorted(tags) == sorted([f"a-{i}" for i in range(count)] + [f"b-{i}" for i in range(count)])
    assert [t for t in tags if t.startswith("a")] == [f"a-{i}" for i in range(count)]  # in order
    assert rewrites > 3


REWRITER = r"""
import sys
from bantam.daemon.bus import MessageFile
conv = MessageFile(sys.argv[1])
n = 0
while True:  # rewrite forever, alternating two whole conversations, until killed
    n += 1
    conv.edit(lambda cur: [{"role": "user", "content": f"version {n} line {i} " + "v" * 500}
                           for i in range(4000)])
"""


def kill_mid_rewrite(path) -> bytes:
    """SIGKILL a process while its rewrite's journal exists; returns the journal's content."""
    journal = path.with_name(f".{path.name}.journal")
    for _ in range(10):
        proc = subprocess.Popen([sys.executable, "-c", REWRITER, str(path)])
        deadline = time.monotonic() + 20
        while not journal.exists() and time.monotonic() < deadline:
            pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if journal.exists():
            return journal.read_bytes()
    raise AssertionError("never caught the rewrite with its journal")


def test_a_rewrite_killed_half_way_is_completed_by_the_next_daemon(home, model, daemons):
    agent = configure(home / "agent", model, context_tokens=10 ** 8)
    path = agent / "messages.jsonl"
    path.write_bytes(lines(*({"role": "user", "content": f"original {i}"} for i in range(10))))
    journal = kill_mid_rewrite(path)
    assert path.with_name(".messages.jsonl.journal").exists()
    daemons()
    wait_for(lambda: any("[start]" in c for c in contents(agent)), "the restarted daemon")
    assert not path.with_name(".messages.jsonl.journal").exists()
    now = messages(agent)
    expected = [json.loads(line) for line in journal.splitlines()]
    assert now[:len(expected)] == expected  # the whole new conversation, then the daemon's own lines
    assert "[start]" in now[len(expected)]["content"]
