"""The bundled model on the offline evaluation set: every tool call it makes fits its schema."""
import pytest

from bantam.providers.local import available

pytestmark = pytest.mark.skipif(not available(), reason="the local extra is not installed")


@pytest.mark.slow
def test_every_tool_call_on_the_whole_set_is_valid(home):
    from bench.local_eval import evaluate, tasks
    results = evaluate()
    assert len(results) == len(tasks()) >= 20
    calls = sum(r["calls"] for r in results)
    assert calls >= len(results) // 2  # the model does use its tools (most requests need one)
    invalid = [(r["id"], r["trace"]) for r in results if r["valid_calls"] != r["calls"]]
    assert not invalid


@pytest.mark.slow
def test_a_plain_question_gets_no_forced_tool_call(home):
    from bench.local_eval import evaluate
    (result,) = evaluate(selected=[{"id": "chat", "kind": "chat", "files": {}, "prompt": "Say hello in French.",
                                    "expect": []}])
    assert result["calls"] == 0 and result["answer"].strip()


def test_the_grammars_for_every_request_parse_in_llama_cpp():
    # llama.cpp kills the process on a grammar it cannot parse; bantam checks each one first, and
    # must never build one that fails: quoted commands with regex and GBNF specials included.
    from bantam.config import Config
    from bantam.providers.local import LocalProvider, grounded_answer, known_commands, tool_grammar
    from bantam.tools import ToolContext, make_toolbox
    from bench.local_eval import tasks
    cfg = Config(provider="local")
    llama = LocalProvider(cfg).llama
    schemas = make_toolbox(cfg.tools, ToolContext(cfg)).schemas()
    hostile = 'Run `echo "a\\b" | grep [x]*` then `ls *.py (x) $HOME ^{}` and `a.b|c?`'
    for prompt in [t["prompt"] for t in tasks()] + [hostile]:
        for messages in ([{"role": "user", "content": prompt}],
                         [{"role": "user", "content": prompt}, {"role": "assistant", "content": ""},
                          {"role": "tool", "content": 'out "q" \\ é 42 `x` [y]\n\nexit: 0'}]):
            for required in (False, True):
                tool_grammar(known_commands(schemas, messages), required, grounded_answer(messages), llama=llama)
