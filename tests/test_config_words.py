"""Issue 32, configuration: what a user types is read as they meant it, or they are told.

A misspelled key is named with the nearest key (file:line, command line, /cfg) and is not sent to
the API; fields meant for the API go by a deliberate route (a request field's own name, or
`request.NAME`). Which values are secret is the schema's word, not a name's substring. /cfg echoes
an alias it wrote. Seed 001's BANTAM_TOOLS_DIR beats the files. `tools=` takes every name a tool
call takes. Seed 004's LLM_URL picks its provider by seed 004's rule. A bad value names its key once.
"""
from __future__ import annotations

import json

from bantam import config, trust
from bantam.config import load
from tests.conftest import base_cfg, bantam_here, write_cfg
from tests.fakes import anthropic_server
from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.openai_server import FakeServer, text_reply


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("bantam: warning:")]


def test_a_misspelled_key_in_a_file_is_named_with_its_line_and_not_sent(home, server):
    write_cfg(home, **base_cfg(server, tempreature="0.5", top_k="40", **{"request.vendor_flag": "1"}))
    server.add(text_reply("ok"))
    r = bantam_here("-p", "x", cwd=home)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert warnings(r.stderr) == ["bantam: warning: .bantam.cfg:4: tempreature: not a configuration key, "
                                  "ignored (did you mean temperature?)"]
    body = server.chat_requests()[0].body
    assert "tempreature" not in body and body["temperature"] == 0.7
    assert body["top_k"] == 40 and body["vendor_flag"] == 1  # a request field, and request.NAME


def test_a_misspelled_set_flag_is_named_once_and_an_unknown_field_is_forwarded(home, server):
    # DESIGN: keys bantam does not use are forwarded to the API; a near miss of one it does use is
    # a misspelling, ignored with one line
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("ok"))
    r = bantam_here("--set", "tempreature=0.5", "--set", "frobnicate=1", "-p", "x", cwd=home)
    assert r.returncode == 0, r.stderr
    assert warnings(r.stderr) == [
        "bantam: warning: command line: tempreature: not a configuration key, ignored (did you mean temperature?)"]
    body = server.chat_requests()[0].body
    assert "tempreature" not in body and body["frobnicate"] == 1


def test_a_bad_set_value_names_the_key_once_with_the_type(home, server):
    write_cfg(home, **base_cfg(server))
    r = bantam_here("--set", "temperature=hot", "-p", "x", cwd=home)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["bantam: command line: temperature: expected a number, got 'hot'"]
    assert server.chat_requests() == []


def config_lines(home, env=None) -> dict[str, str]:
    r = bantam_here("config", cwd=home, env=env)
    assert r.returncode == 0, r.stderr
    return {line.split(" = ")[0]: line.split(" = ", 1)[1] for line in r.stdout.splitlines()}


def test_secrets_come_from_the_schema_not_from_a_name(home, server):
    write_cfg(home, **base_cfg(server, api_key="sk-project-0123456789", web_password="hunter2-pass",
                                max_tokens_limit="4096", max_tokens="100",
                                **{"request.x_auth": "sk-proj-abcdefghijklmnop0123", "alias.fast": "vendor/fast"}))
    shown = config_lines(home)
    assert shown["max_tokens_limit"] == "4096  (.bantam.cfg:6)"  # TOKEN in a name is no secret
    assert shown["max_tokens"] == "100  (.bantam.cfg:7)"
    assert shown["api_key"] == "***  (.bantam.cfg:4)" and shown["web_password"].startswith("***  (")
    assert shown["request.x_auth"].startswith("***  (")  # a value shaped like a key
    assert shown["alias.fast"] == "vendor/fast  (.bantam.cfg:9)"
    assert "sk-proj" not in json.dumps(shown) and "hunter2" not in json.dumps(shown)
    assert config.secret("telegram_token", "") is False  # outside this schema: the value decides
    assert config.secret("x", "claude-haiku-4-5-20251001") is False
    assert config.secret("x", "ghp_" + "a1B2" * 9) is True


