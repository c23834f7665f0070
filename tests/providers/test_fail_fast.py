"""Issue 32: failures no retry can fix end at once, in one line that names the URL and what to do;
the rest is still retried. And a server that ignores `tools` is named once, with the likely cause.

Real sockets throughout: a closed port on 127.0.0.1 (refused), a name under `.invalid` (RFC 6761:
never resolves), the fake HTTP server for error statuses and answers, bantam as a real process."""
import json
import socket

import pytest

from bantam.config import Config
from bantam.errors import ProviderError, Unreachable
from bantam.events import Notice, Retry
from bantam.providers import RequestOptions
from bantam.providers.openai import OpenAIProvider
from bantam.providers.retry import with_retries
from tests.conftest import base_cfg, run_bantam, wait_for, write_cfg
from tests.daemon.test_daemon import answered, configure, daemons, life, model, started  # noqa: F401
from tests.fakes.openai_server import completion, json_reply, text_reply, tool_reply

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def direct(home, monkeypatch):
    """The home fixture with no proxy in the environment: the failures must be the endpoint's."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    return home


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed: connecting is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_error_line(r) -> str:
    """bantam failed with exit 1 and exactly one line on stderr, no traceback, no retry."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and r.stdout == "", r
    assert len(lines) == 1 and "Traceback" not in r.stderr and "[retry" not in r.stderr, r.stderr
    return lines[0]


# --- failures no retry can fix -----------------------------------------------------------------

def test_refused_on_this_machine_fails_at_once_naming_the_url_and_the_fix(direct):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    write_cfg(direct, endpoint=url, model="m", retry_delays="0,0,0,0")
    line = one_error_line(run_bantam("-p", "hi", cwd=direct))
    assert f"cannot connect to {url}/chat/completions: connection refused" in line
    assert "is the server running? start it or set endpoint (api_base)" in line


def test_an_unknown_host_fails_at_once_naming_the_host(direct):
    # RFC 6761: a name under .invalid never resolves, with or without a network
    write_cfg(direct, endpoint="http://bantam-test.invalid/v1", model="m", retry_delays="0,0,0,0")
    line = one_error_line(run_bantam("-p", "hi", cwd=direct))
    assert "cannot connect to http://bantam-test.invalid/v1/chat/completions" in line
    assert "the host bantam-test.invalid is unknown" in line


def test_a_404_on_a_path_without_v1_asks_for_v1_and_is_sent_once(direct, server):
    root = server.url.removesuffix("/v1")  # e.g. Ollama's port given without /v1
    server.add(*[json_reply({"error": "404 page not found"}, status=404)] * 3)
    write_cfg(direct, **base_cfg(server, endpoint=root))
    line = one_error_line(run_bantam("-p", "hi", cwd=direct))
    assert f"{root}/chat/completions does not exist; did you mean {root}/v1?" in line
    assert len(server.chat_requests()) == 1


def test_a_404_naming_the_model_names_the_url_but_asks_for_nothing(direct, server):
    server.add(json_reply({"error": {"message": "The model `m` does not exist"}}, status=404))
    write_cfg(direct, **base_cfg(server))
    line = one_error_line(run_bantam("-p", "hi", cwd=direct))
    assert "The model `m` does not exist" in line and f"at {server.url}/chat/completions" in line
    assert "did you mean" not in line


def test_no_key_and_a_wrong_key_read_differently(direct, server):
    refusal = json_reply({"error": {"message": "invalid api key"}}, status=401)
    server.add(refusal, refusal)
    write_cfg(direct, **base_cfg(server))
    line = one_error_line(run_bantam("-p", "hi", cwd=direct))
    assert "no API key was sent: set OPENAI_API_KEY, or api_key=" in line

    cfg = write_cfg(direct, **base_cfg(server, api_key="sk-wrong-4242"))
    cfg.chmod(0o600)
    r = run_bantam("-p", "hi", cwd=direct)
    line = one_error_line(r)
    assert f"the API key was refused by {server.url.split('/')[2]}" in line
    assert "sk-wrong-4242" not in r.stderr + r.stdout
    assert len(server.chat_requests()) == 2  # one request each: a refusal is never retried


def test_what_can_recover_is_still_retried(direct, server):
    busy = json_reply({"error": {"message": "busy"}}, status=503)
    server.add(busy, json_reply({"error": {"message": "slow down"}}, status=429), text_reply("fine"))
    write_cfg(direct, **base_cfg(server))
    r = run_bantam("-p", "hi", cwd=direct)
    assert r.returncode == 0 and r.stdout == "fine\n", r.stderr
    assert len(server.chat_requests()) == 3


