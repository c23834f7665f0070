"""The bundled model on the offline evaluation set: every tool call it makes fits its schema."""
import pytest

from bantam.providers.local import available

pytestmark = [pytest.mark.skipif(not available(), reason="the local extra is not installed"), pytest.mark.slow]


def test_every_tool_call_on_the_whole_set_is_valid(home):
    from bench.local_eval import evaluate, tasks
    results = evaluate()
    assert len(results) == len(tasks()) >= 20
    calls = sum(r["calls"] for r in results)
    assert calls >= len(results) // 2  # the model does use its tools (most requests need one)
    invalid = [(r["id"], r["trace"]) for r in results if r["valid_calls"] != r["calls"]]
    assert not invalid


def test_a_plain_question_gets_no_forced_tool_call(home):
    from bench.local_eval import evaluate
    (result,) = evaluate(selected=[{"id": "chat", "kind": "chat", "files": {}, "prompt": "Say hello in French.",
                                    "expect": []}])
    assert result["calls"] == 0 and result["answer"].strip()
