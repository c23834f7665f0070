"""What bantam shows of the model it talks to: its name and its context window, as a real bantam
process prints them against a real server on 127.0.0.1."""
import pytest

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, json_reply, text_reply, usage

GGUF = "/srv/models/" + "quantised/" * 6 + "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def test_a_model_named_by_its_gguf_path_is_shown_by_its_file_name(home):
    # llama-cpp-python's server lists the path it loaded as the model's id
    with FakeServer(models=[{"id": GGUF, "object": "model", "owned_by": "me"}]) as server:
        write_cfg(home, **base_cfg(server, model=GGUF))
        server.add(text_reply("hi", usage(10, 1)))
        r = run_bantam("-p", "hello", cwd=home)
    assert r.returncode == 0, r.stderr
    assert "[qwen2.5-coder-1.5b-instruct-q4_k_m: 10 prompt" in r.stderr and "/srv/models" not in r.stderr
    assert server.chat_requests()[0].body["model"] == GGUF  # the server still gets the name it knows


def llama_server(**answers) -> FakeServer:
    """llama.cpp's llama-server as it answers: its model list names the file it loaded, whatever
    model name the client sends."""
    return FakeServer(models=[{"id": GGUF, "object": "model", "owned_by": "llamacpp",
                               "meta": {"n_ctx_train": 32768}}], **answers)


@pytest.mark.parametrize("answers", [{"props": {"default_generation_settings": {"n_ctx": 2048}}},
                                     {"slots": [{"id": 0, "n_ctx": 2048}, {"id": 1, "n_ctx": 2048}]}],
                         ids=["props", "slots"])
def test_llama_cpps_server_tells_the_window_it_runs_with(home, answers):
    with llama_server(**answers) as server:
        write_cfg(home, **base_cfg(server))  # model=test-model: not the name the server lists
        server.add(text_reply("one", usage(615, 1)), text_reply("two", usage(615, 1)))
        first = run_bantam("-p", "a", cwd=home)
        second = run_bantam("-p", "b", cwd=home)
        gets = [q.path for q in server.requests if q.method == "GET"]
    assert "context: 615/2048 (30.0%)" in first.stderr, first.stderr
    assert "context: 615/2048 (30.0%)" in second.stderr, second.stderr
    assert gets.count("/v1/models") == 1  # remembered for the endpoint and model: not asked again


def test_an_unknown_window_is_said_and_a_refusal_teaches_it(home):
    # llama-cpp-python's server: no window in its model list, no /props or /slots
    refusal = json_reply({"error": {"message": "Requested tokens (2100) exceed context window of 2048",
                                    "type": "invalid_request_error"}}, status=400)
    with FakeServer(models=[{"id": GGUF, "object": "model", "owned_by": "me"}]) as server:
        write_cfg(home, **base_cfg(server))
        server.add(text_reply("one", usage(615, 1)), refusal, text_reply("two", usage(615, 1)))
        unknown = run_bantam("-p", "a", cwd=home)
        refused = run_bantam("-p", "b", cwd=home)
        known = run_bantam("-p", "c", cwd=home)
    assert "context: 615/? (window unknown)]" in unknown.stderr and "200000" not in unknown.stderr, unknown.stderr
    assert refused.returncode != 0
    assert "context: 615/2048 (30.0%)" in known.stderr, known.stderr