def test_an_endpoint_that_may_come_back_is_retried_only_a_few_times():
    """A remote refusal or a DNS hiccup (Unreachable with retries) gets its few retries, not nine."""
    calls, retries = [], []

    def call():
        calls.append(1)
        raise Unreachable("cannot connect to https://example.net/v1: connection refused", retries=2)
    with pytest.raises(Unreachable):
        with_retries(call, lambda e: retries.append(e) if isinstance(e, Retry) else None,
                     [0.0] * 9, sleep=lambda s: None)
    assert len(calls) == 3 and len(retries) == 2


def test_the_provider_marks_a_local_refusal_not_worth_retrying():
    provider = OpenAIProvider(Config(endpoint=f"http://localhost:{closed_port()}/v1", model="m"))
    with pytest.raises(ProviderError) as info:
        provider.complete([{"role": "user", "content": "hi"}], [], lambda e: None)
    assert isinstance(info.value, Unreachable) and not info.value.retryable


def test_the_daemon_outlives_a_refused_server_and_says_so_once(home, model, daemons):  # noqa: F811
    """The daemon retries by design: the turn fails at once, is tried again later, and the hint is
    logged once (not once per attempt) until the server is back."""
    agent = configure(home / "agent", model, retry_turn_s=0.2, retry_turn_max_s=0.5)
    model.go_down()
    d = daemons()
    wait_for(lambda: started(agent) and life(agent).count("attempt 4 failed") == 1, "four failed attempts")
    assert life(agent).count("cannot reach the model") == 1
    assert "is the server running? start it or set endpoint (api_base)" in life(agent)
    model.come_back()
    wait_for(answered(agent, "ok"), "the start banner answered once the server is back")
    assert d.stop() == 0


# --- a server that ignores `tools` -------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


def notices(server, folder, prompts: list[str]) -> list[str]:
    """Each prompt sent in one session (one provider), with tools offered; the notices given."""
    provider = OpenAIProvider(Config(endpoint=server.url, model="test-model"))
    seen: list[str] = []
    messages: list[dict] = []
    for prompt in prompts:
        messages.append({"role": "user", "content": prompt})
        reply = provider.complete(messages, TOOLS, lambda e: seen.append(e.message) if isinstance(e, Notice) else None,
                                  RequestOptions(folder=folder))
        messages.append(reply.message)
        for call in reply.message.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "(the file)"})
    return [n for n in seen if "may ignore `tools`" in n]


def test_a_local_server_that_never_calls_a_tool_for_a_named_file_is_named_once(tmp_path, server):
    (tmp_path / "notes.txt").write_text("the real notes\n")
    server.add(text_reply("notes.txt lists three tasks."), text_reply("It also says hello."))
    told = notices(server, tmp_path, ["what does notes.txt say?", "and what else is in notes.txt?"])
    assert len(told) == 1, told
    assert "the prompt names notes.txt" in told[0] and "--jinja" in told[0] and server.url in told[0]


def test_tool_call_syntax_written_as_text_is_named(tmp_path, server):
    written = '<tool_call>\n{"name": "read_file", "arguments": {"path": "x"}}\n</tool_call>'
    server.add(json_reply(completion(written)))
    told = notices(server, tmp_path, ["hello"])
    assert len(told) == 1 and "wrote a tool call as plain text" in told[0]


@pytest.mark.parametrize("prompt,replies", [
    # the server parses calls: a later answer without one is the model's choice
    ("what does notes.txt say?", [tool_reply("read_file", {"path": "notes.txt"}), text_reply("tasks")]),
    ("what does missing.txt say?", [text_reply("I see no such file.")]),   # no such file
    ("what is 2 + 2?", [text_reply("4")]),                                 # no file named
    ("explain JSON: {\"name\": \"x\"}", [text_reply('{"name": "x", "arguments": 1} is JSON')]),  # not a tool's name
])
def test_no_notice_where_tools_work_or_none_was_needed(tmp_path, server, prompt, replies):
    (tmp_path / "notes.txt").write_text("the real notes\n")
    server.add(*replies)
    assert notices(server, tmp_path, [prompt, "thanks"][:len(replies)]) == []


def test_the_notice_reaches_the_user_once_on_stderr(direct, server):
    (direct / "todo.md").write_text("- ship it\n")
    server.add(text_reply("todo.md says: buy milk."))
    write_cfg(direct, **base_cfg(server))
    r = run_bantam("-p", "summarise todo.md", cwd=direct)
    assert r.returncode == 0 and r.stdout == "todo.md says: buy milk.\n"
    assert r.stderr.count("may ignore `tools`") == 1, r.stderr
    assert json.loads(server.chat_requests()[0].raw)["tools"]  # tools were offered
