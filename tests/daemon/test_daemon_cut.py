"""The daemon's answers cut at the output limit (issue 32): seed 003 asks three times, doubling;
an answer still cut is sent marked as cut, and the note names the limit it gave up at."""
from __future__ import annotations

from tests.daemon.test_daemon import daemons, model, wait_for  # noqa: F401, F811 (fixtures)
from tests.daemon.test_daemon_outages import start_with_chat
from tests.fakes.openai_server import chunk, sse, usage
from tests.fakes.telegram_server import FakeTelegram


def cut_text(text: str, completion: int):
    return sse([chunk(text), chunk(finish="length"), chunk(usage=usage(10, completion), no_choices=True)])


def test_a_text_cut_three_times_is_sent_marked_as_cut_at_the_limit_reached(home, model, daemons):  # noqa: F811
    with FakeTelegram() as tg:
        model.on("write the long one", *[cut_text("The beginning of a long", 512) for _ in range(3)])
        start_with_chat(home, model, tg, daemons)
        tg.push_text(chat_id=42, text="write the long one")
        sent = wait_for(lambda: [t for t in tg.texts() if "The beginning" in t], "the cut answer")
        assert sent == ["The beginning of a long\n\n[answer cut at 2048 tokens]"]
        assert [r.body.get("max_tokens") for r in model.seen("write the long one")] == [None, 1024, 2048]


def test_config_json_max_tokens_is_the_daemons_budget_and_is_doubled(home, model, daemons):  # noqa: F811
    with FakeTelegram() as tg:
        model.on("write the long one", *[cut_text("Part", 100) for _ in range(3)])
        start_with_chat(home, model, tg, daemons, request={"max_tokens": 100}, max_tokens_limit=300)
        tg.push_text(chat_id=42, text="write the long one")
        wait_for(lambda: "Part\n\n[answer cut at 300 tokens]" in tg.texts(), "the cut answer, marked")
        sizes = [r.body.get("max_tokens") for r in model.seen("write the long one")]
        assert sizes == [100, 200, 300]  # twice what was asked each time, up to max_tokens_limit
