"""A general question to the bundled model is answered, not turned into a command: the aids'
decision on plain data, no llama.cpp needed (the real model's check is in test_local_eval.py).

The 135M model, offered tools, copied the worked tool call for 18 of 24 general questions
(`printf` for "What is the capital of France?"), and "Say hello in French." went either way by
the name of the folder in the system prompt; with no tools it answered all 24."""
import re

import pytest

from bantam.config import Config
from bantam.providers.aids import NO_AIDS, Aids, profiles
from bantam.tools import ToolContext, make_toolbox
from bench.local_eval import tasks

pytestmark = pytest.mark.quick

BUNDLED = "smollm2-135m"
GENERAL = ["Say hello in French.", "What is the capital of France?", "Tell me a joke.", "What is 2 + 2?",
           "Explain what a linked list is.", "Translate good morning into Spanish.", "Who wrote Hamlet?",
           "Write a haiku about autumn.", "Give me a list of three fruits.", "What does e.g. mean?", "Thanks!"]
# Needs the machine: a file, a path, a quoted command, a request to run, list or count.
MACHINE = ["What is in notes.txt?", "Which files are in the src folder?", "Run `uname -a`.",
           "What is in docs/intro.md?", "List what is in docs.", "Count the lines in a.txt.",
           "Run the tests and tell me if they pass."]
# Speaks of this machine or project without naming a file: the model decides, with its tools.
ABOUT_HERE = ["What time is it?", "Which Python version is installed?", "What's in here?",
              "What does this project do?", "Fix the failing test.", "What is the current git branch?",
              "How much free disk space is there?", "What does pwd print?", "How many lines does a sonnet have?"]


def schemas():
    cfg = Config(provider="local")
    return make_toolbox(cfg.tools, ToolContext(cfg)).schemas()


def bundled(**switches):
    return Aids(profiles()[BUNDLED].but(**switches))


def ask(text):
    return [{"role": "system", "content": "S"}, {"role": "user", "content": text}]


@pytest.mark.parametrize("question", GENERAL)
def test_a_general_question_is_offered_no_tools_and_no_call_is_forced(question, tmp_path):
    (tmp_path / "notes.txt").write_text("x\n")  # a folder with files in it changes nothing
    aids, messages = bundled(), ask(question)
    assert aids.answers(messages) and not aids.call_first(messages)
    # neither in the prompt (no tool list, so no worked example) nor in the grammar
    assert aids.tools(schemas(), messages, tmp_path, shown=True) == []
    assert aids.tools(schemas(), messages, tmp_path) == []
    assert aids.tools(schemas(), messages, None) == []


@pytest.mark.parametrize("request_", MACHINE)
def test_a_request_that_needs_the_machine_gets_its_tools_and_a_call_first(request_, tmp_path):
    aids, messages = bundled(), ask(request_)
    assert aids.call_first(messages) and not aids.answers(messages)
    assert {t["function"]["name"] for t in aids.tools(schemas(), messages, tmp_path)} == \
        {t["function"]["name"] for t in schemas()}


@pytest.mark.parametrize("question", ABOUT_HERE)
def test_a_question_about_this_machine_keeps_its_tools_and_the_model_decides(question, tmp_path):
    aids, messages = bundled(), ask(question)
    assert not aids.answers(messages) and not aids.call_first(messages)
    assert len(aids.tools(schemas(), messages, tmp_path)) == len(schemas())


def test_no_task_of_the_evaluation_set_counts_as_general():
    # every task needs the machine: the aids' new decision leaves the benchmark's requests as they were
    for task in tasks():
        messages = ask(task["prompt"])
        assert bundled().call_first(messages) and not bundled().answers(messages), task["id"]


def test_a_conversation_that_used_a_tool_keeps_its_tools_for_a_general_question():
    # With no tool list the model's earlier calls in the history would be copied as plain text,
    # with no grammar to hold them: later in such a conversation the model decides, as before.
    call = {"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": '{"command": "ls"}'}}
    messages = ask("List the files.") + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt\n\nexit: 0"},
        {"role": "assistant", "content": "a.txt"},
        {"role": "user", "content": "Say hello in French."}]
    assert not bundled().answers(messages)
    assert len(bundled().tools(schemas(), messages, None)) == len(schemas())
    # a later general question in a conversation of answers only is still answered
    chat = ask("Who wrote Hamlet?") + [{"role": "assistant", "content": "Shakespeare."},
                                        {"role": "user", "content": "Say hello in French."}]
    assert bundled().answers(chat) and bundled().tools(schemas(), chat, None) == []


def test_only_a_request_at_the_start_of_a_turn_is_answered_without_tools():
    after_a_result = ask("Say hello in French.") + [{"role": "tool", "content": "x"}]
    assert not bundled().answers(after_a_result) and not bundled().answers([])
    parts = [{"role": "user", "content": [{"type": "text", "text": "Say hello in French."}]}]
    assert not bundled().answers(parts)  # content parts: not read, the model decides


def test_the_switch_and_no_aids_leave_the_tools_as_they_are():
    tools, messages = schemas(), ask("Say hello in French.")
    assert not bundled(answer_first=False).answers(messages)
    assert len(bundled(answer_first=False).tools(tools, messages, None)) == len(tools)
    assert not NO_AIDS.answers(messages) and NO_AIDS.tools(tools, messages, None) is tools


def test_the_profiles_words_are_valid_patterns():
    for profile in profiles().values():
        re.compile(profile.local_words), re.compile(profile.machine_words)


@pytest.mark.parametrize("question", ["What is in Makefile?", "Summarize LICENSE.", "What does Dockerfile do?"])
def test_a_question_naming_something_in_the_folder_keeps_its_tools(question, tmp_path):
    # An extensionless file name slips past the patterns: the folder's names catch it, so the
    # model can read the file instead of answering from what it knows.
    for name in ("Makefile", "LICENSE", "Dockerfile"):
        (tmp_path / name).write_text("x\n")
    aids, messages = bundled(), ask(question)
    assert aids.answers(messages) and not aids.answers(messages, tmp_path)  # the folder decides
    assert len(aids.tools(schemas(), messages, tmp_path)) == len(schemas())
    assert aids.tools(schemas(), messages, tmp_path / "elsewhere") == []  # not there: a general question
