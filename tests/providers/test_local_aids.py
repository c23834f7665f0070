"""The small-model aids on plain data: profiles, examples, command and path patterns, grounded
answers, and the session's workspace as the only folder they read. No llama.cpp is needed."""
import re
import threading

import pytest

from bantam.config import Config, load
from bantam.errors import ConfigError
from bantam.providers import aids
from bantam.providers.aids import NO_AIDS, Aids, profiles, resolve, shaping
from bantam.providers.local_format import ANY_ANSWER
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import write_cfg

BUNDLED = "smollm2-135m"
TOOLS = ("shell_exec", "write_file", "read_file", "run_subagent")


def schemas(tools=TOOLS):
    cfg = Config(provider="local", tools=tools)
    return make_toolbox(cfg.tools, ToolContext(cfg)).schemas()


def bundled():
    return Aids(profiles()[BUNDLED])


def pattern_of(tools, name="shell_exec", key="command"):
    tool = next(t for t in tools if t["function"]["name"] == name)
    found = tool["function"]["parameters"]["properties"].get(key, {}).get("pattern")
    return re.compile(found) if found else None


def shell_pattern(messages, folder):
    return pattern_of(bundled().tools(schemas(), messages, folder))


def ask(text):
    return [{"role": "user", "content": text}]


def test_every_bundled_profile_is_valid_data():
    found = profiles()
    assert BUNDLED in found
    for name, profile in found.items():
        assert profile.name == name and profile.about
        assert set(profile.makers) <= set(profile.programs)
        re.compile(profile.machine_words), re.compile(profile.run_words)
        for exchange in profile.exchanges:
            assert set(exchange) == {"request", "steps", "answer"} and exchange["steps"]
            for tool, arguments, result in exchange["steps"]:
                assert isinstance(tool, str) and isinstance(arguments, dict) and isinstance(result, str)


def test_a_misspelt_field_in_the_data_is_an_error_not_an_aid_silently_off():
    with pytest.raises(ValueError, match="unknown profile fields.*'exampel'"):
        aids._fields({"exampel": True}, {"example"})


def test_local_aids_chooses_the_profile(tmp_path):
    bundled_file = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    other = tmp_path / "qwen2.5-7b-instruct-q4_k_m.gguf"
    assert resolve("auto", bundled_file, own_model=False).profile.name == BUNDLED
    assert resolve("auto", bundled_file, own_model=True) is NO_AIDS   # a model_path= GGUF: none
    assert resolve("auto", other, own_model=False) is NO_AIDS         # no profile for that model
    assert resolve("off", bundled_file, own_model=False) is NO_AIDS
    assert resolve(BUNDLED, other, own_model=True).profile.name == BUNDLED  # named: for any model
    with pytest.raises(ConfigError, match=f"local_aids: no profile 'on' .*{BUNDLED}"):
        resolve("on", other, own_model=True)


def test_the_old_aid_keys_are_a_clear_error_naming_local_aids(home):
    write_cfg(home, local_example="false")
    with pytest.raises(ConfigError, match=r"\.bantam\.cfg:1: local_example was replaced by local_aids="):
        load(directory=home, environ={})
    assert load({"local_aids": BUNDLED}, directory=home / "work", environ={}).local_aids == BUNDLED


def test_without_aids_nothing_changes():
    tools, messages = schemas(), ask("What is in notes.txt?")
    assert NO_AIDS.tools(tools, messages, None) is tools
    assert NO_AIDS.examples(tools, messages) == [] and not NO_AIDS.call_first(messages)
    assert NO_AIDS.answer(messages + [{"role": "tool", "content": "42"}]) == ANY_ANSWER


