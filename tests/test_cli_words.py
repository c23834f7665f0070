"""Issue 32, the command line's words: a subcommand is found wherever the global options stand,
a near-miss of one is refused (no request), seed 004's handler needs no word, an unknown option
costs one line, and the completion scripts are made from the real tables."""
import contextlib
import importlib
import io
import re
import subprocess

import pytest

from bantam.options import COMMON, SUBCOMMANDS
from tests.conftest import bantam_here, base_cfg, write_cfg
from tests.fakes.openai_server import text_reply


@pytest.fixture
def cfg(home, server):
    write_cfg(home, **base_cfg(server))
    return home


# --- a global option before the word -------------------------------------------------------

def test_global_options_before_config_reach_it(cfg, server):
    r = bantam_here("--model", "fast", "--yolo", "--set", "temperature=0.3", "config", cwd=cfg)
    assert r.returncode == 0, r.stderr
    assert "model = fast  (command line)" in r.stdout and "sandbox = off  (command line)" in r.stdout
    assert "temperature = 0.3  (command line)" in r.stdout
    assert not server.requests


@pytest.mark.parametrize("before", [["--yolo"], ["--model", "fast"], ["--model=fast"], ["--mod", "fast"],
                                    ["--set", "temperature=0.1", "--endpoint", "http://127.0.0.1:9"]])
@pytest.mark.parametrize("word", ["web", "run", "batch", "daemon", "config"])
def test_a_subcommand_after_global_options_is_that_subcommand(cfg, server, before, word):
    r = bantam_here(*before, word, "--help", cwd=cfg)
    assert r.returncode == 0 and r.stdout.startswith(f"usage: bantam {word}"), r.stdout + r.stderr
    assert not server.requests


def test_run_gets_the_options_before_it(cfg, server):
    r = bantam_here("--yolo", "run", cwd=cfg)  # it reached `bantam run`, which wants a goal
    assert r.returncode == 2 and r.stderr == "bantam: bantam run needs a GOAL (or --goal-file FILE)\n"
    assert not server.requests


def test_undo_gets_thread_and_sessions_says_what_does_not_apply(cfg, server):
    after = bantam_here("undo", "--list", "--thread", "nosuch", cwd=cfg)
    before = bantam_here("--thread", "nosuch", "undo", "--list", cwd=cfg)
    assert (before.returncode, before.stdout, before.stderr) == (after.returncode, after.stdout, after.stderr)
    for args, flag in ((["--yolo", "sessions"], "--yolo"), (["--model", "m", "sessions"], "--model"),
                       (["-p", "hi", "web"], "--prompt"), (["--json", "config"], "--json")):
        r = bantam_here(*args, cwd=cfg)
        word = args[-1]
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == f"bantam: {flag} does not apply to `bantam {word}`; see bantam {word} --help\n"
    assert not server.requests


def test_an_option_value_is_not_a_subcommand(cfg, server):
    server.add(text_reply("an answer"))
    r = bantam_here("-p", "web", cwd=cfg)  # `web` is -p's value: the prompt
    assert r.returncode == 0 and r.stdout == "an answer\n", r.stderr
    assert server.chat_requests()[0].body["messages"][-1]["content"] == "web"


# --- near misses are refused; real one-word prompts and files are not ----------------------

@pytest.mark.parametrize("args,meant", [(["confg"], "config"), (["--yolo", "confg"], "config"),
                                        (["sesions"], "sessions"), (["mpc"], "mcp"), (["udno"], "undo"),
                                        (["--model", "fast", "model"], "models"), (["Web"], "web")])
def test_a_near_miss_of_a_subcommand_asks_and_sends_nothing(cfg, server, args, meant):
    server.add(text_reply("must not be asked"))
    r = bantam_here(*args, cwd=cfg, input="")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and f"did you mean `bantam {meant}`?" in r.stderr, r.stderr
    assert not server.requests


@pytest.mark.parametrize("word", ["hello", "patch", "explain", "review"])
def test_a_one_word_prompt_is_still_a_prompt(cfg, server, word):
    server.add(text_reply("an answer"))
    r = bantam_here(word, cwd=cfg)
    assert r.returncode == 0 and r.stdout == "an answer\n", r.stderr
    assert server.chat_requests()[0].body["messages"][-1]["content"] == word


def test_files_named_like_words(cfg, server):
    (cfg / "confg").write_text("the prompt in a file")
    (cfg / "review").write_text("!echo from-the-file")
    (cfg / "config").write_text("never read: config is the subcommand")
    server.add(text_reply("an answer"))
    r = bantam_here("confg", cwd=cfg)  # an existing file is a prompt file, however it is named
    assert r.returncode == 0 and server.chat_requests()[0].body["messages"][-1]["content"] == "the prompt in a file"
    r = bantam_here("./review", cwd=cfg)  # named as a path, a command file runs
    assert r.returncode == 0 and r.stdout == "from-the-file\n", r.stderr
    r = bantam_here("config", cwd=cfg)
    assert r.returncode == 0 and "model = test-model" in r.stdout
    assert len(server.chat_requests()) == 1


# --- seed 004: the binary is the queue handler when ACTOR_RESULT_TOPIC is set ---------------

def test_actor_result_topic_makes_bantam_the_handler(cfg, server):
    server.add(text_reply("the result"), text_reply("plain"), text_reply("prompted"))
    r = bantam_here(cwd=cfg, input="a task", env={"ACTOR_RESULT_TOPIC": "ai_result"})
    assert r.returncode == 0 and r.stdout == "ai_result\nthe result", r.stderr
    assert server.chat_requests()[0].body["messages"][-1]["content"] == "a task"
    r = bantam_here(cwd=cfg, input="a task")  # without the variable: the prompt from the pipe
    assert r.returncode == 0 and r.stdout == "plain\n"
    r = bantam_here("-p", "go", cwd=cfg, env={"ACTOR_RESULT_TOPIC": "ai_result"})  # a prompt wins
    assert r.returncode == 0 and r.stdout == "prompted\n"
    r = bantam_here(cwd=cfg, env={"ACTOR_RESULT_TOPIC": "ai_result"})  # no task: one line, no request
    assert r.returncode == 2 and r.stderr == "bantam: bantam handler: no task on standard input\n"
    assert len(server.chat_requests()) == 3


