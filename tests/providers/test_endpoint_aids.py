"""A small model served by an endpoint gets the aids a request can carry when local_aids names a
profile: bantam's command line against a real local server speaking the OpenAI wire format."""
from tests.conftest import bantam_here, base_cfg, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply

TASK = "Run ./quiet.sh, then write the number 42 into answer.txt."


def run(home, server, *settings: str):
    write_cfg(home, **base_cfg(server, sandbox="off"))
    server.add(tool_reply("shell_exec", {"command": "true"}),
               tool_reply("write_file", {"path": "answer.txt", "content": "42"}, call_id="call_2"),
               text_reply("done"))
    r = bantam_here(*[a for s in settings for a in ("--set", s)], "-p", TASK, cwd=home)
    assert r.returncode == 0, r.stderr
    return server.chat_requests()


def tool_names(request) -> dict:
    return {t["function"]["name"]: t["function"] for t in request.body.get("tools", [])}


def test_a_named_profile_sends_the_worked_exchange_whole_writes_and_a_required_call(home, server):
    first, second, third = run(home, server, "local_aids=qwen2.5-coder")
    messages = first.body["messages"]
    # the worked exchange comes after the system prompt and before the request, as the bundled
    # runtime shows it; the request is last
    assert messages[0]["role"] == "system" and messages[-1] == {"role": "user", "content": TASK}
    assert any(m.get("tool_calls") for m in messages[1:-1]), messages
    assert "offset" not in tool_names(first)["write_file"]["parameters"]["properties"]
    assert first.body["tool_choice"] == "required"  # the request needs the machine: a call first
    # a command that printed nothing reads "(no output)" to the model
    assert second.body["messages"][-1]["content"].startswith("(no output)\n\nexit: 0")
    assert (home / "answer.txt").read_text() == "42"
    # each request extends the last (the exchange is chosen by the first request): a prompt cache serves it
    for before, after in ((first, second), (second, third)):
        assert after.body["messages"][:len(before.body["messages"])] == before.body["messages"]


def test_auto_gives_an_endpoint_no_aids(home, server):
    first, second, _ = run(home, server)
    assert [m["role"] for m in first.body["messages"]] == ["system", "user"]
    assert "offset" in tool_names(first)["write_file"]["parameters"]["properties"]
    assert "tool_choice" not in first.body
    assert second.body["messages"][-1]["content"] == "\n\nexit: 0"


def test_an_unknown_profile_is_one_line_naming_the_known_ones(home, server):
    write_cfg(home, **base_cfg(server))
    r = bantam_here("--set", "local_aids=qwen9", "-p", "hi", cwd=home)
    assert r.returncode == 2
    assert "local_aids: no profile 'qwen9'" in r.stderr and "qwen2.5-coder" in r.stderr
    assert "Traceback" not in r.stderr and not server.chat_requests()
