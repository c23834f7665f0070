"""The local provider with real llama.cpp inference on the bundled SmolLM2-135M-Instruct."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from bantam import loop
from bantam.compact import is_context_overflow
from bantam.config import Config
from bantam.errors import APIError, ConfigError, ProviderError
from bantam.events import Text
from bantam.providers.local import LocalProvider, available, bundled_model
from bantam.tools import ToolContext, make_toolbox
from tests.conftest import run_bantam, write_cfg

pytestmark = pytest.mark.skipif(not available(), reason="the local extra is not installed")
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def local(**values):
    return LocalProvider(Config(provider="local", temperature=0.0, **values))


def test_streamed_answer_with_real_token_counts():
    events = []
    # (a 135M model wanders on a bare "What is 2+2?"; asked for a number it answers one)
    reply = local().complete([SYSTEM, {"role": "user", "content": "What is 2+2? Answer with a number."}], [],
                             events.append)
    pieces = [e.text for e in events if isinstance(e, Text)]
    assert len(pieces) > 1 and "".join(pieces).strip() == reply.message["content"]
    assert "4" in reply.message["content"] or "four" in reply.message["content"].lower()
    assert reply.usage.prompt_tokens > 10 and 0 < reply.usage.completion_tokens < 100


def test_grammar_constrained_tool_call_runs_and_its_result_goes_back(home):
    cfg = Config(provider="local", temperature=0.0)
    toolbox = make_toolbox(("shell_exec",), ToolContext(cfg))
    messages = [SYSTEM, {"role": "user", "content": "Show the current date with the date command."}]
    forced = LocalProvider(cfg.with_values(forward={"tool_choice": "required"}))
    reply = forced.complete(messages, toolbox.schemas(), lambda e: None)
    call = reply.message["tool_calls"][0]
    assert call["function"]["name"] == "shell_exec" and reply.finish_reason == "tool_calls"
    command = json.loads(call["function"]["arguments"])["command"]
    assert isinstance(command, str) and command
    outcome = toolbox.execute("shell_exec", call["function"]["arguments"])
    assert outcome.content.endswith(tuple(f"exit: {n}" for n in range(256)))
    messages += [reply.message, {"role": "tool", "tool_call_id": call["id"], "content": outcome.content}]
    answer = LocalProvider(cfg).complete(messages, toolbox.schemas(), lambda e: None)
    assert answer.message.get("tool_calls") or answer.message["content"]
    assert answer.usage.cached_tokens >= reply.usage.prompt_tokens  # the earlier prompt was reused


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tool_calls_parse_even_at_high_temperature(home, seed):
    cfg = Config(provider="local", temperature=1.5, forward={"tool_choice": "required", "seed": seed})
    toolbox = make_toolbox(("shell_exec", "write_file"), ToolContext(cfg))
    reply = LocalProvider(cfg).complete([SYSTEM, {"role": "user", "content": "Save a note."}],
                                        toolbox.schemas(), lambda e: None)
    function = reply.message["tool_calls"][0]["function"]
    args = json.loads(function["arguments"])
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in toolbox.schemas()}[function["name"]]
    assert set(schema["required"]) <= set(args)
    assert all(isinstance(args[k], str) for k in schema["required"])


def test_prefix_reuse_across_turns():
    provider = local(forward={"max_tokens": 24})
    messages = [SYSTEM]
    prompts = []
    for question in ("Name a colour.", "Name an animal.", "Name a fruit."):
        messages.append({"role": "user", "content": question})
        reply = provider.complete(messages, [], lambda e: None)
        messages.append({"role": "assistant", "content": reply.message["content"] or "."})
        prompts.append(reply.usage)
    # each turn re-reads only what is new: the whole previous prompt comes from the KV cache
    assert prompts[1].cached_tokens >= prompts[0].prompt_tokens
    assert prompts[2].cached_tokens >= prompts[1].prompt_tokens


def test_context_overflow_is_the_error_compaction_knows():
    provider = local(n_ctx=512)
    long = [SYSTEM, {"role": "user", "content": "word " * 600}]
    with pytest.raises(APIError) as info:
        provider.complete(long, [], lambda e: None)
    assert is_context_overflow(info.value)


def test_bad_model_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        local(model_path=str(tmp_path / "missing.gguf"))
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(ConfigError, match="is not a GGUF model file"):
        local(model_path=str(tmp_path / "notes.gguf"))
    (tmp_path / "cut.gguf").write_bytes(bundled_model().read_bytes()[:1_000_000])
    provider = local(model_path=str(tmp_path / "cut.gguf"))
    with pytest.raises(ProviderError, match="cannot load the model"):
        provider.complete([SYSTEM, {"role": "user", "content": "hi"}], [], lambda e: None)


def test_without_the_extra_a_one_line_hint(home):
    code = ("import sys; sys.modules['llama_cpp'] = None; from bantam.cli import main; "
            "sys.exit(main(['--provider', 'local', '-p', 'hi']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=home, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "pip install 'bantam[local]'" in r.stderr


def test_embedded_default_with_nothing_configured(home):
    r = run_bantam("--set", "temperature=0", "-p", "What is the capital of France?", cwd=home, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "no endpoint configured: answering with SmolLM2-135M-Instruct on this machine" in r.stderr  # conftest's pick
    assert "[SmolLM2-135M-Instruct.Q4_1: " in r.stderr and "/8192 (" in r.stderr


def test_the_notice_names_the_model_that_answers(home):
    """With model_path= set, the notice names that file (without its folder and `.gguf`), not the
    embedded default."""
    from bantam.bundled import SMOLLM2, model_file
    deep = home / "models" / "a" / "rather" / "long" / "folder"
    deep.mkdir(parents=True)
    (deep / "small-chat.gguf").symlink_to(model_file(SMOLLM2))
    r = run_bantam("--set", f"model_path={deep / 'small-chat.gguf'}", "--set", "max_tokens=16", "-p", "Say hi.",
                   cwd=home, timeout=300)  # (an answer cut at max_tokens exits 1: only the notice matters here)
    assert "answering with small-chat on this machine" in r.stderr, r.stderr
    assert "[small-chat: " in r.stderr and str(deep) not in r.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_llama_cpp_server_end_to_end(home, tmp_path):
    """bantam's OpenAI provider against llama.cpp's own OpenAI-compatible server."""
    pytest.importorskip("llama_cpp.server")
    port = free_port()
    log = tmp_path / "server.log"  # a file, not a pipe: the server's chatter must never block it
    with open(log, "wb") as sink:
        server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_model()),
                                   "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
                                  stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
        write_cfg(home, endpoint=f"http://127.0.0.1:{port}/v1", model="smollm2", temperature="0",
                  max_tokens="40", tools="")
        r = run_bantam("--json", "-p", "What is 2+2?", cwd=home)
        assert r.returncode == 0, r.stderr
        events = [json.loads(line) for line in r.stdout.splitlines()]
        texts = [e["text"] for e in events if e["type"] == "text"]
        assert len(texts) > 1 and events[-1]["type"] == "done" and events[-1]["text"] == "".join(texts)
        assert events[-1]["text"].strip()  # (this server sends no usage in its stream)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_tool_call_cut_at_the_output_limit_is_reported_as_cut_not_a_crash(home):
    cfg = Config(provider="local", temperature=0.0, forward={"tool_choice": "required", "max_tokens": 6})
    toolbox = make_toolbox(("shell_exec",), ToolContext(cfg))
    reply = LocalProvider(cfg).complete([SYSTEM, {"role": "user", "content": "List the files."}],
                                        toolbox.schemas(), lambda e: None)
    assert reply.finish_reason == "length" and reply.message["tool_calls"]  # the loop never runs it


def test_a_conversation_outgrowing_the_first_context_keeps_its_cache_and_its_answers(monkeypatch):
    # the context starts small (llama.cpp allocates and clears all of it at the start) and grows
    # when a request's prompt and output budget do not fit: the same answers as a context made
    # whole at once, and the first turn's cells kept through the move
    from bantam.providers import local as runtime
    # a first context of 512 rather than 2,048: the same move for a quarter of the tokens read
    monkeypatch.setattr(runtime, "FIRST_CTX", 512)
    question = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    long = "The quick brown fox jumps over the lazy dog. " * 50 + "Which animal jumps?"

    def conversation():
        monkeypatch.setattr(runtime, "_models", {})  # a model of its own, with the context it starts with
        provider = local(forward={"max_tokens": 16})
        first = provider.complete(question, [], lambda e: None)
        sizes = [provider.llama.n_ctx()]
        turns = question + [first.message, {"role": "user", "content": long}]
        second = provider.complete(turns, [], lambda e: None)
        return first, second, sizes + [provider.llama.n_ctx()]

    start = runtime.FIRST_CTX
    grown = conversation()
    monkeypatch.setattr(runtime, "FIRST_CTX", runtime.DEFAULT_CTX)
    whole = conversation()
    assert grown[2] == [start, 2 * start] and whole[2] == [runtime.DEFAULT_CTX] * 2
    assert grown[1].usage.prompt_tokens > start - 16  # it did not fit the first context
    assert grown[0].message == whole[0].message and grown[1].message == whole[1].message
    assert grown[1].usage.cached_tokens >= grown[0].usage.prompt_tokens  # the first turn was not read again
