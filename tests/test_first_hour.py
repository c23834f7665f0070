"""Issue 20, the first hour: help for every mode, bounded discovery, clipped traces, the user's
own configuration and `bantam config`, aliases, `bantam sessions`, `-c`, shell completion."""
import json
import os
import subprocess
import sys
import threading

import pytest

from bantam import transcripts
from tests.conftest import base_cfg, bantam_here, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply, usage

MODES = ("run", "status", "resume", "daemon", "web", "config", "sessions", "completion")


def test_help_names_every_mode(home):
    r = bantam_here("--help", cwd=home)
    assert r.returncode == 0
    for mode in MODES + ("models", "handler", "--thread", "-c"):
        assert f"bantam {mode}" in r.stdout, mode
    assert '"$ACTOR_RESULT_TOPIC\\nRESULT"' in r.stdout  # the two characters, not a line break


@pytest.mark.parametrize("mode", MODES + ("models", "handler"))
def test_every_mode_has_its_own_help(home, mode):
    r = bantam_here(mode, "--help", cwd=home)
    assert r.returncode == 0 and r.stdout.startswith(f"usage: bantam {mode}"), r.stdout + r.stderr


class StallingModels(FakeServer):
    """A server whose model list never comes (until the test ends)."""
    release = threading.Event()

    @property
    def models(self):
        self.release.wait(120)
        return []

    @models.setter
    def models(self, value):
        pass


def test_a_model_list_that_never_answers_does_not_hold_up_the_exit(home):
    with StallingModels() as server:
        write_cfg(home, **base_cfg(server))
        server.add(text_reply("one", usage(10, 1)), text_reply("two", usage(10, 1)))
        first = run_bantam("-p", "a", cwd=home, timeout=60)  # the stall is 120 s: bounded well below
        second = run_bantam("-p", "b", cwd=home, timeout=60)
        gets = [q for q in server.requests if q.method == "GET"]
        server.release.set()
    assert first.stdout == "one\n" and "context: 10/? (window unknown)" in first.stderr
    assert second.stdout == "two\n"
    assert len(gets) == 1  # the second run remembered that the server names no window


def test_one_long_line_is_clipped_in_the_trace(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "python3 -c \"print('x' * 1000000)\""}), text_reply("ok"))
    r = bantam_here("-p", "go", cwd=home)
    assert r.returncode == 0, r.stderr[-500:]
    assert "more characters)" in r.stderr and len(r.stderr) < 3000, len(r.stderr)


# --- the user's configuration ---------------------------------------------------------------------

@pytest.fixture
def user_cfg(home):
    folder = home.parent / "home" / ".config" / "bantam"
    folder.mkdir(parents=True)
    return folder / "config"


def config_lines(home, *args, env=None):
    r = bantam_here("config", *args, cwd=home, env=env)
    assert r.returncode == 0, r.stderr
    return {line.split(" = ")[0]: line.split(" = ", 1)[1] for line in r.stdout.splitlines()}


def test_user_file_sits_below_the_project_file_and_above_the_environment(home, user_cfg):
    user_cfg.write_text("# mine\nmodel=user-model\ntemperature=0.1\ntool_budget=7\napi_key=sk-user-secret\n")
    write_cfg(home, temperature="0.3")
    shown = config_lines(home, "--set", "tool_budget=9", env={"LLM_MODEL": "env-model",
                                                              "AGENT_MAX_FANOUT": "3"})
    assert shown["model"] == f"user-model  ({user_cfg}:2)"
    assert shown["temperature"] == "0.3  (.bantam.cfg:1)"
    assert shown["tool_budget"] == "9  (command line)"
    assert shown["max_fanout"] == "3  (environment variable AGENT_MAX_FANOUT)"
    assert shown["api_key"] == f"***  ({user_cfg}:5)"
    assert shown["shell_timeout"] == "120  (default)"
    assert "sk-user-secret" not in json.dumps(shown)


