"""The boundary from the browser view: `/sandbox` changes it for the session and an approval is
answered from the page, an edited command named in the model's result. The real `bantam web` in a
subprocess, real bubblewrap, a real local model server."""
from __future__ import annotations

import pytest

from bantam.sandbox import unavailable
from tests.conftest import base_cfg, write_cfg
from tests.fakes.openai_server import text_reply, tool_reply
from tests.web.test_web import WebServer

if unavailable():
    pytest.skip(f"bubblewrap cannot run here: {unavailable()}", allow_module_level=True)


def test_sandbox_words_and_an_edited_command_from_the_page(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(tool_reply("shell_exec", {"command": "touch ro.txt"}), text_reply("TRIED-RO"),
               tool_reply("shell_exec", {"command": "touch asked.txt"}), text_reply("TRIED-EDIT"))
    web = WebServer(home)
    try:
        for line in ("/sandbox read-only", "write a file", "/sandbox workspace approval always", "write another"):
            web.send(line)
            if line == "write another":  # the approval waits for the page's next input: the edit
                web.events_until(lambda e: "approval needed (approval=always): touch asked.txt" in str(e))
                web.send("e touch edited.txt")
            web.idle()
        events = web.events_until(lambda e: str(e.get("message", "")).endswith("approval=always"))
    finally:
        web.close()
    said = [e.get("message", "") for e in events]
    assert any(m.startswith("for this session (nothing written): sandbox=read-only: commands may write only")
               for m in said)
    assert any(m.startswith("for this session (nothing written): sandbox=workspace:") and m.endswith("approval=always")
               for m in said)
    results = [m["content"] for m in server.chat_requests()[-1].body["messages"] if m["role"] == "tool"]
    assert "Read-only file system" in results[0] and not (home / "ro.txt").exists()
    assert results[1] == "[the user replaced your command before it ran; what ran instead: touch edited.txt]\n\n\nexit: 0"
    assert (home / "edited.txt").exists() and not (home / "asked.txt").exists()
    assert (home / ".bantam.cfg").read_text() == "".join(f"{k}={v}\n" for k, v in base_cfg(server).items())
