"""The daemon's own files are not the model's: what the daemon runs from its directory (cmd
triggers, which the model can write) runs inside the sandbox, and config.json, tools/ and
providers/ stay read-only to the model's commands and file tools. Real daemon processes against
the fake model server, and real bubblewrap."""
import json
import os
from pathlib import Path

import pytest

from bantam.daemon.agent import Agent
from bantam.daemon.bus import MessageFile
from bantam.daemon.runner import prepare
from bantam.sandbox import unavailable
from tests.conftest import wait_for
from tests.daemon.test_daemon import FAST, configure, daemons, life, messages, model  # noqa: F401
from tests.fakes.openai_server import tool_reply

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=f"needs bubblewrap: {unavailable()}")
TOKEN = "ghp_" + "s3cr3t" * 6  # a secret-looking variable in the daemon's own environment


def starts(agent: Path) -> int:
    return life(agent).count(" start: ") if (agent / "LIFE.md").exists() else 0


def tool_results(agent: Path) -> list[str]:
    return [str(m["content"]) for m in messages(agent) if m["role"] == "tool"]


def test_a_model_written_cmd_trigger_runs_inside_the_sandbox(home, model, daemons):  # noqa: F811
    agent = configure(home / "agent", model)
    outside = Path(os.environ["HOME"]) / "pwned"  # the user's home: outside the agent's (the cwd)
    spec = {"cmd": 'touch "$HOME/pwned"; echo "hi token:${GH_TOKEN:+present}"', "repeat_s": 600}
    model.on("set it up", tool_reply("WRITE_FILE", {"path": "agent/triggers/x.json", "content": json.dumps(spec)}))
    d = daemons(env={"GH_TOKEN": TOKEN})
    wait_for(lambda: starts(agent), "the start")
    MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "set it up"})
    fired = wait_for(lambda: model.seen("[trigger x]"), "the model-written trigger")
    newest = str(fired[0].body["messages"][-2]["content"])
    assert "[trigger x] hi token:" in newest  # it ran (model-written triggers stay possible) ...
    assert "present" not in newest            # ... without the daemon's GH_TOKEN ...
    assert not outside.exists()               # ... and could not write outside the agent's home
    assert d.stop() == 0
    # the same trigger with the sandbox off (--yolo) does write there: the check above can fail
    (agent / "triggers" / "y.json").write_text(json.dumps(spec))
    daemons("--yolo", env={"GH_TOKEN": TOKEN})
    wait_for(lambda: model.seen("[trigger y]"), "the trigger without a sandbox")
    assert outside.exists()


@pytest.fixture
def agent(home, model):  # noqa: F811 (the model fixture, imported above)
    """An Agent built in this process, not started, beside a subconscious that shares its home."""
    for name in ("agent", "subconscious"):
        configure(home / name, model)
    (home / "opt" / "tools").mkdir(parents=True)  # the home's own add-ons
    ready = prepare(home / "agent", {})
    prepare(home / "subconscious", {})
    return Agent(ready.agent, ready.settings, ready.cfg)


def call(agent: Agent, name: str, **args) -> str:
    return agent.toolbox.execute(name, json.dumps(args)).content


OWN = ("agent/config.json", "agent/tools", "agent/providers", "subconscious/config.json",
       "subconscious/tools", "opt")


def snapshot(home: Path) -> dict[str, list[tuple[str, bytes]]]:
    def files(path: Path) -> list[tuple[str, bytes]]:
        if path.is_file():
            return [(path.name, path.read_bytes())]
        return sorted((str(p.relative_to(path)), p.read_bytes() if p.is_file() else b"")
                      for p in path.rglob("*"))
    return {own: files(home / own) for own in OWN}