def test_cfg_echoes_an_alias_and_refuses_a_misspelling(home, server):
    from tests.test_repl import Term
    write_cfg(home, **base_cfg(server, web_password="hunter2-pass"))
    term = Term(home, NO_COLOR="1")
    term.enter("/cfg --global alias.fast some/model")
    term.expect("alias.fast=some/model (written to ")
    term.enter("/cfg tempreature 0.5")
    term.expect("tempreature: not a configuration key, not written (did you mean temperature?)")
    term.enter("/cfg web_password")
    term.expect("web_password=***")
    term.enter("/cfg max_tokens_limit")
    term.expect("max_tokens_limit=32768")
    term.quit()
    assert "tempreature" not in (home / ".bantam.cfg").read_text()
    user = home.parent / "home" / ".config" / "bantam" / "config"
    assert user.read_text() == "alias.fast=some/model\n"


def test_the_tools_dir_variable_beats_every_file(home, tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    env = {"BANTAM_TOOLS_DIR": str(mine)}
    user = home.parent / "home" / ".config" / "bantam" / "config"
    user.parent.mkdir(parents=True)
    user.write_text(f"bantam_tools_dir={theirs}\n")
    assert load(environ=env).bantam_tools_dir == str(mine)  # over the user's file
    write_cfg(home, bantam_tools_dir=str(theirs))
    trust.trust(home, str(theirs))
    assert load(environ=env).bantam_tools_dir == str(mine)  # over a trusted project's file
    trust.revoke(trust.folder_of(home))
    untrusted = load(environ=env)  # an untrusted file has nothing to loosen: nothing was ignored
    assert untrusted.bantam_tools_dir == str(mine) and not untrusted.ignored and not untrusted.warning
    assert load({"bantam_tools_dir": str(theirs)}, environ=env).bantam_tools_dir == str(theirs)  # a flag wins
    shown = config_lines(home, env=env)
    assert shown["bantam_tools_dir"] == f"{mine}  (environment variable BANTAM_TOOLS_DIR)"


def test_tools_takes_every_name_a_tool_call_takes(home, server):
    assert load({"tools": "run_shell,write_file,shell_exec"}, environ={}).tools == ("shell_exec", "write_file")
    write_cfg(home, **base_cfg(server, tools="run_shell"))
    server.add(text_reply("ok"))
    r = bantam_here("-p", "x", cwd=home)
    assert r.returncode == 0, r.stderr
    assert [t["function"]["name"] for t in server.chat_requests()[0].body["tools"]] == ["shell_exec"]


def test_seed_004s_url_variable_picks_the_provider_by_the_seeds_rule(home):
    env = {"LLM_API_KEY": "k-gateway-0123456789", "LLM_MODEL": "test-model", "AGENT_TOOL_BUDGET": "3"}
    with AnthropicServer() as gateway:  # an Anthropic gateway at a path of its own, posted to as given
        gateway.gateway_path = "/v1/gateway/claude"
        gateway.add(anthropic_server.text_reply("from the gateway"))
        r = bantam_here("-p", "x", cwd=home, env={**env, "LLM_URL": gateway.url + "/gateway/claude"})
        assert r.returncode == 0 and r.stdout == "from the gateway\n", r.stderr
        assert [req.path for req in gateway.requests if req.method == "POST"] == ["/v1/gateway/claude"]
    with FakeServer() as openai:
        openai.add(text_reply("from openai"))
        r = bantam_here("-p", "x", cwd=home, env={**env, "LLM_URL": openai.url + "/chat/completions"})
        assert r.returncode == 0 and r.stdout == "from openai\n", r.stderr
    with FakeServer() as local:  # bantam's own files keep bantam's rule: an OpenAI-compatible /v1 base
        write_cfg(home, api_base=local.url, model="test-model", retry_delays="0")
        local.add(text_reply("from llama.cpp"))
        r = bantam_here("-p", "x", cwd=home)
        assert r.returncode == 0 and r.stdout == "from llama.cpp\n", r.stderr
