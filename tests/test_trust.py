"""Issue 13, credentials and input: a model that runs `env` in every mode reads no secret, and no
file, output or request afterwards holds one; a key goes only to its own endpoint; piped text is
never a command; bad values are one clear line; file content is written byte for byte.
bantam's real command line (cli.main, in this process), real shells, real servers on 127.0.0.1."""
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bantam import config
from bantam.errors import ConfigError
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import base_cfg, bantam_here, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply
from tests.fakes.scripted import ScriptedProvider, one_shot, text, tool
from tests.fakes.scripted import tool_results as scripted_results

# Values that must never reach the model or any file. The names cover bantam's own key, a
# secret-looking name, and a URL with a password in a variable that is otherwise kept.
SECRETS = {"OPENAI_API_KEY": "sk-env-key-0123456789", "GITHUB_TOKEN": "ghp_github0123456789",
           "DB_PASSWORD": "db-pass-0123456789", "MIRROR_URL": "https://builder:mirrorpass0123@mirror.example/simple"}
LEAKS = ("sk-env-key-0123456789", "ghp_github0123456789", "db-pass-0123456789", "mirrorpass0123")
ENV_COMMAND = {"command": "env; echo env-listed"}


def everything_written(home: Path) -> str:
    """Every file under the test's HOME and working directory, as text."""
    roots = [Path(os.environ["HOME"]), home]
    return "\n".join(p.read_text(errors="replace") for root in roots for p in root.rglob("*") if p.is_file())


def tool_results(server) -> list[str]:
    return [str(m.get("content")) for r in server.chat_requests() for m in r.body["messages"] if m["role"] == "tool"]


def assert_clean(text: str) -> None:
    for secret in LEAKS:
        assert secret not in text


@pytest.mark.parametrize("mode", [["-p", "list the environment"], ["--json", "-p", "list the environment"],
                                  ["--thread", "t1", "-p", "list the environment"], ["handler"]])
def test_a_model_running_env_reads_no_secret(home, server, mode):
    write_cfg(home, model="test-model", retry_delays="0")
    server.add(tool_reply("shell_exec", ENV_COMMAND), text_reply("done"))
    # no api_key: OPENAI_API_KEY is the one used, for the endpoint the user chose (LLM_URL)
    r = bantam_here(*mode, cwd=home, env={**SECRETS, "LLM_URL": server.url + "/chat/completions"},
                   input="list the environment" if mode == ["handler"] else None)
    assert r.returncode == 0, r.stderr
    result = tool_results(server)[0]
    assert "env-listed" in result and "PATH=" in result
    assert "MIRROR_URL=https://mirror.example/simple" in result  # kept, without its credentials
    assert "PAGER=cat" in result
    assert_clean(result + r.stdout + r.stderr + everything_written(home))
    assert_clean(json.dumps([req.body for req in server.chat_requests()]))
    assert server.chat_requests()[0].headers["authorization"] == "Bearer sk-env-key-0123456789"


# In process (the one-shot session on a scripted model): what a command's environment holds is the
# session's doing; the four front ends above show it through real processes.