# --- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--frobnicate"], ["--frobnicate", "web"], ["-p"], ["--model"]])
def test_a_usage_error_is_one_line(home, args):
    r = bantam_here(*args, cwd=home)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("bantam: ")
    assert re.search(r"see bantam( \w+)? --help$", r.stderr), r.stderr


# --- the table agrees with the subcommands and with the help --------------------------------

def _help(word: str) -> str:
    module, _, function = SUBCOMMANDS[word].entry.partition(":")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        getattr(importlib.import_module(module), function)(["--help"])
    return out.getvalue()


@pytest.mark.parametrize("word", [w for w, spec in SUBCOMMANDS.items() if spec.entry])
def test_the_table_says_what_each_subcommand_takes(word):
    """What the table forwards is what the subcommand's own parser accepts, and its actions
    (completed by the scripts) are the subcommand's."""
    text = _help(word)
    assert text, word
    for flag in (*COMMON, "--json", "--thread"):
        accepted = re.search(rf"(?<![\w-]){flag}\b", text) is not None
        assert accepted == (flag in SUBCOMMANDS[word].takes), (word, flag)
    for action in SUBCOMMANDS[word].actions:
        assert re.search(rf"\b{action}\b", text), (word, action)


def test_help_names_every_subcommand(home):
    r = bantam_here("--help", cwd=home)
    named = set(re.findall(r"\bbantam ([a-z]+)\b", r.stdout))
    assert set(SUBCOMMANDS) <= named, set(SUBCOMMANDS) - named


# --- completion: made from the tables, driven in a real bash -------------------------------

def _global_options(home) -> set[str]:
    """The options `bantam --help` lists (its own parser's, not the completion's table)."""
    text = bantam_here("--help", cwd=home).stdout
    return set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", text.split("options:", 1)[1]))


def _complete(script: str, *words: str) -> list[str]:
    """COMPREPLY after `bantam WORDS` in a real bash with the script loaded; the last word is
    the one being completed."""
    line = " ".join(f"'{w}'" for w in ("bantam", *words))
    driver = (f'{script}\ncomplete -p bantam >/dev/null || exit 3\n'
              f'COMP_WORDS=({line}); COMP_CWORD={len(words)}; _bantam; printf "%s\\n" "${{COMPREPLY[@]}}"')
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", driver], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_bash_completion(home):
    script = bantam_here("completion", "bash", cwd=home).stdout
    options = _global_options(home)
    assert {"--yolo", "--provider", "--model", "-p", "--version"} <= options
    assert set(_complete(script, "")) >= set(SUBCOMMANDS) | options
    assert set(_complete(script, "mcp", "")) >= {"serve", "list", "trust", "--yolo"}
    assert set(_complete(script, "--provider", "")) == {"openai", "anthropic", "local"}
    assert _complete(script, "--provider", "an") == ["anthropic"]
    assert _complete(script, "--yolo", "mc") == ["mcp"]
    assert "--yolo" in _complete(script, "--model", "fast", "web", "--y")
    assert set(_complete(script, "sessions", "")) == {"list", "show", "export", "delete", "--help"}
    assert _complete(script, "completion", "z") == ["zsh"]
    assert "temperature=" in _complete(script, "--set", "temp")
    assert _complete(script, "--model", "") == []  # the user's own value


def test_zsh_and_fish_completion(home):
    zsh = bantam_here("completion", "zsh", cwd=home).stdout
    assert zsh.startswith("autoload -U +X bashcompinit") and "complete -F _bantam bantam" in zsh
    fish = bantam_here("completion", "fish", cwd=home).stdout
    first = fish.splitlines()[0]
    assert first.startswith("complete -c bantam -f -n __fish_use_subcommand -a '")
    assert set(first.split("'")[1].split()) == set(SUBCOMMANDS), first
    for option in _global_options(home):
        flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
        assert re.search(rf"^complete -c bantam .*{flag}( |$)", fish, re.M), option
    assert "-l provider -x -a 'openai anthropic local'" in fish
    assert "__fish_seen_subcommand_from mcp' -x -a 'serve list trust'" in fish


# --- the command line in process ---------------------------------------------------------------

def test_the_command_line_runs_in_process_and_gives_the_process_back(cfg, server, monkeypatch):
    """cli.main with its streams, environment and folder given runs bantam as a process would
    (piped input is the prompt) and leaves this process's own as they were, signal handlers too."""
    import os
    import signal
    import sys
    server.add(text_reply("from the pipe"))
    monkeypatch.setenv("BANTAM_TEST_OUTSIDE", "1")
    streams, env, folder = (sys.stdin, sys.stdout, sys.stderr), dict(os.environ), os.getcwd()
    handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP))
    r = bantam_here(cwd=cfg, input="a question", env={"BANTAM_TEST_INSIDE": "1"})
    assert (r.returncode, r.stdout) == (0, "from the pipe\n"), r.stderr
    assert server.chat_requests()[0].body["messages"][-1]["content"] == "a question"
    assert (sys.stdin, sys.stdout, sys.stderr) == streams and dict(os.environ) == env and os.getcwd() == folder
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == handlers
    assert bantam_here("--frobnicate", cwd=cfg).returncode == 2  # argparse's exit is a code here, not an exit