def test_the_user_file_reaches_the_request_and_aliases_name_models(home, user_cfg, server):
    user_cfg.write_text(f"endpoint={server.url}\napi_key=sk-user-secret\nretry_delays=0\n"
                        "alias.fast=vendor/fast-model-v2\n")
    server.add(text_reply("ok"))
    r = bantam_here("--model", "fast", "-p", "hi", cwd=home)
    assert r.returncode == 0, r.stderr
    request = server.chat_requests()[0]
    assert request.body["model"] == "vendor/fast-model-v2"
    assert request.headers["authorization"] == "Bearer sk-user-secret"
    assert "alias.fast" not in request.body  # an alias is not forwarded to the API


def test_a_bad_user_value_names_its_file_and_line(home, user_cfg):
    user_cfg.write_text("temperature=hot\n")
    r = bantam_here("-p", "hi", cwd=home)
    assert r.returncode == 2 and f"{user_cfg}:1: temperature:" in r.stderr


# --- sessions from the shell, and -c --------------------------------------------------------------

def saved(home, session_id=None):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "what is 2+2?"},
                {"role": "assistant", "content": "4"}]
    env = {**os.environ, "HOME": str(home.parent / "home")}
    code = ("import sys; from bantam import transcripts; "
            f"transcripts.save({session_id!r} or transcripts.project_id(), {messages!r})")
    subprocess.run([sys.executable, "-c", code], cwd=home, env=env, check=True)
    return messages


def test_sessions_list_show_export_delete(home):
    saved(home)
    saved(home, "other-one")
    listing = bantam_here("sessions", cwd=home).stdout.splitlines()
    assert len(listing) == 2 and any(line.startswith("* ") for line in listing)
    assert all(f"  {home.resolve().name}  " in line for line in listing)  # the project folder, by name
    twice = bantam_here("sessions", "show", home.resolve().name, cwd=home)  # the folder's name: two match
    assert twice.returncode == 2 and "matches 2 sessions" in twice.stderr
    shown = bantam_here("sessions", "show", "other", cwd=home)
    assert shown.stdout.startswith("# Session other-one") and "## User\n\nwhat is 2+2?" in shown.stdout
    out = home / "talk.md"
    assert bantam_here("sessions", "export", "other-one", "-o", str(out), cwd=home).returncode == 0
    assert "## Assistant\n\n4" in out.read_text()
    assert bantam_here("sessions", "delete", "other-one", cwd=home).returncode == 0
    assert len(bantam_here("sessions", cwd=home).stdout.splitlines()) == 1
    by_folder = bantam_here("sessions", "show", home.resolve().name, cwd=home)  # now the only one there
    assert by_folder.returncode == 0 and "what is 2+2?" in by_folder.stdout
    assert by_folder.stdout.startswith(f"# Session {transcripts.project_id(home)}")
    missing = bantam_here("sessions", "show", "nope", cwd=home)
    assert missing.returncode == 2 and "no session matches 'nope'" in missing.stderr


def test_continue_resumes_the_project_session_in_one_shot_mode(home, server):
    write_cfg(home, **base_cfg(server))
    r = bantam_here("-c", "-p", "and 3+3?", cwd=home)
    assert r.returncode == 2 and "no saved session" in r.stderr
    saved(home)
    server.add(text_reply("6"))
    r = bantam_here("-c", "-p", "and 3+3?", cwd=home)
    assert r.returncode == 0 and r.stdout == "6\n", r.stderr
    sent = [m["content"] for m in server.chat_requests()[0].body["messages"][1:]]
    assert sent == ["what is 2+2?", "4", "and 3+3?"]
    assert "6" in bantam_here("sessions", "show", transcripts.project_id(home), cwd=home).stdout


# --- completion -----------------------------------------------------------------------------------

def test_bash_loads_the_completion_and_completes(home):
    saved(home, "my-session")
    script = bantam_here("completion", "bash", cwd=home).stdout
    (home / "c.sh").write_text(script)
    probe = ('source ./c.sh; COMP_WORDS=(bantam se); COMP_CWORD=1; _bantam; echo "${COMPREPLY[@]}"; '
             'COMP_WORDS=(bantam sessions show my); COMP_CWORD=3; _bantam; echo "${COMPREPLY[@]}"; '
             'COMP_WORDS=(bantam --set tem); COMP_CWORD=2; _bantam; echo "${COMPREPLY[@]}"')
    env = {**os.environ, "HOME": str(home.parent / "home"),
           "PATH": f"{home}:{os.environ['PATH']}"}
    (home / "bantam").write_text(f"#!/bin/sh\nexec {sys.executable} -m bantam \"$@\"\n")
    (home / "bantam").chmod(0o755)
    r = subprocess.run(["bash", "-c", probe], cwd=home, env=env, capture_output=True, text=True, timeout=60)
    first, second, third = r.stdout.splitlines()
    assert "sessions" in first.split()
    assert second.split() == ["my-session"]
    assert third.split() == ["temperature="]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_get_a_script(home, shell):
    r = bantam_here("completion", shell, cwd=home)
    assert r.returncode == 0 and "bantam" in r.stdout and "sessions" in r.stdout


