"""The daemon through bad hours, as its user lives them: a model server that goes down and comes
back or refuses the key, a Telegram that drops every send, a SIGKILL, a 2 MB message, a slow
trigger command, a corrupt line in messages.jsonl. Real daemon processes, real local servers."""
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from bantam.daemon.bus import MessageFile
from tests.conftest import children_of, process_gone
from tests.fakes.openai_server import Response, chunk, json_reply, sse, text_reply, usage
from tests.fakes.telegram_server import FakeTelegram
from tests.daemon.test_daemon import (FAST, ModelServer, answered, configure, contents, daemons, life,  # noqa: F401
                               messages, model, started, wait_for)

# an unanswered turn is tried again after 0.3 s, 0.6 s, then every 1 s
RETRY = {"retry_turn_s": 0.3, "retry_turn_max_s": 1.0}


def say(agent, text):
    MessageFile(agent / "messages.jsonl").append({"role": "user", "content": text})


def start_with_chat(home, model, tg, daemons, **extra):
    """A daemon in home/agent chatting with the fake Telegram (chat 42), once it has started."""
    agent = configure(home / "agent", model, telegram_token=tg.token, telegram_chat_id="42",
                      telegram_api_base=tg.url, **extra)
    daemon = daemons()
    wait_for(lambda: started(agent), "start")
    return agent, daemon


def test_an_unanswered_turn_is_answered_when_the_model_returns_and_triggers_arrive_collapsed(
        home, model, daemons):
    agent = configure(home / "agent", model, **RETRY)
    model.on("are you there", text_reply("Back again, here is your answer."))
    d = daemons()
    wait_for(lambda: started(agent) and answered(agent, "ok")(), "the start banner answered")
    model.go_down()
    say(agent, "are you there?")
    wait_for(lambda: "retrying it in 1 s" in life(agent), "retries backing off to the cap", 30)
    log = life(agent)
    assert "retrying it in 0.3 s (attempt 1 failed)" in log and "retrying it in 0.6 s (attempt 2 failed)" in log
    # meanwhile a repeating trigger fires again and again, and waits in the queue
    (agent / "triggers" / "tick.json").write_text(json.dumps(
        {"next": time.time(), "repeat_s": 0.2, "message": "check the queue"}))
    wait_for(lambda: len(list((agent / "trigger-queue").glob("*-tick.json"))) >= 3, "queued fires")
    assert not model.seen("[trigger tick]")
    model.come_back()  # nobody writes anything: the daemon retries by itself
    wait_for(answered(agent, "Back again"), "the answer after the outage", 30)
    tick = wait_for(lambda: model.seen("[trigger tick]"), "the trigger")
    first = tick[0].body["messages"][-2]["content"]  # every fire queued meanwhile, as one message
    assert int(re.search(r"\(fired (\d+) times since", first).group(1)) >= 3, first
    for r in model.chat_requests():  # and never two trigger messages in one request
        assert sum("[trigger " in str(m.get("content")) for m in r.body["messages"]) <= 1
    # at least the three seen above; a loaded machine (parallel workers) may fit one more retry in
    # while the trigger fires queue up, so the count is a lower bound
    again = re.search(r"answered again after (\d+) failed attempt\(s\)", life(agent))
    assert again and int(again.group(1)) >= 3, life(agent)
    assert d.stop() == 0
    out = d.output()
    assert "woke by are you there?: failed: cannot connect to" in out  # issue 32: not retried in the turn
    assert "woke by are you there?: replied: Back again, here is your answer." in out


class Refusing(ModelServer):
    """Answers 401 while `refuse` is set, as an API whose key was revoked."""
    refuse = True

    def next_response(self, body=None):
        if self.refuse and "[telegram" in json.dumps(body["messages"][-2]):
            return json_reply({"error": {"message": "invalid api key"}}, status=401)
        return super().next_response(body)