def test_the_aids_read_the_sessions_workspace_never_the_process_folder(tmp_path, monkeypatch):
    # Two sessions side by side in one process, each in its own workspace, the process elsewhere:
    # each one's commands may name its own files, neither the other's nor the process folder's.
    ours, theirs, process = tmp_path / "ours", tmp_path / "theirs", tmp_path / "process"
    for folder, name in ((ours, "ours.txt"), (theirs, "theirs.txt"), (process, "cwd.txt")):
        folder.mkdir()
        (folder / name).write_text("x\n")
    monkeypatch.chdir(process)
    messages = ask("Show me the file")
    found = {}

    def session(folder):
        found[folder.name] = shell_pattern(messages, folder)
    threads = [threading.Thread(target=session, args=(f,)) for f in (ours, theirs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found["ours"].match("cat ours.txt") and not found["ours"].match("cat theirs.txt")
    assert found["theirs"].match("cat theirs.txt") and not found["theirs"].match("cat ours.txt")
    assert not any(p.match("cat cwd.txt") for p in found.values())
    # no workspace: no folder names at all, only the request's words
    alone = shell_pattern(messages, None)
    assert alone.match("cat the") and not alone.match("cat cwd.txt")


def test_the_prompt_prints_a_few_of_a_big_folders_names_the_grammar_allows_them_all(tmp_path):
    limit = profiles()[BUNDLED].names_shown
    for i in range(limit * 2):
        (tmp_path / f"f{i:02}.txt").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.txt").write_text("")
    last, unshown = f"f{limit * 2 - 1:02}.txt", f"f{limit:02}.txt"
    messages = ask(f"What is in {last}?")
    allowed = shell_pattern(messages, tmp_path)
    shown = pattern_of(bundled().tools(schemas(), messages, tmp_path, shown=True))
    assert allowed.match(f"cat {unshown}") and allowed.match("cat sub/deep.txt")
    assert allowed.match(f"cat {last}") and shown.match("cat f00.txt")
    assert not shown.match(f"cat {unshown}") and not shown.match("cat sub/deep.txt")
    assert not shown.match("echo x > f00.txt") or allowed.match("echo x > f00.txt")  # the same rules
    assert shaping.shown(["a", "d/x", "b"], 2) == ["a", "b"]  # the folder's own names first
    assert shaping.shown(["a", "d/x"], 5) == ["a", "d/x"]     # all, in order, when they fit


def test_a_command_names_only_what_the_request_or_the_folder_names(tmp_path):
    (tmp_path / "notes.txt").write_text("n\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.c").write_text("\n")
    pattern = shell_pattern(ask("How long is report.md?"), tmp_path)
    allowed = ["ls", "ls -la src", "head -5 notes.txt", "cat notes.txt", "wc -l notes.txt", "cat src/main.c | wc -l",
               "ls && pwd", "echo long > notes.txt", "echo long > report.md", "touch report.md"]
    # report.md is not in the folder: a name to write, never one to read
    refused = ["echo 123", "ls docs", "cat hello.txt", "rm notes.txt", "wc -l &&", "echo >", "ls |",
               "cat notes.txt; rm -rf /", "cat $(whoami)", "echo -n123456789", "wc -l report.md",
               "cat report.md", "echo report.md"]
    assert [c for c in allowed if not pattern.match(c)] == []
    assert [c for c in refused if pattern.match(c)] == []


def test_a_command_quoted_in_backticks_is_allowed_as_written(tmp_path):
    pattern = shell_pattern(ask("Run `grep -c ok log.txt; echo $?` please"), tmp_path)
    assert pattern.match("grep -c ok log.txt; echo $?") and not pattern.match("grep -c fail log.txt")


def test_asked_to_run_a_quoted_command_the_first_call_is_that_command(tmp_path):
    (tmp_path / "check.sh").write_text("exit 7\n")
    run = ask("Execute `bash check.sh` and tell me the exit status.")
    first = shell_pattern(run, tmp_path)
    assert first.match("bash check.sh") and not first.match("cat check.sh") and not first.match("ls")
    # after its result the model may look further, as in any turn
    later = shell_pattern(run + [{"role": "assistant", "content": ""}, {"role": "tool", "content": "exit: 7"}], tmp_path)
    assert later.match("bash check.sh") and later.match("cat check.sh")
    # a quoted name in a request that does not ask to run it is only one choice among the others
    asked = shell_pattern(ask("Where is `main` defined in check.sh?"), tmp_path)
    assert asked.match("main") and asked.match("grep main check.sh")


def test_a_file_tools_path_is_one_the_request_or_the_folder_names(tmp_path):
    (tmp_path / "notes.txt").write_text("n\n")
    tools = bundled().tools(schemas(), ask("Save hi in greeting.txt"), tmp_path)
    for name in ("write_file", "read_file"):
        pattern = pattern_of(tools, name, "path")
        assert pattern.match("notes.txt")
        assert not pattern.match("/tmp/docs.md") and not pattern.match("../notes.txt")
    # greeting.txt, named by the request and not in the folder, can be written, not read
    assert pattern_of(tools, "write_file", "path").match("greeting.txt")
    assert not pattern_of(tools, "read_file", "path").match("greeting.txt")
    assert pattern_of(tools, "run_subagent", "path") is None  # no path argument: left as it is


def test_only_the_worked_example_nearest_the_request_is_shown():
    tools = schemas()

    def last_example(request):
        shown = bundled().examples(tools, [{"role": "system", "content": "S"}, {"role": "user", "content": request},
                                           {"role": "assistant", "content": "later turns do not reorder them"}])
        requests = [m["content"] for m in shown if m["role"] == "user" and "<tool_response>" not in m["content"]]
        assert len(requests) == 1
        return requests[0]

    assert last_example("Which files are in the build folder?") == "Which files are in the docs folder?"
    assert last_example("What does setup.cfg say?") == "What is in hello.txt?"  # like neither: the default
    assert bundled().examples([t for t in tools if t["function"]["name"] != "shell_exec"], []) == []
    assert Aids(profiles()[BUNDLED].but(example=False)).examples(tools, ask("What is in a.txt?")) == []


def test_a_tool_call_comes_first_only_when_the_request_needs_the_machine():
    assert bundled().call_first(ask("What is in notes.txt?")) and bundled().call_first(ask("list the files"))
    assert not bundled().call_first(ask("Say hello in French."))
    assert not bundled().call_first(ask("notes.txt") + [{"role": "tool", "content": "x"}])  # not a turn's start
    assert not Aids(profiles()[BUNDLED].but(call_first=False)).call_first(ask("What is in notes.txt?"))


def test_an_answer_after_a_result_cites_it_within_its_first_words():
    profile = profiles()[BUNDLED]
    request, result = ask("What number is in number.txt?"), {"role": "tool", "content": "42\n\nexit: 0"}
    after = request + [{"role": "assistant", "content": ""}, result]
    first, facts = bundled().answer(after).splitlines()[:2]
    assert first.count("(other sep") == profile.cite_within and " fact " in first
    assert facts == 'fact ::= "42" | "0"'  # words only the result has: not "number.txt", not "the"
    assert bundled().answer(request) == ANY_ANSWER  # before a result: any text
    uncited = Aids(profile.but(cite=False)).answer(after)
    assert "fact" not in uncited and '"42"' in uncited
    assert Aids(profile.but(grounded=False)).answer(after) == ANY_ANSWER



def test_the_printed_tools_are_the_same_for_every_request_in_a_folder(tmp_path):
    # They are part of the prompt's fixed prefix, whose saved state serves every request in the
    # folder: with the request's words printed in them, each new question paid a cold read of the
    # whole prefix (1,789 tokens in the repository root) and left a 31.6 MB state of its own.
    for i in range(40):
        (tmp_path / f"f{i:02}.txt").write_text("")
    requests = ["What is in f31.txt?", "Run `wc -l f05.txt` and tell me the count.", "List the files here.",
                "Write hello to new.txt.", "Which files mention bantam?"]
    printed = [bundled().tools(schemas(), ask(r), tmp_path, shown=True) for r in requests]
    assert all(p == printed[0] for p in printed[1:])
    # the grammar still takes each request's own words and quoted command
    assert shell_pattern(ask(requests[0]), tmp_path).match("cat f31.txt")
    assert shell_pattern(ask(requests[1]), tmp_path).match("wc -l f05.txt")
    assert not pattern_of(printed[0]).match("cat new.txt")


def test_a_worked_exchange_of_several_calls_is_shown_call_by_call_and_only_with_its_tools_offered():
    steps = [["shell_exec", {"command": "cat a.txt"}, "x\n\n\nexit: 0"],
             ["write_file", {"path": "b.txt", "content": "x\n"}, "wrote 2 bytes to b.txt"]]
    profile = profiles()[BUNDLED].but(exchanges=({"request": "Copy a.txt to b.txt.", "steps": steps, "answer": "Done."},))
    shown = Aids(profile).examples(schemas(), [{"role": "system", "content": "S"}, *ask("copy it")])
    assert [m["role"] for m in shown] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    calls = [m["tool_calls"][0] for m in shown if m.get("tool_calls")]
    assert [c["function"]["name"] for c in calls] == ["shell_exec", "write_file"]
    assert [m["tool_call_id"] for m in shown if m["role"] == "tool"] == [c["id"] for c in calls]
    assert len({c["id"] for c in calls}) == 2 and shown[-1]["content"] == "Done."
    assert Aids(profile).examples(schemas(("shell_exec",)), ask("copy it")) == []  # write_file not offered


def test_a_command_that_printed_nothing_says_so_to_a_model_whose_profile_marks_it():
    history = [{"role": "user", "content": "go"}, {"role": "tool", "tool_call_id": "c", "content": "\n\nexit: 0"},
               {"role": "tool", "tool_call_id": "d", "content": "hi\n\n\nexit: 0"}]
    marked = Aids(profiles()["qwen2.5-coder"].but(mark_empty=True)).shown(history)
    assert [m["content"] for m in marked[1:]] == [aids.EMPTY_OUTPUT + "\n\nexit: 0", "hi\n\n\nexit: 0"]
    assert history[1]["content"] == "\n\nexit: 0"  # the conversation keeps what the tool gave
    assert bundled().shown(history) == history  # a profile without the mark: unchanged