def test_cfg_global_writes_the_user_file_from_the_terminal(home, server):
    from tests.test_repl import Term
    write_cfg(home, **base_cfg(server))
    term = Term(home, NO_COLOR="1")
    term.enter("/cfg --global alias.quick vendor/quick-model")
    term.expect("(written to ")
    term.enter("/cfg --global shell_timeout 33")
    term.expect("shell_timeout=33 (written to")
    term.quit()
    user = home.parent / "home" / ".config" / "bantam" / "config"
    assert user.read_text() == "alias.quick=vendor/quick-model\nshell_timeout=33\n"
    assert user.stat().st_mode & 0o777 == 0o600 and user.parent.stat().st_mode & 0o777 == 0o700
    assert "shell_timeout=" not in (home / ".bantam.cfg").read_text()
    assert config_lines(home)["shell_timeout"] == f"33  ({user}:2)"


def test_continue_flag_opens_the_terminal_on_the_saved_session(home, server):
    from tests.test_repl import Term
    write_cfg(home, **base_cfg(server))
    saved(home)
    server.add(text_reply("6"))
    term = Term(home, NO_COLOR="1")
    term.child.close()
    term.child = __import__("pexpect").spawn(sys.executable, ["-m", "bantam", "-c"], cwd=str(home),
                                             env={**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1",
                                                  "NO_COLOR": "1"}, encoding="utf-8", dimensions=(40, 120),
                                             timeout=20)
    term.expect("loaded ")
    term.enter("and 3+3?")
    term.expect("6")
    term.quit()
    sent = [m["content"] for m in server.chat_requests()[0].body["messages"][1:]]
    assert sent == ["what is 2+2?", "4", "and 3+3?"]


PRICED = [{"id": "test-model", "context_length": 100000,
           "pricing": {"prompt": "0.000003", "completion": "0.000015"}}]


def test_cost_of_the_turn_from_the_model_list_prices(home, server):
    write_cfg(home, **base_cfg(server))
    server.models = PRICED
    server.add(text_reply("ok", usage(1000, 100)))
    r = bantam_here("-p", "hi", cwd=home)
    assert "| cost: $0.0045]" in r.stderr, r.stderr  # 1000 * 3e-6 + 100 * 15e-6
    server.add(text_reply("ok", usage(1000, 100)))
    r = bantam_here("--json", "-p", "hi", cwd=home)
    assert json.loads(r.stdout.splitlines()[-1])["usage"]["cost"] == 0.0045
    assert [q.method for q in server.requests].count("GET") == 1  # prices remembered with the window


def test_cost_of_the_session_in_the_terminal(home, server):
    from tests.test_repl import Term
    write_cfg(home, **base_cfg(server))
    server.models = PRICED
    server.add(text_reply("one", usage(1000, 100)), text_reply("two", usage(2000, 0)))
    term = Term(home, NO_COLOR="1")
    term.enter("first")
    term.expect("| cost: $0.0045]")
    term.enter("second")
    term.expect("| cost: $0.0060 (session $0.0105)]")
    term.enter("/cost")
    term.expect("this session: $0.0105")
    term.quit()


def test_table_cells_are_padded_evenly():
    import io

    from rich.console import Console

    from bantam.render.markdown import BoxedMarkdown
    out = io.StringIO()
    Console(file=out, width=60, force_terminal=False).print(BoxedMarkdown("| name | n |\n|---|---|\n| alpha | 1 |\n"))
    assert "│ alpha │ 1 │" in out.getvalue(), out.getvalue()


