"""Where a request goes and which model it names, when the user gave only part of it.

LLM_URL (the Agent seed's variable) is the URL to post to, as given, unless it is only an API base
(no path, or a version such as `/v1`); an Anthropic endpoint with no model configured gets a Claude
Haiku model, never the OpenAI-compatible default; an empty model is refused where it is set.
Real local servers in each wire format, bantam as a real process."""
from __future__ import annotations

import pytest

from bantam import config
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes import anthropic_server as anth
from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.openai_server import text_reply

KEY = {"LLM_API_KEY": "k-gateway-0123456789"}


def test_llm_url_at_messages_with_no_model_sends_a_claude_model(home):
    with AnthropicServer() as gateway:
        gateway.add(anth.text_reply("from claude"))
        r = run_bantam("-p", "x", cwd=home, env={**KEY, "LLM_URL": gateway.url + "/messages"})
        assert r.returncode == 0 and r.stdout == "from claude\n", r.stderr
        (request,) = gateway.messages_requests()
        assert request.body["model"] == "us.anthropic.claude-haiku-4-5-20251001-v1:0"
        assert request.headers["x-api-key"] == KEY["LLM_API_KEY"]


@pytest.mark.parametrize("env,model", [
    ({**KEY, "LLM_URL": "https://api.anthropic.com/v1/messages"}, "claude-haiku-4-5"),  # Anthropic's name
    ({**KEY, "LLM_URL": "http://gw.example/claude"}, "us.anthropic.claude-haiku-4-5-20251001-v1:0"),
    ({**KEY, "LLM_URL": "http://gw.example/claude", "LLM_MODEL": "mine"}, "mine"),  # a model given wins
    ({"ANTHROPIC_API_KEY": "k-0123456789abcdef"}, "claude-haiku-4-5"),
    ({"OPENAI_API_KEY": "k-0123456789abcdef"}, "gpt-4o-mini"),
    ({"LLM_URL": "http://gw.example/v1/chat/completions"}, "openrouter/free"),  # OpenAI-compatible
])
def test_the_default_model_belongs_to_the_endpoint(home, env, model):
    assert config.load(environ=env).model == model


def test_an_anthropic_endpoint_in_a_file_gets_a_claude_model_too(home):
    with AnthropicServer() as server:
        server.add(anth.text_reply("ok"))
        write_cfg(home, endpoint=server.url + "/messages", retry_delays="0")
        r = run_bantam("-p", "x", cwd=home)
        assert r.returncode == 0, r.stderr
        assert server.messages_requests()[0].body["model"] == "claude-haiku-4-5"


def test_llm_url_at_a_path_of_its_own_is_posted_to_as_given(home):
    with AnthropicServer() as gateway:
        gateway.gateway_path = "/v1/custom/path"
        gateway.add(anth.text_reply("as given"))
        r = run_bantam("-p", "x", cwd=home, env={**KEY, "LLM_URL": gateway.url + "/custom/path"})
        assert r.returncode == 0 and r.stdout == "as given\n", r.stderr
        assert [req.path for req in gateway.requests if req.method == "POST"] == ["/v1/custom/path"]


@pytest.mark.parametrize("tail,posted", [("", "/v1/messages"), ("/v1", "/v1/messages"),
                                         ("/v1/messages", "/v1/messages"), ("/claude/", "/claude")])
def test_llm_url_as_an_api_base_still_gets_messages(home, tail, posted):
    with AnthropicServer() as gateway:
        root = gateway.url.removesuffix("/v1")
        gateway.gateway_path = "/claude"
        gateway.add(anth.text_reply("ok"))
        r = run_bantam("-p", "x", cwd=home, env={**KEY, "LLM_URL": root + tail, "LLM_MODEL": "m"})
        assert r.returncode == 0, r.stderr
        assert [req.path for req in gateway.requests if req.method == "POST"] == [posted]


def test_a_file_endpoint_keeps_being_a_base(home, server):
    """bantam's own `endpoint=` is an API base (`/chat/completions` is appended), as documented."""
    server.add(text_reply("ok"))
    write_cfg(home, **base_cfg(server))
    assert run_bantam("-p", "x", cwd=home).returncode == 0
    assert server.chat_requests()[0].path == "/v1/chat/completions"


@pytest.mark.parametrize("where,args,place", [
    ("file", (), ".bantam.cfg:2: model"),
    ("flag", ("--model", ""), "command line: model"),
    ("set", ("--set", "model= "), "command line: model"),
])
def test_an_empty_model_is_refused_where_it_is_set(home, server, where, args, place):
    values = base_cfg(server)
    if where == "file":
        values["model"] = ""
    write_cfg(home, **values)
    server.add(text_reply("never"))
    r = run_bantam(*args, "-p", "x", cwd=home)
    assert r.returncode == 2 and r.stdout == "" and not server.requests, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"bantam: {place}: empty; name a model (`bantam models` lists the endpoint's) or leave the key "
        f"out for the default"]
