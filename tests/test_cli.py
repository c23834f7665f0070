"""bantam as a user runs it: a real process, a real local server, real files and shells."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import process_gone, base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import json_reply, text_reply, tool_reply, usage
from tests.fakes.scripted import ScriptedProvider, one_shot, text

USAGE_RE = r"\[test-model: \d+ prompt"


@pytest.fixture
def cfg(home, server):
    write_cfg(home, **base_cfg(server))
    return home


def test_one_shot_answer_on_stdout_traces_on_stderr(cfg, server):
    server.add(tool_reply("shell_exec", {"command": "echo from-the-shell"}, u=usage(100, 10)),
               text_reply("The shell said hello.", usage(200, 20, cached=150)))
    r = run_bantam("-p", "say hello", cwd=cfg)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "The shell said hello.\n"
    assert '[tool call: shell_exec({"command": "echo from-the-shell"})]' in r.stderr
    assert "[tool result: shell_exec]\nfrom-the-shell" in r.stderr
    # the prompt tokens of both requests add up; the context is the last request's alone
    assert ("[test-model: 300 prompt sent in 2 requests (150 cached, 150 uncached) + 30 completion | "
            "context: 200/? (window unknown)]") in r.stderr
    assert "\033[" not in r.stdout + r.stderr  # no colour when not a terminal
    assert server.chat_requests()[0].body["messages"][1] == {"role": "user", "content": "say hello"}


def test_context_percentage_uses_discovered_window(cfg, server):
    server.models = [{"id": "test-model", "context_length": 1000}]
    server.add(text_reply("ok", usage(100, 1)))
    r = run_bantam("-p", "x", cwd=cfg)
    assert "context: 100/1000 (10.0%)" in r.stderr


def test_config_context_window_fallback(home, server):
    write_cfg(home, **base_cfg(server, context_window="400"))
    server.models = []
    server.add(text_reply("ok", usage(100, 1)))
    assert "context: 100/400 (25.0%)" in run_bantam("-p", "x", cwd=home).stderr


def test_prompt_from_file_and_from_stdin(cfg, server):
    (cfg / "task.txt").write_text("from a file")
    server.add(text_reply("a"), text_reply("b"), text_reply("c"))
    assert run_bantam("task.txt", cwd=cfg).stdout == "a\n"
    assert run_bantam(cwd=cfg, input="from stdin").stdout == "b\n"
    assert run_bantam("-p", "explain", cwd=cfg, input="piped data").stdout == "c\n"
    prompts = [r.body["messages"][1]["content"] for r in server.chat_requests()]
    assert prompts == ["from a file", "from stdin", "explain\n\npiped data"]


def test_bang_prompt_runs_the_command_without_the_model(cfg, server):
    r = run_bantam("-p", "!echo direct; exit 3", cwd=cfg)
    assert r.stdout == "direct\n" and "exit: 3" in r.stderr and r.returncode == 3
    (cfg / "cmd.txt").write_text("!ls cmd.txt")
    assert run_bantam("./cmd.txt", cwd=cfg).stdout == "cmd.txt\n"  # a command file runs named as a path
    assert server.chat_requests() == []


def test_json_lines(cfg, server):
    server.models = [{"id": "test-model", "context_length": 5000}]
    server.add(tool_reply("shell_exec", {"command": "echo hi"}), text_reply("Answer text", usage(50, 5, cached=0)))
    r = run_bantam("--json", "-p", "go", cwd=cfg)
    events = [json.loads(line) for line in r.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert set(types) <= {"text", "reasoning", "tool_call", "tool_result", "usage", "error", "done"}
    assert types[0] == "tool_call" and types[-1] == "done" and "usage" in types
    assert events[0]["name"] == "shell_exec" and json.loads(events[0]["arguments"]) == {"command": "echo hi"}
    result = [e for e in events if e["type"] == "tool_result"][0]
    assert result["content"] == "hi\n\n\nexit: 0" and result["is_error"] is False
    assert "".join(e["text"] for e in events if e["type"] == "text") == "Answer text"
    done = events[-1]
    assert done["text"] == "Answer text"
    assert done["usage"]["prompt_tokens"] == 60 and done["usage"]["context_window"] == 5000


def test_json_retry_and_fatal_error(cfg, server):
    server.add(json_reply({"error": {"message": "busy"}}, status=503),
               json_reply({"error": {"message": "bad request: no such model"}}, status=400))
    r = run_bantam("--json", "-p", "go", cwd=cfg)
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 1
    assert events[0]["type"] == "error" and events[0]["fatal"] is False and events[0]["retry_in"] == 0
    assert events[-1]["type"] == "error" and events[-1]["fatal"] is True
    assert "no such model" in events[-1]["message"]


def test_api_failure_exit_1_with_message(cfg, server):
    server.add(json_reply({"error": {"message": "The model `nope` does not exist"}}, status=404))
    r = run_bantam("-p", "go", cwd=cfg)
    assert r.returncode == 1 and r.stdout == ""
    assert "error: HTTP 404: The model `nope` does not exist" in r.stderr
    assert "Traceback" not in r.stderr


def test_retry_lines_on_stderr(cfg, server):
    server.add(json_reply({"error": {"message": "rate limited"}}, status=429), text_reply("ok"))
    r = run_bantam("-p", "go", cwd=cfg)
    assert r.returncode == 0 and r.stdout == "ok\n"
    assert "[retry 1 in 0s: HTTP 429: rate limited]" in r.stderr


def test_iteration_budget_exit_1(home, server):
    write_cfg(home, **base_cfg(server, max_al_iterations="2"))
    server.add(tool_reply("shell_exec", {"command": "true 1"}), tool_reply("shell_exec", {"command": "true 2"}))
    r = run_bantam("-p", "go", cwd=home)
    assert r.returncode == 1 and "max_al_iterations (2)" in r.stderr


@pytest.mark.parametrize("content,message", [
    ("temperature=hot\n", ".bantam.cfg:1: temperature: expected a number, got 'hot'"),
    ("model=x\nprovider=gemini\n", ".bantam.cfg:2: provider: expected one of openai, anthropic, local"),
    ("no equals sign\n", ".bantam.cfg:1: expected key=value"),
    ("tools=shell_exec,teleport\n", "tools: unknown tool 'teleport'"),
])
def test_bad_config_exit_2(home, content, message):
    (home / ".bantam.cfg").write_text(content)
    r = run_bantam("-p", "x", cwd=home)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("bantam: ") and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,message", [
    (["--set", "novalue", "-p", "x"], "--set expects KEY=VALUE"),
    (["missing.txt"], "cannot read prompt file missing.txt"),
    (["-p", "   "], "the prompt is empty"),
    (["a.txt", "b.txt"], "at most one prompt file"),
])
def test_bad_usage_exit_2(cfg, args, message):
    r = run_bantam(*args, cwd=cfg)
    assert r.returncode == 2 and message in r.stderr


def test_unknown_option_exit_2(cfg):
    assert run_bantam("--frobnicate", cwd=cfg).returncode == 2


def test_flags_override_and_forwarded_keys(home, server):
    write_cfg(home, **base_cfg(server, model="file-model", top_p="0.3", max_tokens="64"))
    server.add(text_reply("ok"))
    r = run_bantam("--model", "test-model", "--set", "temperature=0.1", "--set", "seed=7", "-p", "x", cwd=home)
    assert r.returncode == 0, r.stderr
    body = server.chat_requests()[0].body
    assert (body["model"], body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
        "test-model", 0.1, 0.3, 64, 7)
    for internal in ("endpoint", "api_key", "timeout", "shell_timeout", "retry_delays", "color", "provider"):
        assert internal not in body
    assert all(t["type"] == "function" for t in body["tools"])  # schemas, not the config key


def test_environment_endpoint(home, server):
    server.add(text_reply("via env"))
    r = run_bantam("-p", "x", cwd=home, env={"LLM_URL": server.url + "/chat/completions",
                                             "LLM_MODEL": "test-model"})
    assert r.stdout == "via env\n"


@pytest.mark.quick
def test_system_prompt_agents_md_and_tools_dir(home, monkeypatch):  # in process: the session's prompt
    write_cfg(home, model="test-model")
    (home / "AGENTS.md").write_text("Always answer in French.")
    monkeypatch.setenv("BANTAM_TOOLS_DIR", "/opt/my-tools")
    model = ScriptedProvider(text("oui"))
    one_shot(home, model, "x")
    system = model.requests[0].messages[0]
    assert system["role"] == "system" and "AGENTS.md" in system["content"]
    assert "Always answer in French." in system["content"]
    assert system["content"].endswith("Extra shell tools can be found at /opt/my-tools")


def test_api_key_never_shown_or_stored(home, server):
    secret = "sk-very-secret-key-1234"
    write_cfg(home, **base_cfg(server, api_key=secret))
    server.add(tool_reply("shell_exec", {"command": "echo ok"}),
               json_reply({"error": {"message": f"Incorrect API key provided: {secret}"}}, status=401))
    r = run_bantam("-p", "x", cwd=home, env={"OPENAI_API_KEY": "sk-env-other"})
    assert server.chat_requests()[0].headers["authorization"] == f"Bearer {secret}"
    assert r.returncode == 1 and "Incorrect API key provided: ***" in r.stderr
    assert secret not in r.stdout + r.stderr
    for path in Path(os.environ["HOME"]).rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace")


def test_colours_when_asked(home, server):
    write_cfg(home, **base_cfg(server, color="always"))
    server.add(tool_reply("shell_exec", {"command": "echo hi"}), text_reply("ok"))
    r = run_bantam("-p", "x", cwd=home, env={"NO_COLOR": "1"})  # an explicit setting wins
    assert "\033[33m[tool call: shell_exec" in r.stderr and "\033[32m[tool result: shell_exec]" in r.stderr
    assert r.stdout == "ok\n"  # the answer itself is never coloured


def test_models_command(cfg, server):
    server.models = [{"id": "alpha"}, {"id": "test-model"}, {"id": "omega"}]
    r = run_bantam("models", cwd=cfg)
    assert r.returncode == 0 and r.stdout.splitlines() == ["  alpha", "* test-model", "  omega"]


def test_version():
    import tomllib
    r = subprocess.run([sys.executable, "-m", "bantam", "--version"], capture_output=True, text=True)
    project = tomllib.loads(Path(__file__).parents[1].joinpath("pyproject.toml").read_text())["project"]
    assert r.returncode == 0 and r.stdout.startswith(f"bantam {project['version']}")  # one version, said twice


def test_broken_pipe_is_quiet(cfg, server):
    server.add(text_reply("line one\nline two\nline three\n" * 2000))
    p = subprocess.run(f"{sys.executable} -m bantam -p x | head -1", shell=True, cwd=cfg,
                       capture_output=True, text=True, timeout=60)
    assert p.stdout == "line one\n" and "Traceback" not in p.stderr


def test_ctrl_c_during_a_shell_command(cfg, server):
    write_cfg(cfg, **base_cfg(server, sandbox="off"))  # host pids: a sandboxed $$ is namespaced
    server.add(tool_reply("shell_exec", {"command": "echo $$ > shell.pid; sleep 1000"}))
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", "x"], cwd=cfg, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid_file = cfg / "shell.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the shell command never started"
        time.sleep(0.05)
    shell_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert process_gone(shell_pid)


def test_no_prompt_and_no_terminal_reads_plain_lines(cfg, server):
    server.add(text_reply("first answer"), text_reply("second answer"))
    r = subprocess.run([sys.executable, "-m", "bantam"], cwd=cfg, capture_output=True, text=True,
                       stdin=open(os.devnull), timeout=60)
    assert r.returncode == 0 and server.chat_requests() == []  # /dev/null: the session ends at once


def test_context_overflow_compacts_and_retries(cfg, server):
    (cfg / "AGENTS.md").write_text("Use tabs.")
    overflow = {"error": {"message": "This model's maximum context length is 8192 tokens. However, your "
                                     "messages resulted in 9000 tokens.", "code": "context_length_exceeded"}}
    server.add(tool_reply("shell_exec", {"command": "echo step one"}),
               json_reply(overflow, status=400), text_reply("We ran step one."), text_reply("All done."))
    r = run_bantam("-p", "do the big task", cwd=cfg)
    assert r.returncode == 0 and r.stdout == "All done.\n", r.stderr
    assert "compacting" in r.stderr
    summary_req, retry_req = server.chat_requests()[2].body, server.chat_requests()[3].body
    assert summary_req["messages"][-1]["content"].startswith("You are now acting as a compaction engine")
    assert "tools" not in summary_req
    assert [m["role"] for m in retry_req["messages"]] == ["system", "user"]
    text = retry_req["messages"][1]["content"]
    assert "Original task (verbatim):\ndo the big task" in text and "Use tabs." in text
    assert "We ran step one." in text


def offered(request) -> tuple[str, dict]:
    """The system prompt of a request and shell_exec's parameters as the model was offered them."""
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in request.tools}
    return request.messages[0]["content"], tools["shell_exec"]["properties"]


@pytest.mark.quick
def test_the_one_shot_prompt_describes_only_the_tools_offered(home):  # in process: the one-shot session
    write_cfg(home, model="test-model", sandbox="workspace", approval="on-request")
    model = ScriptedProvider(text("ok"), text("ok"))
    assert one_shot(home, model, "hi")[0] is not None
    system, shell = offered(model.requests[0])
    assert "Sandbox:" in system  # the boundary is described...
    assert "escalate" not in shell and "escalate" not in system  # ...but no way out no one could approve
    assert "say so in your answer" in system
    write_cfg(home, model="test-model", tools="shell_exec")
    assert one_shot(home, model, "hi")[0] is not None
    system, _ = offered(model.requests[1])
    assert "Use shell_exec" in system and "write_file" not in system and "sub-agent" not in system