def test_a_dead_socks_proxy_is_named(home, server):
    import socket
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    write_cfg(home, **base_cfg(server))
    r = bantam_here("-p", "hi", cwd=home, env={"SOCKS_PROXY": f"127.0.0.1:{port}"})
    assert r.returncode == 1
    assert f"through the SOCKS proxy socks5://127.0.0.1:{port} failed" in r.stderr, r.stderr


def test_after_ctrl_c_the_usage_line_starts_its_own_line(home, server):
    import pexpect
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "echo started; sleep 1000"}, u=usage(50, 5)))
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "-p", "go"], cwd=str(home), encoding="utf-8",
                          env={**os.environ, "NO_COLOR": "1"}, dimensions=(40, 120), timeout=30)
    child.expect_exact("[tool call: shell_exec")
    child.sendintr()
    child.expect(pexpect.EOF)
    output = child.before.replace("\r\n", "\n")
    assert "\n[test-model: 50 prompt" in output, repr(output[-300:])
    assert "^C[" not in output


def test_a_long_markdown_answer_is_rendered_in_a_small_terminal(home, server):
    import pexpect
    write_cfg(home, **base_cfg(server))
    table = "| name | n |\n|---|---|\n" + "".join(f"| row{i} | {i} |\n" for i in range(40))
    server.add(text_reply(table, pieces=20))
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "-p", "table"], cwd=str(home), encoding="utf-8",
                          env={**os.environ, "NO_COLOR": "1", "TERM": "xterm"}, dimensions=(30, 80), timeout=30)
    child.expect(pexpect.EOF)
    output = child.before
    assert "│ row39 │ 39 │" in output and "┌" in output  # rendered, though 42 lines > 30 rows
    assert "...writing (" in output
    rendered = output[output.index("┌"):]
    assert "|---|" not in rendered and "| row39 |" not in rendered


def test_an_old_json_session_is_continued_listed_and_moved_to_json_lines(home, server):
    write_cfg(home, **base_cfg(server))
    folder = home.parent / "home" / ".bantam" / "sessions"
    folder.mkdir(parents=True)
    old = folder / f"{transcripts.project_id(home)}.json"
    old.write_text(json.dumps({"id": old.stem, "summary": "arithmetic", "messages": [
        {"role": "system", "content": "S"}, {"role": "user", "content": "what is 2+2?"},
        {"role": "assistant", "content": "4"}]}))
    listing = bantam_here("sessions", cwd=home).stdout
    assert "2 messages  arithmetic" in listing
    server.add(text_reply("6"))
    r = bantam_here("-c", "-p", "and 3+3?", cwd=home)
    assert r.returncode == 0 and r.stdout == "6\n", r.stderr
    assert [m["content"] for m in server.chat_requests()[0].body["messages"][1:]] == ["what is 2+2?", "4", "and 3+3?"]
    assert not old.exists()
    records = [json.loads(line) for line in old.with_suffix(".jsonl").read_text().splitlines()]
    assert [m.get("content") for m in records[1:]] == ["what is 2+2?", "4", "and 3+3?", "6"]
    assert len(bantam_here("sessions", cwd=home).stdout.splitlines()) == 1


def test_a_session_cut_off_mid_save_is_shown_with_a_notice(home, server):
    write_cfg(home, **base_cfg(server))
    saved(home)
    path = home.parent / "home" / ".bantam" / "sessions" / f"{transcripts.project_id(home)}.jsonl"
    with open(path, "ab") as f:  # what a crash in the middle of an append leaves behind
        f.write(b'{"role": "user", "content": "and 5+5')
    shown = bantam_here("sessions", "show", transcripts.project_id(home), cwd=home)
    assert shown.returncode == 0 and "what is 2+2?" in shown.stdout and "5+5" not in shown.stdout
    assert f"{path}:4: the last message was cut off" in shown.stderr
    server.add(text_reply("6"))
    r = bantam_here("-c", "-p", "and 3+3?", cwd=home)
    assert r.returncode == 0 and "the last message was cut off" in r.stderr
    records = [json.loads(line) for line in path.read_text().splitlines()]  # whole again, and appended
    assert [m.get("content") for m in records[1:]] == ["what is 2+2?", "4", "and 3+3?", "6"]