def test_model_commands_and_file_tools_cannot_change_the_daemons_own_files(agent, home):
    before = snapshot(home)
    out = call(agent, "BASH", command=(
        "echo '{\"model\": \"evil\"}' > agent/config.json; echo '{}' > subconscious/config.json; "
        "touch agent/tools/evil.py agent/providers/evil.py subconscious/tools/evil.py opt/tools/evil.py; "
        "mv agent/tools agent/tools.old; mv agent agent.old; mv subconscious sub.old; "
        "ln -s agent/tools t; echo '- a memory' >> agent/MEMORY.md; echo done"))
    assert out.endswith("done\n\n\nexit: 0") and "Read-only file system" in out
    assert snapshot(home) == before
    assert not (home / "agent.old").exists() and not (home / "sub.old").exists()
    assert "- a memory" in (home / "agent" / "MEMORY.md").read_text()  # the rest stays the model's
    for path in ("agent/config.json", "agent/tools/evil.py", "agent/providers/evil.py", "t/evil.py",
                 "./agent//tools/../config.json", str(home / "subconscious/config.json"),
                 "subconscious/tools/evil.py", "opt/tools/evil.py"):
        assert call(agent, "WRITE_FILE", path=path, content="x").startswith("error: not written: "), path
    assert call(agent, "EDIT_FILE", path="agent/config.json", old_string="test-model",
                new_string="evil").startswith("error: not written: ")
    # a stream rewrite (healing drops every line that is not a message) is a write too
    assert call(agent, "STASH_MESSAGES", path="agent/config.json").startswith("error: ")
    assert snapshot(home) == before
    assert call(agent, "WRITE_FILE", path="agent/triggers/t.json", content="{}").startswith("wrote ")


EVIL = ('import os, pathlib\npathlib.Path(os.environ["HOME"], "plugin-ran").write_text("outside")\n'
        'TOOLS = []\n')


def test_a_plugin_the_model_drops_is_never_loaded_into_the_daemon(home, model, daemons):  # noqa: F811
    agent = configure(home / "agent", model)
    ran = Path(os.environ["HOME"]) / "plugin-ran"
    (home / "evil.py").write_text(EVIL)
    # straight into tools/ and providers/, and by swapping in an agent directory of its own making
    model.on("install", tool_reply("BASH", {"command": (
        "cp evil.py agent/tools/; cp evil.py agent/providers/; "
        "mkdir -p new/tools new/providers && cp agent/config.json agent/SOUL.md new/ && "
        "cp evil.py new/tools/ && cp evil.py new/providers/ && mv agent old && mv new agent; echo tried")}))
    d = daemons()
    wait_for(lambda: starts(agent), "the start")
    MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "install"})
    wait_for(lambda: any("tried" in r for r in tool_results(agent)), "the BASH result")
    assert d.stop() == 0
    again = daemons()  # the next start loads tools/*.py into the daemon's process
    wait_for(lambda: "started (pid" in again.output(), "the second start")
    assert not ran.exists()
    assert not list((agent / "tools").glob("evil.py")) and not (agent / "providers" / "evil.py").exists()
    assert not (home / "old").exists()


def test_the_daemons_config_json_is_not_readable_by_the_model(agent, home):
    """It may hold the API key and the telegram token: commands see it empty, READ_FILE refuses,
    by name and through a link, and the key cannot leave in another encoding."""
    config = home / "agent" / "config.json"
    data = json.loads(config.read_text())
    config.write_text(json.dumps({**data, "api_key": "sk-daemon-0123456789abcdef"}))
    out = call(agent, "BASH", command="base64 -w0 agent/config.json; wc -c < subconscious/config.json; "
                                      "ln -s agent/config.json c.json; echo done")
    assert "done" in out and "c2stZGFlbW9u" not in out and "sk-daemon" not in out, out  # (base64 of "sk-daemon")
    for path in ("agent/config.json", "c.json", str(config)):
        assert call(agent, "READ_FILE", path=path).startswith("error: not read: "), path
    assert "sk-daemon" not in call(agent, "READ_FILE", path="agent/SOUL.md")