def test_a_refused_key_is_told_to_the_operator_once_and_the_turn_retried(home, daemons):
    with Refusing() as model, FakeTelegram() as tg:
        model.on("[telegram", text_reply("Working again."))
        agent, _ = start_with_chat(home, model, tg, daemons, **RETRY)
        tg.push_text(chat_id=42, text="hello?")
        wait_for(lambda: life(agent).count("HTTP 401") >= 4, "several failed attempts", 30)
        model.refuse = False
        wait_for(lambda: "Working again." in tg.texts(), "the answer", 30)
        told = [t for t in tg.texts() if "refuses my requests" in t]
        assert len(told) == 1 and "HTTP 401: invalid api key" in told[0]
        assert tg.texts()[-1] == "Working again."


def test_replies_reach_telegram_exactly_once_in_order_across_an_outage_and_a_sigkill(
        home, model, daemons):
    with FakeTelegram() as tg:
        for n in range(1, 5):
            model.on(f"question {n}", text_reply(f"answer {n}"))
        agent, first = start_with_chat(home, model, tg, daemons, outbox_retry_max_s=0.3)
        tg.push_text(chat_id=42, text="question 1")
        tg.wait_sent(1)  # acknowledged: must never be sent again
        tg.drop_sends = True
        for n in (2, 3, 4):
            tg.push_text(chat_id=42, text=f"question {n}")
            wait_for(answered(agent, f"answer {n}"), f"answer {n}")
        wait_for(lambda: len(list((agent / "outbox").glob("*.json"))) == 3, "three replies waiting")
        wait_for(lambda: "send failed" in life(agent), "the outage noticed")
        agents = children_of(first.proc.pid)  # the supervisor's agent processes die with it, a moment later
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(15)
        assert all(process_gone(pid) for pid in agents)  # before the outage ends: none sends again
        tg.drop_sends = False
        second = daemons()
        wait_for(lambda: not list((agent / "outbox").glob("*.json")), "the outbox emptied", 30)
        wait_for(lambda: life(agent).count(" start: ") == 2, "the restart")
        assert second.stop() == 0
        assert tg.texts() == ["answer 1", "answer 2", "answer 3", "answer 4"]


def test_a_huge_message_is_stashed_whole_answered_and_history_kept(home, model, daemons):
    agent = configure(home / "agent", model, context_tokens=20_000, tool_output_limit=2_000)
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"earlier line {i}"}
               for i in range(54)]
    (agent / "messages.jsonl").write_text("".join(json.dumps(m) + "\n" for m in history))
    huge = "HUGE-HEAD " + "data " * 400_000 + " HUGE-TAIL"  # 2 MB
    model.on("HUGE-HEAD", text_reply("Read the head and tail of the big one."))
    daemons()
    wait_for(lambda: started(agent), "start")
    say(agent, huge)
    wait_for(answered(agent, "Read the head and tail"), "the answer to the huge message", 30)
    now = contents(agent)
    assert now[:54] == [m["content"] for m in history]  # all earlier history is still there
    big = next(c for c in now if c.startswith("HUGE-HEAD"))
    assert len(big) < 3_000 and big.endswith("HUGE-TAIL")
    digest = big.split("[stash ", 1)[1].split("]")[0]
    assert (agent / "blobs" / digest).read_text() == huge
    assert not any("[stash " in c and "Summary:" in c for c in now)  # no history was summarised
    assert "was stashed whole" in life(agent)


def test_a_huge_message_in_a_small_window_is_stashed_once(home, model, daemons):  # noqa: F811
    """Half of a 3,000-token budget is 4,800 characters, less than tool_output_limit's 5,000: the
    shortened copy must still fit, or every wake-up stashes it again."""
    agent = configure(home / "agent", model, context_tokens=3_000)
    huge = "SMALL-HEAD " + "data " * 4_000 + " SMALL-TAIL"
    model.on("SMALL-HEAD", text_reply("Read the small window's message."))
    daemons()
    wait_for(lambda: started(agent), "start")
    say(agent, huge)
    wait_for(answered(agent, "Read the small window"), "the answer to the huge message", 30)
    time.sleep(1.5)  # a copy still over the limit was stashed again at every wake-up meanwhile
    assert life(agent).count("was stashed whole") == 1
    assert len(list((agent / "blobs").iterdir())) == 1
    big = next(c for c in contents(agent) if c.startswith("SMALL-HEAD"))
    assert len(big) <= 4_800 and big.endswith("SMALL-TAIL")


