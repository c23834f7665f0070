"""The daemon's tools and prompt on a real agent directory, through the real Toolbox (argument
checks, sanitising, bg_run) of an Agent that is built but not started."""
import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from bantam.daemon.agent import Agent
from bantam.daemon.layout import life
from bantam.daemon.prompt import life_message, system_prompt
from bantam.daemon.runner import prepare
from tests.daemon.test_daemon import FAST, model  # noqa: F401


@pytest.fixture
def agent(home, model):
    (home / "agent").mkdir()
    (home / "agent" / "config.json").write_text(json.dumps({**FAST, "api_base": model.url,
                                                           "tool_output_limit": 300}))
    ready = prepare(home / "agent", {})
    return Agent(ready.agent, ready.settings, ready.cfg)


def call(agent, name, **args) -> str:
    outcome = agent.toolbox.execute(name, json.dumps(args))
    return outcome.content


def test_read_write_edit(agent, home):
    assert call(agent, "WRITE_FILE", path="notes/a.txt", content="one\ntwo\ntwo\nthree\n") == \
        "wrote 18 bytes to " + str(home / "notes/a.txt")
    assert call(agent, "READ_FILE", path="notes/a.txt") == "     1\tone\n     2\ttwo\n     3\ttwo\n     4\tthree"
    assert call(agent, "READ_FILE", path="notes/a.txt", offset=2, limit=2) == \
        "     2\ttwo\n     3\ttwo\n[lines 2-3 of 4; more with offset=4]"
    assert call(agent, "EDIT_FILE", path="notes/a.txt", old_string="two", new_string="2") == \
        "error: old_string occurs 2 times in notes/a.txt: add context to make it unique, or set replace_all"
    assert call(agent, "EDIT_FILE", path="notes/a.txt", old_string="two", new_string="2",
                replace_all=True) == "replaced 2 occurrence(s) in notes/a.txt"
    assert call(agent, "EDIT_FILE", path="notes/a.txt", old_string="four", new_string="4") == \
        "error: old_string was not found in notes/a.txt"
    assert (home / "notes/a.txt").read_text() == "one\n2\n2\nthree\n"
    (home / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))
    assert "is an image (image/png) and this model cannot see images" in call(agent, "READ_FILE", path="pic.png")


def test_stash_and_clipped_bash(agent, home):
    result = call(agent, "STASH", content="remember this")
    digest = result.split()[1].rstrip("]")
    assert result == f"[stash {digest}] saved as agent/blobs/{digest}"
    assert (home / "agent" / "blobs" / digest).read_text() == "remember this"
    out = call(agent, "BASH", command="printf 'x%.0s' $(seq 1 1000); echo; echo tail-end")
    assert out.startswith("x" * 150) and "chars truncated, [stash " in out and out.endswith("tail-end\n\n\nexit: 0")
    blob = out.split("[stash ", 1)[1].split("]")[0]
    assert (home / "agent" / "blobs" / blob).read_text() == "x" * 1000 + "\ntail-end\n\n\nexit: 0"


def test_stash_messages_defaults_to_the_middle_half(agent, home, model):
    lines = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(8)]
    (home / "agent" / "messages.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    result = call(agent, "STASH_MESSAGES")
    assert result.startswith("[stash ") and result.endswith("] lines 3-6 (4 messages) stashed")
    kept = [json.loads(x)["content"] for x in (home / "agent" / "messages.jsonl").read_text().splitlines()]
    assert kept[:2] == ["m0", "m1"] and kept[3:] == ["m6", "m7"] and "SUMMARY" in kept[2]


def test_system_prompt_elides_memory_and_names_the_subconscious(agent, home):
    (home / "agent" / "MEMORY.md").write_text("- start of memory\n" + "filler\n" * 3000 + "- end of memory\n")
    prompt = system_prompt(agent.dir, agent.settings, chat=False)
    assert "<subconscious>" not in prompt
    (home / "subconscious").mkdir()
    prompt = system_prompt(agent.dir, agent.settings, chat=False)
    assert prompt.startswith("<soul>\nYou are a persistent personal assistant.")
    assert "<harness>\nYou run inside bantam's daemon" in prompt
    assert "<subconscious>A subconscious watches this conversation from subconscious/" in prompt
    assert "- start of memory" in prompt and "- end of memory" in prompt
    assert "characters clipped of " in prompt and ": agent/MEMORY.md is over memory_limit (10000)" in prompt
    assert len(prompt.split("<memory>")[1]) < 10_500
    for i in range(20):
        life(agent.dir, "test", f"event {i}")
    tail = life_message(agent.dir, replace(agent.settings, life_tail=3))["content"]
    assert tail.startswith("<system-message>[now ") and tail.endswith("test: event 19</system-message>")
    assert "bytes earlier]" in tail and "event 16" not in tail and "event 17" in tail


def test_the_file_tools_find_in_tmp_what_bash_wrote_there(agent):
    """/tmp is the session's own for BASH and for every file tool alike, the image check included."""
    out = call(agent, "BASH", command="printf 'seen\\n' > /tmp/t.txt; printf '\\211PNG\\r\\n\\032\\n' > /tmp/pic.png; "
                                      "head -c 20 /dev/zero >> /tmp/pic.png")
    assert out.endswith("exit: 0"), out
    assert call(agent, "READ_FILE", path="/tmp/t.txt") == "     1\tseen"
    assert "is an image (image/png) and this model cannot see images" in call(agent, "READ_FILE", path="/tmp/pic.png")


@pytest.fixture
def outside():
    """A folder outside the agent's home and not under /tmp (which is the session's own for the
    model's commands and file tools)."""
    path = Path(tempfile.mkdtemp(prefix="bantam-daemon-outside-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_bash_and_write_file_stay_in_the_sandbox(agent, home, outside):
    out = call(agent, "BASH", command=f"touch inside.txt; touch {outside}/x")
    assert (home / "inside.txt").exists() and not (outside / "x").exists()
    assert "[sandbox: " in out and out.endswith("exit: 1")
    out = call(agent, "WRITE_FILE", path=str(outside / "y"), content="no")
    assert out.startswith("error: not written: this needs a person's approval (write outside the sandbox")
    assert not (outside / "y").exists()
