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


def shell_pattern(messages, folder):
    import re

    from bantam.config import Config
    from bantam.providers.local import known_commands
    from bantam.tools import ToolContext, make_toolbox
    cfg = Config(provider="local")
    tools = known_commands(make_toolbox(cfg.tools, ToolContext(cfg)).schemas(), messages, folder)
    shell = next(t for t in tools if t["function"]["name"] == "shell_exec")
    return re.compile(shell["function"]["parameters"]["properties"]["command"]["pattern"])


def test_a_command_names_only_what_the_request_or_the_folder_names(tmp_path):
    (tmp_path / "notes.txt").write_text("n\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.c").write_text("\n")
    pattern = shell_pattern([{"role": "user", "content": "How long is report.md?"}], tmp_path)
    allowed = ["ls", "ls -la src", "head -5 notes.txt", "cat notes.txt", "wc -l notes.txt", "cat src/main.c | wc -l",
               "ls && pwd", "echo long > notes.txt", "echo long > report.md", "touch report.md"]
    # report.md is not in the folder: a name to write, never one to read
    refused = ["echo 123", "ls docs", "cat hello.txt", "rm notes.txt", "wc -l &&", "echo >", "ls |",
               "cat notes.txt; rm -rf /", "cat $(whoami)", "echo -n123456789", "wc -l report.md",
               "cat report.md", "echo report.md"]
    assert [c for c in allowed if not pattern.match(c)] == []
    assert [c for c in refused if pattern.match(c)] == []


def test_a_command_quoted_in_backticks_is_allowed_as_written(tmp_path):
    pattern = shell_pattern([{"role": "user", "content": "Run `grep -c ok log.txt; echo $?` please"}], tmp_path)
    assert pattern.match("grep -c ok log.txt; echo $?") and not pattern.match("grep -c fail log.txt")


def test_asked_to_run_a_quoted_command_the_first_call_is_that_command(tmp_path):
    (tmp_path / "check.sh").write_text("exit 7\n")
    run = [{"role": "user", "content": "Execute `bash check.sh` and tell me the exit status."}]
    first = shell_pattern(run, tmp_path)
    assert first.match("bash check.sh") and not first.match("cat check.sh") and not first.match("ls")
    # after its result the model may look further, as in any turn
    later = shell_pattern(run + [{"role": "assistant", "content": ""}, {"role": "tool", "content": "exit: 7"}], tmp_path)
    assert later.match("bash check.sh") and later.match("cat check.sh")
    # a quoted name in a request that does not ask to run it is only one choice among the others
    asked = shell_pattern([{"role": "user", "content": "Where is `main` defined in check.sh?"}], tmp_path)
    assert asked.match("main") and asked.match("grep main check.sh")


def test_only_the_worked_example_nearest_the_request_is_shown():
    from bantam.config import Config
    from bantam.providers.local import examples
    from bantam.tools import ToolContext, make_toolbox
    cfg = Config(provider="local")
    tools = make_toolbox(cfg.tools, ToolContext(cfg)).schemas()

    def last_example(request):
        shown = examples(tools, [{"role": "system", "content": "S"}, {"role": "user", "content": request},
                                 {"role": "assistant", "content": "later turns do not reorder them"}])
        requests = [m["content"] for m in shown if m["role"] == "user" and "<tool_response>" not in m["content"]]
        assert len(requests) == 1
        return requests[0]

    assert last_example("Which files are in the build folder?") == "Which files are in the docs folder?"
    assert last_example("What does setup.cfg say?") == "What is in hello.txt?"  # like neither: the default
    assert examples([t for t in tools if t["function"]["name"] != "shell_exec"], []) == []


def test_an_answer_after_a_result_cites_it_within_its_first_words():
    from bantam.providers.local import CITE_WITHIN, grounded_answer
    request = {"role": "user", "content": "What number is in number.txt?"}
    result = {"role": "tool", "content": "42\n\nexit: 0"}
    grammar = grounded_answer([request, {"role": "assistant", "content": ""}, result], cite=True)
    first, facts = grammar.splitlines()[:2]
    assert first.count("(other sep") == CITE_WITHIN and " fact " in first
    assert facts == 'fact ::= "42" | "0"'  # words only the result has: not "number.txt", not "the"
    assert grounded_answer([request], cite=True) == grounded_answer([request])  # before a result: any text


def test_a_file_tools_path_is_one_the_request_or_the_folder_names(tmp_path):
    import re

    from bantam.config import Config
    from bantam.providers.local import known_commands
    from bantam.tools import ToolContext, make_toolbox
    (tmp_path / "notes.txt").write_text("n\n")
    cfg = Config(provider="local", tools=("shell_exec", "write_file", "read_file", "run_subagent"))
    tools = known_commands(make_toolbox(cfg.tools, ToolContext(cfg)).schemas(),
                           [{"role": "user", "content": "Save hi in greeting.txt"}], tmp_path)
    paths = {t["function"]["name"]: t["function"]["parameters"]["properties"].get("path", {}).get("pattern")
             for t in tools}
    for name in ("write_file", "read_file"):
        pattern = re.compile(paths[name])
        assert pattern.match("notes.txt")
        assert not pattern.match("/tmp/docs.md") and not pattern.match("../notes.txt")
    # greeting.txt, named by the request and not in the folder, can be written, not read
    assert re.match(paths["write_file"], "greeting.txt") and not re.match(paths["read_file"], "greeting.txt")
    assert paths["run_subagent"] is None  # no path argument: left as it is


def test_a_model_path_gguf_gets_the_aids_only_when_asked(tmp_path):
    # the same file as the bundled model, named by model_path=: to bantam a user's own GGUF
    from bantam.config import Config
    from bantam.providers.local import LocalProvider, bundled_model
    from bantam.tools import ToolContext, make_toolbox
    tools = make_toolbox(Config().tools, ToolContext(Config())).schemas()
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "What is in a.txt?"}]
    for values, aided in (({}, True), ({"model_path": str(bundled_model())}, False),
                          ({"model_path": str(bundled_model()), "local_aids": "on"}, True),
                          ({"local_aids": "off"}, False)):
        provider = LocalProvider(Config(provider="local", **values))
        assert (len(provider.chat(messages, tools)) > len(messages)) is aided, values  # the worked example
        assert (provider.commands, provider.grounded, provider.cite, provider.tool_first) == (aided,) * 4