def test_a_slow_trigger_command_does_not_hold_up_a_clock_trigger(home, model, daemons):
    agent = configure(home / "agent", model)
    due = time.time() + 2
    (agent / "triggers").mkdir()
    (agent / "triggers" / "slow.json").write_text(json.dumps({"cmd": "sleep 8; echo slow done",
                                                              "repeat_s": 600}))
    (agent / "triggers" / "clock.json").write_text(json.dumps({"next": due, "message": "on time"}))
    d = daemons()
    wait_for(lambda: model.seen("[trigger clock] on time"), "the clock trigger", 30)
    assert "slow fired" not in life(agent)  # the command was still running
    fired = next(line for line in life(agent).splitlines() if "trigger: clock fired" in line)
    at = time.mktime(time.strptime(fired[:19], "%Y-%m-%d %H:%M:%S"))
    assert at <= due + 1, "fired within a second of its time"
    wait_for(lambda: model.seen("[trigger slow] slow done"), "the slow one, later", 30)
    assert d.stop() == 0


def test_a_malformed_line_is_kept_and_reported(home, model, daemons):
    agent = configure(home / "agent", model)
    model.on("after the bad line", text_reply("Still here."))
    daemons()
    wait_for(lambda: started(agent) and answered(agent, "ok")(), "start")
    count = len(messages(agent))
    with open(agent / "messages.jsonl", "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(b'{"role": "user", "content": "broken\n')
    say(agent, "after the bad line")
    line = wait_for(lambda: [x for x in life(agent).splitlines() if "was unreadable" in x], "the report")[0]
    wait_for(answered(agent, "Still here."), "the answer")
    assert f"messages.jsonl line {count + 1} was unreadable" in line
    digest = line.rsplit("agent/blobs/", 1)[1].strip()
    assert (agent / "blobs" / digest).read_bytes() == b'{"role": "user", "content": "broken'


def test_install_service_writes_a_unit_systemd_accepts(home, tmp_path):
    config = tmp_path / "xdg"
    r = subprocess.run([sys.executable, "-m", "bantam", "daemon", "--install-service", "--model", "m",
                        "agent"], cwd=home, capture_output=True, text=True, timeout=30,
                       env={**os.environ, "XDG_CONFIG_HOME": str(config)})
    assert r.returncode == 0, r.stderr
    unit = config / "systemd" / "user" / "bantam-agent.service"
    text = unit.read_text()
    assert f"ExecStart={sys.executable} -m bantam daemon --model=m {home}/agent\n" in text
    assert "Restart=on-failure" in text and "KillSignal=SIGTERM" in text
    assert "systemctl --user enable --now bantam-agent.service" in r.stdout
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    # (system mode: --user needs a running user manager, which a container or CI has not)
    check = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0 and not check.stderr.strip(), check.stderr


def test_the_supervisor_warns_once_and_a_new_subconscious_logs_its_setup(home, model, daemons):
    agent = configure(home / "agent", model, api_key="sk-test-key")
    agent.joinpath("config.json").chmod(0o644)
    d = daemons("agent", "subconscious")
    sub = home / "subconscious"
    wait_for(lambda: (sub / "LIFE.md").exists() and started(sub) and started(agent), "both started", 30)
    assert d.stop() == 0
    assert d.output().count("holds credentials and others can read it") == 1
    setup = [x for x in life(sub).splitlines() if " setup: " in x]
    assert any("created" in x and "SOUL.md" in x and "triggers/primary.json" in x for x in setup), setup
    assert any("installed opt/tools/nudge.py" in x for x in setup), setup


def test_a_trigger_firing_on_the_second_is_logged_at_that_second(home, model, daemons):
    agent = configure(home / "agent", model, trigger_tick=30)  # one wait, to the fire's moment
    (agent / "triggers").mkdir()
    (agent / "triggers" / "even.json").write_text(json.dumps({"cron": "* * * * * */2", "message": "tick"}))
    daemons()
    wait_for(lambda: started(agent), "start")
    fired = wait_for(lambda: [x for x in life(agent).splitlines() if "trigger: even fired" in x][3:] and
                     [x for x in life(agent).splitlines() if "trigger: even fired" in x], "four fires", 30)
    assert all(int(x[17:19]) % 2 == 0 for x in fired), fired  # never the odd second before


def test_automatic_stashing_never_stashes_a_stash_again(home, model, daemons):
    agent = configure(home / "agent", model, context_tokens=4_000)
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i} " + "z" * 400}
               for i in range(60)]
    (agent / "messages.jsonl").write_text("".join(json.dumps(m) + "\n" for m in history))
    daemons()
    # over budget still after the first stash, so it stashes again
    markers = wait_for(lambda: [c for c in contents(agent) if "[stash " in c][1:] and
                       [c for c in contents(agent) if "[stash " in c], "a second stash", 30)
    for marker in markers:  # each stash moved plain history, never an earlier stash's summary
        digest = marker.split("[stash ", 1)[1].split("]")[0]
        assert "[stash " not in (agent / "blobs" / digest).read_text()


