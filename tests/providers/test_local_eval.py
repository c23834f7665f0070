"""The bundled model on the offline evaluation set: every tool call it makes fits its schema."""
import pytest

from bantam.providers.local import available

pytestmark = pytest.mark.skipif(not available(), reason="the local extra is not installed")


@pytest.mark.slow
def test_every_tool_call_on_one_task_of_each_kind_is_valid(home):
    # One task of each kind covers every grammar shape (list, read, count, command, write); the
    # whole set of 25 is the benchmark's ("valid tool calls" in bench/RESULTS.md, from
    # `bench/bench_local.py --eval-only`): run here, it was two thirds of the suite's CPU time.
    from bench.local_eval import evaluate, tasks
    sample = list({task["kind"]: task for task in reversed(tasks())}.values())
    assert len(sample) == len({task["kind"] for task in tasks()}) >= 5
    results = evaluate(selected=sample)
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


@pytest.mark.slow
def test_general_questions_are_answered_never_turned_into_commands(home):
    # The class of the question above: each asked from its own new, empty folder, whose name is in
    # the system prompt. Offered tools, the model ran `printf` or `cat` for most of these (18 of 24
    # over three folders) and for "Say hello in French." in 2 folders of 12; with none offered
    # (aids.Aids.answers), nothing it writes is a tool call, in the grammar or as text.
    from bench.local_eval import evaluate
    questions = ["Say hello in French.", "What is the capital of France?", "What is 2 + 2?",
                 "Translate good morning into Spanish.", "Write a haiku about autumn."]  # short answers
    results = evaluate(selected=[{"id": f"chat-{i}", "kind": "chat", "files": {}, "prompt": q, "expect": []}
                                 for i, q in enumerate(questions)])
    for question, result in zip(questions, results, strict=True):
        assert result["calls"] == 0 and not result["error"], (question, result["trace"], result["error"])
        assert result["answer"].strip() and "<tool_call>" not in result["answer"], (question, result["answer"])


def test_the_grammars_for_every_request_parse_in_llama_cpp(tmp_path):
    # llama.cpp kills the process on a grammar it cannot parse; bantam checks each one first, and
    # must never build one that fails: quoted commands with regex and GBNF specials included.
    from bantam.config import Config
    from bantam.providers.local import LocalProvider
    from bantam.providers.local_format import tool_grammar
    from bantam.tools import ToolContext, make_toolbox
    from bench.local_eval import tasks
    cfg = Config(provider="local")
    provider = LocalProvider(cfg)
    schemas = make_toolbox(cfg.tools, ToolContext(cfg)).schemas()
    (tmp_path / "a (b).txt").write_text("")
    hostile = 'Run `echo "a\\b" | grep [x]*` then `ls *.py (x) $HOME ^{}` and `a.b|c?`'
    for prompt in [t["prompt"] for t in tasks()] + [hostile]:
        for messages in ([{"role": "user", "content": prompt}],
                         [{"role": "user", "content": prompt}, {"role": "assistant", "content": ""},
                          {"role": "tool", "content": 'out "q" \\ é 42 `x` [y]\n\nexit: 0'}]):
            for required in (False, True):
                for shown in (False, True):
                    tools = provider.aids.tools(schemas, messages, tmp_path, shown=shown)
                    tool_grammar(tools, required, provider.aids.answer(messages), llama=provider.llama)


def test_a_model_path_gguf_gets_the_aids_only_when_asked(tmp_path):
    # the same file as the bundled model, named by model_path=: to bantam a user's own GGUF
    from bantam.config import Config
    from bantam.providers.aids import NO_AIDS
    from bantam.providers.local import LocalProvider, bundled_model
    from bantam.tools import ToolContext, make_toolbox
    tools = make_toolbox(Config().tools, ToolContext(Config())).schemas()
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "What is in a.txt?"}]
    for values, aided in (({}, True), ({"model_path": str(bundled_model())}, False),
                          ({"model_path": str(bundled_model()), "local_aids": "smollm2-135m"}, True),
                          ({"local_aids": "off"}, False)):
        provider = LocalProvider(Config(provider="local", **values))
        assert (len(provider.chat(messages, tools)) > len(messages)) is aided, values  # the worked example
        assert (provider.aids is not NO_AIDS) is aided, values
