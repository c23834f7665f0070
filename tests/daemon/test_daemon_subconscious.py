"""Two directories in one command: the primary and its subconscious, each in its own process,
talking only through the trigger-file bus; a killed child is started again."""
import json
import os
import signal

from tests.fakes.openai_server import text_reply, tool_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.daemon.test_daemon import (FAST, configure, contents, daemons, life, model, wait_for,  # noqa: F401
                                      watch_looked)


def test_a_subconscious_nudge_reaches_the_primary(home, model, daemons):
    with FakeTelegram() as tg:
        agent = configure(home / "agent", model, telegram_token=tg.token, telegram_chat_id="42",
                          telegram_api_base=tg.url)
        # some history, so that the primary's next change brings more than ten new lines
        history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"earlier {i}"}
                   for i in range(12)]
        (agent / "messages.jsonl").write_text("".join(json.dumps(m) + "\n" for m in history))
        sub = home / "subconscious"
        sub.mkdir()  # its own config; SOUL.md and the seeded triggers come from the skeleton
        (sub / "config.json").write_text(json.dumps({**FAST, "api_base": model.url,
                                                     "opt": ["tools/nudge", "tools/stash_messages"]}))
        model.on("[trigger primary]", tool_reply("NUDGE", {"name": "focus",
                                                           "message": "Finish the report first."}))
        model.on("nudge written", tool_reply("PRUNE", {"start": 1, "end": 4}, call_id="call_p"))
        model.on("[trigger subconscious-focus]", text_reply("Right, the report comes first."))
        supervisor = daemons("agent", "subconscious", env={"BANTAM_DAEMON_RESPAWN_S": "0.3"})
        # the watch remembers the primary's stream at its first look and fires on the next change.
        # The primary's own start message is that change only when the subconscious looked first,
        # which a loaded machine does not promise (CI once saw the start land first, and nothing
        # fired): once it has looked, the operator writes, and the primary's answer changes it
        trigger = sub / "triggers" / "primary.json"
        wait_for(lambda: watch_looked(trigger), "the subconscious's first look at the primary's stream")
        tg.push_text(chat_id=42, text="how is the report going?")

        wait_for(lambda: model.seen("[trigger subconscious-focus] Finish the report first."),
                 "the nudge in the primary", 60)
        wait_for(lambda: "reply: (muted) Right, the report comes first." in life(agent), "the answer")
        assert "[subconscious-focus] Finish the report first." in tg.texts()  # shown to the operator
        primary_seen = model.seen("[trigger primary]")[0].body["messages"][-2]["content"]
        assert "earlier 11" in primary_seen  # the new lines of the primary's stream
        assert sorted(p.name for p in (sub / "triggers").glob("*.json")) == ["primary.json", "selfwipe.json"]
        assert (sub / "tools" / "nudge.py").is_file() and (sub / "tools" / "stash_messages.py").is_file()
        assert not (sub / "triggers" / "heartbeat.json").exists()
        assert "<subconscious>" in model.seen("[trigger subconscious-focus]")[0].body["messages"][0]["content"]
        assert not any("NUDGE" in c for c in contents(agent))  # nothing written into the primary's stream
        # PRUNE: a one-shot trigger carrying a directive; the primary collapsed lines 1-4 (and,
        # as the seed says, the unanswered nudge pair before the prune landed)
        stash = wait_for(lambda: [c for c in contents(agent) if "[stash " in c], "the prune")[0]
        assert "lines 1-4 (4 messages)" in stash and contents(agent)[0] == stash
        assert contents(agent)[1] == "earlier 4"
        assert "[subconscious-prune-" in " ".join(tg.texts())

        child = int((sub / ".lock").read_text())
        os.kill(child, signal.SIGKILL)
        wait_for(lambda: "subconscious (pid" in life(agent), "the death in the primary's LIFE")
        wait_for(lambda: life(sub).count(" start: ") == 2, "the restarted subconscious")
        assert f"subconscious (pid {child}) died with exit status -9; restarting it in 0.3 s" in life(agent)
        assert supervisor.stop() == 0
        assert " stop: " in life(agent) and life(sub).count(" stop: ") == 1


def test_the_seeded_selfwipe_stashes_a_long_subconscious_conversation(home, model, daemons):
    sub = home / "subconscious"
    sub.mkdir()
    (sub / "config.json").write_text(json.dumps({**FAST, "api_base": model.url}))
    old = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"review {i}"} for i in range(24)]
    (sub / "messages.jsonl").write_text("".join(json.dumps(m) + "\n" for m in old))
    daemons("subconscious")
    pointer = wait_for(lambda: [c for c in contents(sub) if "[stash " in c], "the self-wipe")[0]
    assert contents(sub)[0] == pointer and "(26 messages)" in pointer  # the 24 lines, the banner and its reply
    assert not any(c.startswith("review") for c in contents(sub))
    # the stash's line is written once the stash is done, just after the pointer: wait for it too
    wait_for(lambda: "[trigger selfwipe] STASH_MESSAGE: all" in life(sub), "the stash's line in LIFE.md")