@pytest.mark.quick
def test_env_passthrough_names_a_variable_the_model_may_use(home, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    write_cfg(home, model="test-model", env_passthrough="GITHUB_TOKEN")
    model = ScriptedProvider(tool("shell_exec", ENV_COMMAND), text("done"))
    turn, _ = one_shot(home, model, "x")
    assert turn is not None and turn.text == "done"
    result = scripted_results(model)[0]
    assert "GITHUB_TOKEN=***" in result  # the command has it (the user asked); its value is not the model's
    assert "sk-env-key-0123456789" not in result and "DB_PASSWORD" not in result


@pytest.mark.quick
def test_a_sub_agents_commands_get_the_same_environment(home, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    write_cfg(home, model="test-model", tools="shell_exec,run_subagent")
    model = ScriptedProvider(tool("run_subagent", {"prompt": "list the environment"}),
                             tool("shell_exec", ENV_COMMAND), text("child done"), text("parent done"))
    turn, events = one_shot(home, model, "delegate")
    assert turn is not None and turn.text == "parent done"
    assert any("env-listed" in t for t in scripted_results(model))
    assert_clean(json.dumps([r.messages for r in model.requests]) + json.dumps([e.to_json() for e in events])
                 + everything_written(home))


def test_a_known_secret_read_from_a_file_is_shown_as_stars(home, server):
    """The api_key is in the project's config file; a model that cats it sees *** (and so does
    every file and output), while the key still goes to the endpoint."""
    write_cfg(home, **base_cfg(server, api_key="sk-file-key-abcdef123"))
    server.add(tool_reply("shell_exec", {"command": "cat .bantam.cfg"}), text_reply("done"))
    r = bantam_here("--json", "-p", "show the config", cwd=home)
    assert r.returncode == 0, r.stderr
    assert "api_key=***" in tool_results(server)[0]
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert any(e["type"] == "tool_result" and "api_key=***" in e["content"] for e in events)
    assert "sk-file-key-abcdef123" not in r.stdout + r.stderr
    assert "sk-file-key-abcdef123" not in everything_written(home).replace(
        (home / ".bantam.cfg").read_text(), "")  # only the config file itself holds it
    assert server.chat_requests()[0].headers["authorization"] == "Bearer sk-file-key-abcdef123"


def test_the_terminals_model_reads_no_secret(home, server):
    from tests.test_repl import Term
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", ENV_COMMAND), text_reply("listed"))
    term = Term(home, **SECRETS)
    term.enter("list the environment")
    term.expect("listed")
    term.enter("!echo mine=$GITHUB_TOKEN")  # the user's own command: the user's environment
    term.expect("mine=ghp_github0123456789")
    assert term.quit() == 0
    result = tool_results(server)[0]
    assert "env-listed" in result
    assert_clean(result + everything_written(home))


def test_the_users_own_command_keeps_the_users_environment(home, server):
    write_cfg(home, **base_cfg(server))
    r = bantam_here("-p", "!echo token=$GITHUB_TOKEN", cwd=home, env=SECRETS)
    assert r.returncode == 0 and "token=ghp_github0123456789" in r.stdout
    assert not server.chat_requests()


# --- where a key may go -----------------------------------------------------------------------

class ConnectRecorder:
    """An HTTPS proxy on 127.0.0.1 that records each CONNECT target and refuses it, so a test can
    see where bantam would have sent a request with nothing leaving the machine."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.targets: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(4096).decode("latin-1")
                self.targets.append(head.split(" ")[1] if head.startswith("CONNECT ") else head[:40])
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")


@pytest.mark.parametrize("env,target", [
    ({"LLM_API_KEY": "sk-ant-agent-seed-key", "LLM_MODEL": "claude-sonnet-4-20250514"}, "api.anthropic.com:443"),
    ({"ANTHROPIC_API_KEY": "sk-ant-own-key-123"}, "api.anthropic.com:443"),
    ({"OPENAI_API_KEY": "sk-openai-own-key-1"}, "api.openai.com:443")])
def test_a_key_from_the_environment_goes_only_to_its_own_api(home, env, target):
    proxy = ConnectRecorder()
    r = bantam_here("-p", "hi", "--set", "retry_delays=0", cwd=home,
                   env={**env, "HTTPS_PROXY": proxy.url, "https_proxy": proxy.url, "NO_PROXY": ""})
    assert r.returncode == 1
    assert proxy.targets and set(proxy.targets) == {target}, proxy.targets
    proxy.sock.close()


def test_key_routing_rules(home):
    assert config.load(environ={"LLM_API_KEY": "k1234"}).endpoint == config.ANTHROPIC_ENDPOINT
    assert config.load(environ={"OPENAI_API_KEY": "k1234"}).endpoint == config.OPENAI_ENDPOINT
    cfg = config.load({"api_key": "sk-beside-it"}, environ={})
    assert cfg.endpoint == config.DEFAULT_ENDPOINT and cfg.api_key == "sk-beside-it"  # configured beside it
    cfg = config.load({"endpoint": "http://127.0.0.1:9/v1"}, environ={"OPENAI_API_KEY": "k1234"})
    assert cfg.api_key == "k1234"  # an endpoint the user configured is where the user sent it


def keys_sent(server) -> list[str]:
    """The Authorization headers of every request the server got (the model list's too)."""
    return [r.headers.get("authorization", "") for r in server.requests]


@pytest.mark.parametrize("chosen_by", ["user file", "environment"])
def test_a_project_file_cannot_send_the_environments_key_to_its_own_server(home, chosen_by):
    with FakeServer() as mine, FakeServer() as theirs:
        env = {"OPENAI_API_KEY": "sk-env-key-0123456789"}
        if chosen_by == "user file":
            user = home.parent / "home" / ".config" / "bantam" / "config"
            user.parent.mkdir(parents=True)
            user.write_text(f"endpoint={mine.url}\n")
        else:
            env["LLM_URL"] = mine.url
        write_cfg(home, **base_cfg(mine))  # the user's own project: their endpoint, their key goes
        mine.add(text_reply("from mine"))
        r = bantam_here("-p", "hi", cwd=home, env=env)
        assert r.returncode == 0 and r.stdout == "from mine\n", r.stderr
        assert "Bearer sk-env-key-0123456789" in keys_sent(mine) and "warning" not in r.stderr
        write_cfg(home, **base_cfg(theirs))  # a cloned repository's file points elsewhere
        theirs.add(text_reply("from theirs"))
        r = bantam_here("-p", "hi", cwd=home, env=env)
        assert r.returncode == 0 and r.stdout == "from theirs\n", r.stderr
        assert theirs.requests and not any("sk-env-key" in k for k in keys_sent(theirs))
        warnings = [line for line in r.stderr.splitlines() if "warning" in line]
        assert len(warnings) == 1 and "your OPENAI_API_KEY is not sent" in warnings[0]
        assert ".bantam.cfg:1 sets endpoint=" + theirs.url in warnings[0] and "--endpoint" in warnings[0]
        theirs.add(text_reply("now with the key"))  # the user says so on the command line
        r = bantam_here("-p", "hi", "--endpoint", theirs.url, cwd=home, env=env)
        assert r.stdout == "now with the key\n" and "warning" not in r.stderr
        assert keys_sent(theirs)[-1] == "Bearer sk-env-key-0123456789"


def test_a_project_file_may_name_the_keys_own_api_or_its_own_key(home):
    openai = config.load(directory=write_cfg(home, endpoint=config.OPENAI_ENDPOINT).parent,
                         environ={"OPENAI_API_KEY": "sk-env-0123"})
    assert openai.api_key == "sk-env-0123" and not openai.warning
    write_cfg(home, endpoint="http://127.0.0.1:9/v1", api_key="sk-project-0123")
    os.chmod(home / ".bantam.cfg", 0o600)
    own = config.load(directory=home, environ={"OPENAI_API_KEY": "sk-env-0123"})
    assert own.api_key == "sk-project-0123" and not own.warning
    write_cfg(home, endpoint="http://127.0.0.1:9/v1")
    withheld = config.load(directory=home, environ={"ANTHROPIC_API_KEY": "sk-ant-0123", "LLM_API_KEY": "sk-llm-0123"})
    assert withheld.api_key == "" and "your LLM_API_KEY is not sent" in withheld.warning


# --- piped input ------------------------------------------------------------------------------

def test_piped_input_is_a_prompt_never_a_command(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("I will not run that."))
    r = bantam_here(cwd=home, input="!echo PWNED > pwned.txt; id -un\n")
    assert r.returncode == 0, r.stderr
    assert not (home / "pwned.txt").exists()
    assert server.chat_requests()[0].body["messages"][-1]["content"].startswith("!echo PWNED")
    r = bantam_here("-p", "!cat", cwd=home, input="rm -rf ~\n")
    assert r.returncode == 2 and "a !command takes no piped input" in r.stderr


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--set", "temperature=nan"], "temperature: expected a finite number"),
    (["--set", "temperature=1e400"], "temperature: expected a finite number"),
    (["--set", "max_tokens=NaN"], "max_tokens: expected a finite value"),
    (["--endpoint", "ftp://x"], "endpoint: expected an http:// or https:// URL"),
])
def test_bad_values_are_one_line_and_exit_2(home, args, message):
    r = bantam_here(*args, "-p", "hi", cwd=home)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_an_unknown_tool_is_named_with_its_file_and_line(home):
    (home / ".bantam.cfg").write_text("model=m\ntools=shell_exec,bogus\n")
    r = bantam_here("-p", "hi", cwd=home)
    assert r.returncode == 2 and ".bantam.cfg:2: tools: unknown tool 'bogus'" in r.stderr


def test_a_cfg_value_with_a_line_break_is_refused(home):
    with pytest.raises(ConfigError, match="holds a line break"):
        config.write_value("model", "m\napi_key=stolen", home)
    assert not (home / ".bantam.cfg").exists()


# --- write_file writes data -------------------------------------------------------------------

def test_write_file_keeps_content_byte_for_byte_and_names_bidi_controls(home):
    box = make_toolbox(("write_file",), ToolContext(config.Config()))
    family = "\U0001F468\u200d\U0001F469\u200d\U0001F467"
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # with a zero-width non-joiner
    content = f"line one\r\nfamily {family} {persian}\r\n"
    out = box.execute("write_file", json.dumps({"path": "a.txt", "content": content}, ensure_ascii=False))
    assert not out.is_error and out.content == f"wrote {len(content.encode())} bytes to a.txt"
    assert (home / "a.txt").read_bytes() == content.encode("utf-8")
    trojan = 'access = "user\u202e \u2066// admin\u2069 \u2066"\n'
    out = box.execute("write_file", json.dumps({"path": "b.py", "content": trojan}))
    assert (home / "b.py").read_bytes() == trojan.encode("utf-8")
    assert "bidi control characters (U+202E, U+2066, U+2069)" in out.content


def test_commands_are_still_sanitised(home):
    box = make_toolbox(("shell_exec",), ToolContext(config.Config()))
    out = box.execute("shell_exec", json.dumps({"command": "echo a\u200bb"}))
    assert out.content.startswith("ab\n")


def test_run_subprocess_sees_the_policy_too(home):
    """The controlled run's check commands: the same policy (bantam.runs.tools.clean_env)."""
    pytest.importorskip("pydantic")
    env = {**os.environ, **SECRETS}
    code = ("from bantam.runs.tools import run_argv; import sys, pathlib; "
            "out, rc = run_argv(['env'], pathlib.Path('.'), 20); sys.stdout.write(out.decode())")
    r = subprocess.run([sys.executable, "-c", code], cwd=home, env=env, capture_output=True, text=True, timeout=60)
    assert "PATH=" in r.stdout and "MIRROR_URL=https://mirror.example/simple" in r.stdout
    assert_clean(r.stdout)


# --- controlled runs --------------------------------------------------------------------------

def test_a_run_write_through_a_link_is_refused(home):
    from bantam.runs.tools import TOOLS, Refused, Workspace, in_workspace
    ws = home / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("keep me\n")
    (ws / ".bantam.cfg").write_text("api_key=sk-keep\n")
    os.symlink("notes.txt", ws / "out.txt")          # a link inside the workspace
    os.symlink(".bantam.cfg", ws / "cfg.txt")
    (ws / "sub").mkdir()
    os.symlink("sub", ws / "dir")
    space = in_workspace(Workspace(ws, write_paths=("out.txt", "cfg.txt", "dir/x.txt", "new.txt"))).ctx
    for path in ("out.txt", "cfg.txt", "dir/x.txt"):
        with pytest.raises(Refused, match="symbolic link"):
            TOOLS["write_file"].run({"path": path, "content": "overwritten"}, space)
    assert (ws / "notes.txt").read_text() == "keep me\n" and (ws / ".bantam.cfg").read_text() == "api_key=sk-keep\n"
    assert not (ws / "sub" / "x.txt").exists()
    TOOLS["write_file"].run({"path": "new.txt", "content": "fine"}, space)
    assert (ws / "new.txt").read_text() == "fine"


def test_run_directories_are_private_and_a_named_pipe_is_refused(home):
    ws = home / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("x")
    os.mkfifo(ws / "pipe")
    r = bantam_here("run", "read a.txt", "--workspace", str(ws), "--scripted", str(home / "none.json"), cwd=home)
    assert r.returncode == 2 and "pipe is not a regular file, folder or link" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (home / "runs").exists()
    os.unlink(ws / "pipe")
    (home / "answers.json").write_text(json.dumps(['{"final": "done"}']))
    r = bantam_here("run", "say done", "--workspace", str(ws), "--scripted", str(home / "answers.json"), cwd=home)
    run = next((home / "runs").iterdir())
    assert (home / "runs").stat().st_mode & 0o777 == 0o700 and run.stat().st_mode & 0o777 == 0o700
    for path in run.iterdir():
        if path.is_file():
            assert path.stat().st_mode & 0o777 == 0o600, path


def test_the_daemons_bash_reads_no_secret_and_its_files_hold_none(home):
    from tests.daemon.test_daemon import ModelServer, configure, messages, started, wait_for
    from bantam.daemon.bus import MessageFile
    with ModelServer() as model:
        agent = configure(home / "agent", model, watch="poll")
        model.on("list the environment", tool_reply("BASH", ENV_COMMAND))
        env = {**os.environ, **SECRETS, "ATTOBOT_API_KEY": "sk-attobot-key-0123456"}
        daemon = subprocess.Popen([sys.executable, "-m", "bantam", "daemon", "agent"], cwd=home, env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: started(agent), "start")
            MessageFile(agent / "messages.jsonl").append({"role": "user", "content": "list the environment"})
            result = wait_for(lambda: [m["content"] for m in messages(agent) if m["role"] == "tool"], "the tool")[0]
        finally:
            daemon.terminate()
            daemon.wait(30)
        assert "env-listed" in result and "PATH=" in result
        written = everything_written(home) + json.dumps([r.body for r in model.chat_requests()])
        assert_clean(written)
        assert "sk-attobot-key-0123456" not in written
        assert model.chat_requests()[0].headers["authorization"] == "Bearer sk-attobot-key-0123456"


def test_a_commands_full_output_on_disk_holds_no_known_secret(home):
    """Clipped output is kept whole in ~/.bantam/tool-output; a secret there, even split across
    the pieces the pipe delivers, is *** as everywhere else."""
    from bantam import envpolicy
    envpolicy.register_secret("sk-spool-secret-0123456789")
    box = make_toolbox(("shell_exec",), ToolContext(config.Config(tool_output_limit=1000)))
    command = "for i in $(seq 1 3000); do printf 'line %s sk-spool-secret-0123456789\\n' $i; done"
    result = box.execute("shell_exec", json.dumps({"command": command})).content
    spool = Path(result.split("full output in ")[1].split(" ...]")[0])
    text = spool.read_text()
    assert text.count("***") == 3000 and "sk-spool" not in text
    assert "sk-spool" not in result and "line 3000 ***" in result


def test_the_daemon_sends_a_key_only_to_its_own_endpoint(home):
    from bantam.daemon import settings
    agent = home / "agent"
    agent.mkdir()
    (agent / "config.json").write_text(json.dumps({"model": "m"}))
    _, cfg = settings.load(agent / "config.json", environ={"OPENAI_API_KEY": "sk-openai-123456"})
    assert (cfg.endpoint, cfg.api_key) == ("https://api.openai.com/v1", "sk-openai-123456")  # its own API
    (agent / "config.json").write_text(json.dumps({"model": "m", "api_base": "https://api.openai.com/v1"}))
    _, cfg = settings.load(agent / "config.json", environ={"OPENAI_API_KEY": "sk-openai-123456"})
    assert cfg.api_key == "sk-openai-123456"  # an api_base the user wrote is where the user sent it
    _, cfg = settings.load(agent / "config.json", environ={"ATTOBOT_API_KEY": "sk-attobot-123456"})
    assert cfg.api_key == "sk-attobot-123456"


def test_the_policy_keeps_what_is_no_secret():
    from bantam.envpolicy import tool_env
    env = tool_env(environ={"PATH": "/bin", "GIT_AUTHOR_NAME": "Jane Developer", "PWD": "/w", "SSH_AUTH_SOCK": "/s",
                    "AWS_SECRET_ACCESS_KEY": "x" * 20, "NPM_TOKEN": "y" * 20, "GH_PAT": "z" * 20,
                    "LANG": "C.UTF-8", "HTTP_PROXY": "http://u:p4ssw0rd@proxy:3128"})
    assert {k: env[k] for k in ("PATH", "GIT_AUTHOR_NAME", "PWD", "LANG")} == \
        {"PATH": "/bin", "GIT_AUTHOR_NAME": "Jane Developer", "PWD": "/w", "LANG": "C.UTF-8"}
    assert env["HTTP_PROXY"] == "http://proxy:3128"
    assert not {"SSH_AUTH_SOCK", "AWS_SECRET_ACCESS_KEY", "NPM_TOKEN", "GH_PAT"} & set(env)
