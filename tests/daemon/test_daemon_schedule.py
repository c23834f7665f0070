"""The daemon's schedule and chat where a user trips: a fire whose queue file cannot be written,
a trigger command that times out, a heartbeat turned off after an earlier start made one, a
wrong Telegram token, a message in another topic, and config.json values the docs show. Real
daemon processes, a real model server and a real Telegram Bot API server on 127.0.0.1."""
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from bantam import config as bantam_config
from bantam.daemon import settings as daemon_settings
from bantam.errors import ConfigError
from tests.daemon.test_daemon import (configure, daemons, life, model, started, wait_for,  # noqa: F401
                                      watch_looked)
from tests.fakes.telegram_server import FakeTelegram

ROOT = Path(__file__).resolve().parents[2]


def test_a_watch_fire_that_cannot_be_queued_is_not_lost(home, model, daemons):  # noqa: F811
    agent = configure(home / "agent", model)
    (home / "watched.txt").write_text("version 1\n")
    (agent / "triggers").mkdir()
    specs = {"plain": {"watch": "watched.txt", "message": "plain saw it"},
             "withcmd": {"watch": "watched.txt", "cmd": "echo the command saw it"}}
    for name, spec in specs.items():
        (agent / "triggers" / f"{name}.json").write_text(json.dumps(spec))
    daemons()
    for name in specs:
        wait_for(lambda name=name: watch_looked(agent / "triggers" / f"{name}.json"), f"{name}'s first look")
    queue = agent / "trigger-queue"
    shutil.rmtree(queue)
    queue.write_text("a file where the queue folder was: every fire's write fails\n")
    (home / "watched.txt").write_text("version 2\n")
    wait_for(lambda: "plain could not be saved" in life(agent) and "withcmd could not be saved" in life(agent),
             "both fires failing")
    time.sleep(1.0)  # five scans
    assert life(agent).count("plain could not be saved") == 1  # said once, not at every scan
    assert not model.seen("[trigger ")
    queue.unlink()
    queue.mkdir(exist_ok=True)
    wait_for(lambda: model.seen("[trigger plain] plain saw it"), "the plain watch's fire, late")
    wait_for(lambda: model.seen("[trigger withcmd] the command saw it"), "the watch+cmd fire, late")
    saved = json.loads((agent / "triggers" / "plain.json").read_text())
    assert saved["last"] > 0  # the change is seen only now that its fire is safe


def test_a_trigger_command_that_times_out_does_not_fire(home, model, daemons):  # noqa: F811
    agent = configure(home / "agent", model, cmd_timeout=2)
    (agent / "triggers").mkdir()
    for name, cmd in {"slow": "echo partial output; sleep 30", "quiet": "sleep 30",
                      "quick": "echo quick done"}.items():
        (agent / "triggers" / f"{name}.json").write_text(json.dumps({"cmd": cmd, "repeat_s": 600}))
    daemons()
    wait_for(lambda: model.seen("[trigger quick] quick done"), "the quick command's fire")
    wait_for(lambda: life(agent).count("cmd timed out") == 2, "both slow commands timing out", 20)
    time.sleep(0.5)
    assert not model.seen("[trigger slow]") and not model.seen("[trigger quiet]")
    assert "slow fired" not in life(agent) and "quiet fired" not in life(agent)


def test_heartbeat_s_0_stops_the_heartbeat_an_earlier_start_made(home, model, daemons):  # noqa: F811
    agent = configure(home / "agent", model)  # heartbeat_s: 0
    beat = agent / "triggers" / "heartbeat.json"
    beat.parent.mkdir()
    beat.write_text(json.dumps({"next": time.time() - 1, "repeat_s": 0.3,  # as a start with 0.3 left it
                                "message": "heartbeat: anything to do? If not, reply with one word."}))
    daemons()
    wait_for(lambda: started(agent), "start")
    time.sleep(1.5)
    assert not beat.exists() and not model.seen("[trigger heartbeat]")
    assert "setup: removed triggers/heartbeat.json (heartbeat_s is 0)" in life(agent)


