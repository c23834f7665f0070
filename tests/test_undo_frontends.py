"""/undo and /rewind where a person talks to bantam: the terminal (a real pseudo-terminal) and an
editor over ACP (the SDK's client side). The undo mechanism itself is tests/test_undo.py's."""

import pytest

from tests.conftest import base_cfg, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.test_repl import Term


def test_undo_and_rewind_in_the_terminal(home, server):
    (home / "notes.txt").write_text("mine\n")
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "echo changed > notes.txt; echo new > made.txt; chmod 600 made.txt"}),
               text_reply("changed it"),
               tool_reply("write_file", {"path": "second.txt", "content": "2\n"}, call_id="call_2"),
               text_reply("wrote it"), text_reply("fresh answer"))
    term = Term(home)
    term.enter("change the notes")
    term.expect("changed it")
    term.enter("write a second file")
    term.expect("wrote it")
    assert (home / "second.txt").exists()
    term.enter("/undo")
    term.expect("undo this? [Y/n]")
    term.child.send("y\r")
    term.expect("undone (the conversation still remembers")
    assert not (home / "second.txt").exists() and (home / "notes.txt").read_text() == "changed\n"
    term.enter("/redo")
    term.expect("redo this? [Y/n]")
    term.child.send("y\r")
    term.expect("redone (the files only")
    assert (home / "second.txt").read_text() == "2\n"
    term.enter("/undo")
    term.expect("undo this? [Y/n]")
    term.child.send("y\r")
    term.expect("undone (the conversation still remembers")
    assert not (home / "second.txt").exists()
    term.enter("/rewind")  # the first turn (the second is undone already): files and conversation
    term.expect("rewind this? [Y/n]")
    term.child.send("y\r")
    term.expect("the conversation is back before that turn")
    assert (home / "notes.txt").read_text() == "mine\n" and not (home / "made.txt").exists()
    term.enter("hello again")
    term.expect("fresh answer")
    assert term.quit() == 0
    contents = [m["content"] for m in server.chat_requests()[-1].body["messages"]]
    assert "change the notes" not in contents and "hello again" in contents  # the model forgot it


def test_a_hand_edit_is_not_overwritten_unless_the_person_says_so(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "echo the model > plan.md; echo made > made.txt"}),
               text_reply("done"))
    term = Term(home)
    term.enter("write the plan")
    term.expect("done")
    (home / "plan.md").write_text("edited by hand\n")
    term.enter("/undo")
    term.expect("overwrite your own changes to the files above too? (no: keep them, undo the rest) [y/N]")
    term.child.send("\r")
    term.expect("kept your changes: plan.md")
    term.expect("undone")
    assert (home / "plan.md").read_text() == "edited by hand\n" and not (home / "made.txt").exists()
    assert term.quit() == 0


def test_undo_through_an_editor(home, server):
    pytest.importorskip("acp")
    from acp import text_block

    from tests.test_acp import Editor, run, session
    server.add(tool_reply("write_file", {"path": "a.txt", "content": "from the model\n"}), text_reply("wrote a"))
    editor = Editor()

    async def go():
        async with await session(editor, server, home.parent) as (conn, proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("write a")])
            written = (home / "a.txt").exists()
            undone = await conn.prompt(session_id=sid, prompt=[text_block("/undo")])
            return sid, written, undone
    sid, written, undone = run(go())
    assert written and not (home / "a.txt").exists() and undone.stop_reason == "end_turn"
    assert "undone" in editor.said(sid)
    commands = [u for u in editor.of(sid, "available_commands_update")][-1]
    assert {"undo", "rewind", "redo"} <= {c.name for c in commands.available_commands}
    assert len(server.chat_requests()) == 2  # the turn's two requests; /undo asked the model nothing
