"""Prompt caching: each request of a conversation repeats the previous one byte for byte.

Providers cache the longest unchanged prefix of a request, so the property pinned here is exact:
for two consecutive requests A, B of one conversation, A's body up to the `]` that closes its
messages array (`Recorded.open_prefix`: the options after the messages, `"stream":true}` and the
like, are A's closing) is a byte prefix of B's body. For the daemon, A's trailing LIFE.md message,
rebuilt every step by design (seed 003), is left out of A first. For Anthropic the comparison is
made without the `cache_control` marks (Anthropic's cache matches content: the breakpoints move
on with the conversation), and the breakpoints are checked apart.
The real providers against the real local fake server; bodies compared as the server received
them. One-shot sessions run in process (tests/fakes/scripted.one_shot: the provider is the real
one, only the model is the fake server); a thread continued by a new process, the daemon and a
controlled run through real processes.
"""
import json
import os
import sys

import pytest

from tests.conftest import base_cfg, run_bantam, wait_for, write_cfg
from tests.fakes import anthropic_server as anth
from tests.fakes.openai_server import Recorded, text_reply, tool_reply
from tests.fakes.scripted import one_shot

LIFE_TAIL = b',{"role":"user","content":"<system-message>[now '


def assert_extends(earlier: Recorded, later: Recorded, trailing_tail: bool = False) -> None:
    prefix = earlier.open_prefix()
    if trailing_tail:
        prefix = prefix[:prefix.rindex(LIFE_TAIL)]
    if not later.raw.startswith(prefix):
        at = next((i for i, (a, b) in enumerate(zip(prefix, later.raw, strict=False)) if a != b), len(later.raw))
        raise AssertionError(f"the request rewrote its history at byte {at}: {prefix[max(0, at - 100):at + 100]!r}")
    assert len(later.raw) > len(prefix) + 20  # and added the step


