"""What bantam shows of the model it talks to: its name and its context window, as a real bantam
process prints them against a real server on 127.0.0.1."""
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, usage

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