def test_a_wrong_telegram_token_is_said_once_and_polled_ever_less_often(home, model, daemons):  # noqa: F811
    with FakeTelegram() as tg:
        agent = configure(home / "agent", model, telegram_token="999:wrong-token", telegram_chat_id="42",
                          telegram_api_base=tg.url)
        daemon = daemons()
        wait_for(lambda: "getUpdates failed" in daemon.output(), "the terminal told", 20)
        shown = next(line for line in daemon.output().splitlines() if "getUpdates failed" in line)
        assert "HTTP 401" in shown and "check telegram_token in config.json" in shown
        time.sleep(6)  # polled again after 5 s; the next try is 10 s later
        assert life(agent).count("getUpdates failed") == 1
        assert daemon.output().count("getUpdates failed") == 1
        assert "wrong-token" not in life(agent) + daemon.output()


def test_a_message_in_another_topic_of_the_chat_is_logged_as_such(home, model, daemons):  # noqa: F811
    with FakeTelegram() as tg:
        agent = configure(home / "agent", model, telegram_token=tg.token, telegram_chat_id="42",
                          telegram_thread_id="7", telegram_api_base=tg.url)
        daemons()
        wait_for(lambda: started(agent), "start")
        tg.push_text(chat_id=42, thread_id=8, text="another topic")
        tg.push_text(chat_id=42, text="the general topic")
        tg.push_text(chat_id=999, text="a stranger")
        wait_for(lambda: "chat 999" in life(agent), "all three ignored")
        log = life(agent)
        assert "ignored a message in topic 8 of chat 42 (not the configured topic 7)" in log
        assert "ignored a message in the general topic of chat 42 (not the configured topic 7)" in log
        assert "ignored a message from chat 999 (not the configured chat)" in log


# --- what docs/daemon.md shows is what config.json takes -------------------------------------------

def documented_settings() -> tuple[list[dict], list[str]]:
    """From docs/daemon.md: each `"key": value` shown for config.json (a trigger's JSON is not
    one: its keys are no settings), and each `key=value` naming a setting."""
    text = re.sub(r"^```.*?^```", "", (ROOT / "docs" / "daemon.md").read_text(), flags=re.S | re.M)
    keys = {*daemon_settings.KEYS, *bantam_config.KEYS, *bantam_config.ALIASES, "request"}
    spans = [s.replace("\\|", "|") for s in re.findall(r"`([^`]+)`", text)]  # (| escaped in a table)
    shown = [json.loads(s if s.startswith("{") else "{" + s + "}") for s in spans if re.match(r'\{?"\w+": ', s)]
    as_json = [value for value in shown if set(value) <= keys]
    as_text = [s for s in spans if (m := re.search(r"(?:^|\s)(\w+)=\S", s)) and m.group(1) in keys]
    return as_json, as_text


def test_every_setting_docs_daemon_shows_is_written_as_the_daemon_takes_it(tmp_path):
    as_json, as_text = documented_settings()
    assert {"sandbox_network": True} in as_json and "--set sandbox_network=on" in as_text
    for value in as_json:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"endpoint": "http://127.0.0.1:9/v1", **value}))
        daemon_settings.load(path, environ={})  # a value it refuses raises ConfigError
    for shown in as_text:  # config.json is JSON: key=value is the command line's --set form
        assert shown.startswith("--set "), f"docs/daemon.md shows {shown!r}, which config.json does not take"
        key, _, value = shown.removeprefix("--set ").partition("=")
        if key != "KEY":
            bantam_config.check_value(key, value)


def test_a_flag_written_as_a_string_in_config_json_says_how_to_write_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"endpoint": "http://127.0.0.1:9/v1", "sandbox_network": "on"}))
    with pytest.raises(ConfigError) as e:
        daemon_settings.load(path, environ={})
    assert str(e.value) == f"{path}: sandbox_network: expected true or false, got 'on' (true or false without quotes)"