def without_breakpoints(r: Recorded) -> Recorded:
    """The request as Anthropic's cache compares it: the same bytes less the cache_control marks."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "cache_control"}
        return [strip(v) for v in value] if isinstance(value, list) else value
    body = strip(r.body)
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    assert json.dumps(r.body, ensure_ascii=False, separators=(",", ":")).encode() == r.raw  # how httpx sends it
    return Recorded(r.method, r.path, r.headers, body, r.port, raw)


def steps(n: int) -> list:
    return [tool_reply("shell_exec", {"command": f"echo {i}"}, call_id=f"call_{i}") for i in range(n)]


def posts(server) -> list[Recorded]:
    return [r for r in server.requests if r.method == "POST"]


def test_open_prefix_is_the_body_up_to_the_end_of_the_messages():
    raw = b'{"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}],"stream":true}'
    assert Recorded("POST", "/", {}, json.loads(raw), 0, raw).open_prefix() == raw[:raw.index(b'],"stream"')]
    last = b'{"model":"m","messages":[{"role":"user","content":"a],\\"stream\\":"}]}'
    assert Recorded("POST", "/", {}, json.loads(last), 0, last).open_prefix() == last[:-2]


@pytest.mark.quick
def test_one_shot_steps_extend_the_previous_request(home, server):
    write_cfg(home, **base_cfg(server, tools="shell_exec,write_file", sandbox="off"))
    server.add(*steps(2), text_reply("done"))
    assert one_shot(home, None)[0] is not None
    first, second, third = posts(server)
    assert list(first.body)[:3] == ["model", "tools", "messages"]  # what stays the same comes first
    assert_extends(first, second)
    assert_extends(second, third)


def test_a_thread_continued_by_a_new_process_extends_its_last_request(home, server):
    write_cfg(home, **base_cfg(server, tools="shell_exec", sandbox="off"))
    server.add(*steps(1), text_reply("first done"), text_reply("second done"))
    assert run_bantam("--thread", "t", "-p", "one", cwd=home).returncode == 0
    assert run_bantam("--thread", "t", "-p", "two", cwd=home).returncode == 0
    requests = posts(server)
    assert len(requests) == 3
    # the saved thread, read back, is sent exactly as it was sent from memory
    assert_extends(requests[1], requests[2])


@pytest.mark.quick
def test_sub_agent_steps_extend_their_own_previous_request(home, server):
    write_cfg(home, **base_cfg(server, tools="shell_exec,spawn_agent", sandbox="off"))
    server.add(tool_reply("spawn_agent", {"task": "the subtask"}, call_id="spawn"), *steps(2),
               text_reply("sub done\nSTATUS: success"), text_reply("all done"))
    assert one_shot(home, None)[0] is not None
    parent1, child1, child2, child3, parent2 = posts(server)
    assert_extends(child1, child2)
    assert_extends(child2, child3)
    assert_extends(parent1, parent2)


@pytest.mark.quick
def test_anthropic_steps_extend_the_previous_request_breakpoints_included(home):
    with anth.AnthropicServer() as server:
        write_cfg(home, **base_cfg(server, provider="anthropic", tools="shell_exec", sandbox="off"))
        server.add(anth.tool_reply("shell_exec", {"command": "echo 1"}, "toolu_1"),
                   anth.tool_reply("shell_exec", {"command": "echo 2"}, "toolu_2"), anth.text_reply("done"))
        assert one_shot(home, None)[0] is not None
        first, second, third = posts(server)
    assert list(third.body)[:4] == ["model", "tools", "system", "messages"]  # Anthropic's cache order
    assert_extends(without_breakpoints(first), without_breakpoints(second))
    assert_extends(without_breakpoints(second), without_breakpoints(third))
    assert isinstance(third.body["system"], str)  # plain: proxies pass a list on as one servers refuse
    assert third.body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [b for m in third.body["messages"] for b in m["content"] if "cache_control" in b]
    assert len(marked) + 1 <= 4  # with the tools': within Anthropic's limit of 4 breakpoints
    # this request's end, and the previous request's end, which the cache wrote last step
    assert marked == [second.body["messages"][-1]["content"][-1], third.body["messages"][-1]["content"][-1]]


def test_daemon_steps_extend_the_previous_request_but_its_life_tail(home, server):
    import subprocess
    agent = home / "agent"
    agent.mkdir()
    (agent / "config.json").write_text(json.dumps({"api_base": server.url, "model": "test-model",
                                                   "heartbeat_s": 0, "retry_delays": [0, 0, 0]}))
    server.add(*[tool_reply("BASH", {"command": f"echo {i}"}, call_id=f"call_{i}") for i in range(2)],
               text_reply("started"))
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "daemon"], cwd=home, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        wait_for(lambda: len(posts(server)) >= 3 and not server.script, "the daemon's start-up turn")
    finally:
        proc.terminate()
        proc.wait(30)
    first, second, third = posts(server)[:3]
    assert_extends(first, second, trailing_tail=True)
    assert_extends(second, third, trailing_tail=True)


def test_controlled_run_prompts_keep_their_steady_parts_first(home, server):
    # `bantam run` sends one fresh prompt a step (seed 002), but what does not change comes first:
    # the system message is the run's, the same every time; while the window of the last four
    # results fills, each prompt repeats the last up to its progress line, which comes after them
    ws = home / "ws"
    ws.mkdir()
    for i in range(3):
        (ws / f"f{i}.txt").write_text(f"file {i}\n")
    write_cfg(home, **base_cfg(server))
    reads = [{"tool": "read_file", "arguments": {"path": f"f{i}.txt"}} for i in range(3)]
    server.add(text_reply(json.dumps({"plan": [{"description": f"Read f{i}.txt", **r} for i, r in enumerate(reads)]})),
               *[text_reply(json.dumps(r)) for r in reads], text_reply(json.dumps({"final": "read them"})))
    r = run_bantam("run", "Read every file.", "--workspace", str(ws), cwd=home)
    assert r.returncode == 0, r.stderr
    requests = posts(server)
    assert len(requests) == 5
    systems = {json.dumps(q.body["messages"][0]) for q in requests}
    assert len(systems) == 1  # planning, acting and answering: one system message
    users = [q.body["messages"][-1]["content"] for q in requests[1:]]
    for earlier, later in zip(users, users[1:]):
        steady = earlier[:earlier.index("\n\nProgress:")]
        assert later.startswith(steady), (steady, later)
        assert "Recent results" in steady or earlier is users[0]
