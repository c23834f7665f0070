"""MCP resources and prompts, against the npm reference server `server-everything` through the
real protocol: the model reads resources with read_resource, the user attaches them with
`@server:uri`, and a server's prompts are the terminal's slash commands `/server:prompt`."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import ROOT, base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply
from tests.mcp.test_mcp import (EVERYTHING, TIME, fake, hub_closed, offered, started_once, tool_message, toolbox,  # noqa: F401
                                user_file, write_servers)

pytestmark = pytest.mark.skipif(not (EVERYTHING.is_file() and shutil.which("node")),
                                reason="npm install --prefix tests/node @modelcontextprotocol/server-everything")
EV = {"command": "node", "args": [str(EVERYTHING)]}
TEXT_2 = "[resource demo://resource/dynamic/text/2]\nResource 2: This is a plaintext resource"


def read_tool(request) -> dict:
    [tool] = [t["function"] for t in request.body["tools"] if t["function"]["name"] == "read_resource"]
    return tool


def test_the_model_reads_resources_of_the_servers_that_have_them(home):
    """read_resource is offered from the first request (the cache remembers which servers have
    resources), names only those, reads what a resource link names, lists without a uri, says
    what is wrong with a bad one, and clips a long resource like any tool result."""
    write_servers(user_file(home), {"ev": EV, "time": TIME})
    started_once(home)
    features = "demo://resource/static/document/features.md"
    with FakeServer([tool_reply("ev__get-resource-links", {"count": 2}),
                     tool_reply("read_resource", {"server": "ev", "uri": "demo://resource/dynamic/text/2"}),
                     tool_reply("read_resource", {"server": "ev"}),
                     tool_reply("read_resource", {"server": "time", "uri": "x://y"}),
                     tool_reply("read_resource", {"server": "ev", "uri": "demo://nothing/here"}),
                     tool_reply("read_resource", {"server": "ev", "uri": features}),
                     text_reply("done")]) as s:
        write_cfg(home, **base_cfg(s), tool_output_limit="2000")
        r = run_bantam("-p", "read them", cwd=home)
        assert r.returncode == 0, r.stderr
        requests = s.chat_requests()
    tool = read_tool(requests[0])
    assert tool["parameters"]["properties"]["server"]["enum"] == ["ev"]  # time has no resources
    assert "[resource link demo://resource/dynamic/text/2]" in tool_message(requests[1])
    assert tool_message(requests[2]).startswith(TEXT_2)
    listing = tool_message(requests[3])
    assert f"{features}  features.md" in listing
    assert "demo://resource/dynamic/text/{resourceId}" in listing  # the templates too
    assert tool_message(requests[4]).startswith("error: no MCP server 'time' with resources")
    assert tool_message(requests[5]).startswith("error: MCP server ev answered with an error")
    clipped = tool_message(requests[6])
    assert clipped.startswith(f"[resource {features}]\n# Everything Server - Features")
    assert len(clipped.encode()) < 3000 and "## Tasks (SEP-1686)" not in clipped  # the doc is ~8 kB


def test_no_server_with_resources_offers_no_read_resource(home):
    write_servers(user_file(home), {"time": TIME})
    started_once(home)
    with FakeServer([text_reply("ok")]) as s:
        write_cfg(home, **base_cfg(s))
        r = run_bantam("-p", "hi", cwd=home)
        assert r.returncode == 0, r.stderr
        names = offered(s.chat_requests()[0])
    assert "time__get_current_time" in names and "read_resource" not in names


def ready_terminal(home, s):
    """A terminal whose `ev` server has started (its prompts are listed by /help once it runs)."""
    from tests.test_repl import Term
    write_cfg(home, **base_cfg(s))
    term = Term(home, width=250)
    term.child.timeout = 60
    for _ in range(240):
        term.enter("/mcp")
        if term.child.expect([r"ev  \[ready\]", r"ev  \[(starting|not started)\]"]) == 0:
            return term
    raise AssertionError("the server did not start")


def test_prompts_are_slash_commands_and_resources_are_mentioned_with_at(home):
    write_servers(user_file(home), {"ev": EV})
    with FakeServer([text_reply("sunny"), text_reply("analysed"), text_reply("read it")]) as s:
        term = ready_terminal(home, s)
        term.expect("    /ev:args-prompt")  # /mcp lists the prompts beside the tools
        term.enter("/help")
        term.expect("/ev:args-prompt CITY [STATE]  A prompt with two arguments")
        term.enter("/ev:args-prompt")  # a required argument missing: one line, nothing sent
        term.expect("usage: /ev:args-prompt CITY [STATE] (missing: city)")
        term.enter('/ev:args-prompt "San Francisco" Golden State')  # quotes group; the last takes the rest
        term.expect("sunny")
        term.enter("/ev:resource-prompt resourceId=2 Text")  # by name, then in order
        term.expect("analysed")
        term.enter("/ev:no-such-prompt")
        term.expect("MCP server ev has no prompt 'no-such-prompt'")
        term.enter("what is in @ev:demo://nothing/here?")
        term.expect("@ev:demo://nothing/here could not be read: MCP server ev answered with an error")
        term.enter("summarise @ev:demo://resource/dynamic/text/2, please")
        term.expect("read it")
        assert term.quit() == 0
        requests = s.chat_requests()
    assert len(requests) == 3  # neither the usage error, nor the bad prompt, nor the bad mention was sent
    assert requests[0].body["messages"][-1] == {"role": "user", "content": "What's weather in San Francisco, Golden State?"}
    analysed = requests[1].body["messages"][-1]["content"]
    assert analysed.startswith("This prompt includes the Text resource with id: 2. Please analyze the following "
                               "resource:\n\n" + TEXT_2)  # two messages of the server's, one of the user's
    mention = requests[2].body["messages"][-1]["content"]
    assert mention.startswith("summarise @ev:demo://resource/dynamic/text/2, please\n\n"
                              "[resource ev:demo://resource/dynamic/text/2]\n" + TEXT_2)
    assert json.dumps(requests[2].body).count("What's weather in San Francisco") == 1


def test_an_editors_prompt_is_run_by_its_slash_command(home, server):
    """ACP: `/server:prompt` of a server the editor named sends the server's message; a prompt
    the server lacks is one line to the editor, and a `/word:word` of no server reaches the model."""
    from acp.schema import McpServerStdio

    from tests.test_acp import Editor, run, session, text_block
    server.add(text_reply("rainy"), text_reply("as typed"))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[
                McpServerStdio(name="ev", command="node", args=[str(EVERYTHING)], env=[])])).session_id
            stops = [(await conn.prompt(session_id=sid, prompt=[text_block(line)])).stop_reason
                     for line in ("/ev:args-prompt Paris", "/ev:nope", "/notes:today please")]
            return sid, stops
    sid, stops = run(go())
    assert stops == ["end_turn"] * 3
    asked = [r.body["messages"][-1]["content"] for r in server.chat_requests()]
    assert asked == ["What's weather in Paris?", "/notes:today please"]
    assert "MCP server ev has no prompt 'nope'" in editor.said(sid)
    # the server's prompts join the commands the editor lists (its servers start with the session,
    # so from the first list on), beside the terminal's; the list is sent again only when it changes
    offered = [[c.name for c in u.available_commands] for u in editor.of(sid, "available_commands_update")]
    assert len(offered) == 1 and {"ev:args-prompt", "undo", "help"} <= set(offered[0])
    hints = {c.name: c.input for u in editor.of(sid, "available_commands_update") for c in u.available_commands}
    assert "CITY" in json.dumps(hints["ev:args-prompt"].model_dump() if hints["ev:args-prompt"] else {})


@pytest.mark.usefixtures("hub_closed")
def test_what_a_server_puts_in_the_chat_is_sanitised_and_keeps_no_secret(home, monkeypatch):
    """A resource attached with @ and a prompt's message enter the conversation as a tool result
    would: a secret bantam knows is ***, control characters are gone. (The server is given the
    key in its env, as a user's mcp.json may do.)"""
    from bantam.mcp import servers_here
    from bantam.mcp.prompts import expand
    from bantam.mcp.resources import with_resources
    secret = "sk-test-a-secret-key-1234567890"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    box, _ = toolbox(home, {"c": fake("context", home / "pid", env={"PYTHONPATH": str(ROOT), "LEAK": secret})})
    servers = servers_here(True, home)
    attached = with_resources("see @c:note://leak", servers, box.ctx)
    assert attached == "see @c:note://leak\n\n[resource c:note://leak]\n[resource note://leak]\nleak=***[2J"
    assert expand(servers, "/c:leak", "", box.ctx) == [{"role": "user", "content": "say ***"}]