def test_a_message_telegram_refuses_is_set_aside_and_the_rest_still_go(home, model, daemons):
    with FakeTelegram() as tg:
        tg.refuse_text = "<b"
        model.on("first", text_reply("a <b broken markup"))
        model.on("second", text_reply("plain words"))
        agent, _ = start_with_chat(home, model, tg, daemons)
        tg.push_text(chat_id=42, text="first")
        wait_for(answered(agent, "broken markup"), "the first answer")
        tg.push_text(chat_id=42, text="second")
        wait_for(lambda: "plain words" in tg.texts(), "the second reply, not held up")
        assert tg.texts() == ["plain words"]
        failed = list((agent / "outbox" / "failed").glob("*.json"))
        assert len(failed) == 1 and "a <b broken markup" in failed[0].read_text()
        assert "moved to outbox/failed/" in life(agent) and "HTTP 400" in life(agent)


def cut_call() -> Response:
    """A tool call cut mid-arguments by the output limit."""
    return sse([chunk(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "BASH", "arguments": '{"command": "ec'}}]),
                chunk(finish="length"), chunk(usage=usage(10, 4000), no_choices=True)])


def test_an_answer_cut_at_the_output_limit_three_times_waits_and_tells_the_operator(home, model, daemons):
    with FakeTelegram() as tg:
        model.on("write the long one", cut_call(), cut_call(), cut_call())
        agent, _ = start_with_chat(home, model, tg, daemons, max_tokens_limit=10_000)
        tg.push_text(chat_id=42, text="write the long one")
        told = wait_for(lambda: [t for t in tg.texts() if "output limit" in t], "the note to the operator")
        assert len(told) == 1 and "waiting for new input" in told[0]
        sizes = [r.body.get("max_tokens") for r in model.seen("write the long one")]
        assert sizes == [None, 8000, 10_000]
        assert not [m for m in messages(agent) if m["role"] == "tool"]  # the cut call never ran
        # the file changing without a new message is not new input: the turn is not asked again
        log = agent / "messages.jsonl"
        log.write_bytes(log.read_bytes())
        time.sleep(1)  # the watcher reports within 0.6 s: the loop has looked by now
        model.on("what now?", text_reply("nothing"))
        tg.push_text(chat_id=42, text="what now?")
        wait_for(lambda: "nothing" in tg.texts(), "the next message answered")
        sizes = [r.body.get("max_tokens") for r in model.seen("write the long one")]
        assert sizes == [None, 8000, 10_000]  # (seen: requests whose last message is that one)


def test_a_file_that_cannot_be_saved_does_not_stop_the_chat(home, model, daemons):
    with FakeTelegram() as tg:
        model.on("see attached", text_reply("Got your note, not the file."))
        model.on("still there?", text_reply("Yes."))
        agent, _ = start_with_chat(home, model, tg, daemons)
        (agent / "inbound").rmdir()
        (agent / "inbound").write_text("not a folder")  # every save in inbound/ fails
        tg.add_file("F1", "documents/file_1.txt", b"numbers")
        tg.push({"chat": {"id": 42}, "caption": "see attached",
                 "document": {"file_id": "F1", "file_name": "q3.txt"}})
        wait_for(lambda: "Got your note, not the file." in tg.texts(), "the answer to the file")
        tg.push_text(chat_id=42, text="still there?")
        wait_for(lambda: "Yes." in tg.texts(), "the chat goes on")
        assert "could not save a file" in life(agent)
