"""A stand-in for a small model that needs a worked example, as an OpenAI-compatible server.

Without a worked example in the prompt (an assistant message before the request) it answers in
prose, the way SmolLM2-135M answered a controlled run without the grammar (docs/controlled-runs.md:
prose and code blocks, never a usable proposal). With one, it answers in the form the request
asks for: the plan reads the required files, a step's call is the one the instruction shows, and
the final answer is `{"final": ...}`. Deterministic, so an optimisation's effect can be shown
exactly: what changes a run's outcome is only whether the prompt carries the demos.

    python -m tests.fakes.small_model     serves on 127.0.0.1 (the port is printed) until Ctrl+C
"""
from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.openai_server import FakeServer, Response, text_reply

PROSE = "Sure! I will look at the files carefully and then tell you what I found."


def answer_for(request: str) -> str:
    """The answer in the form `request` (a controlled run's user message) asks for."""
    if "Write a short plan" in request:
        needed = re.search(r"Files that must be read in full: (.+)", request)
        files = [f.strip() for f in needed.group(1).split(",")] if needed else []
        return json.dumps({"plan": [{"description": f"Read {f}", "tool": "read_file", "arguments": {"path": f}}
                                    for f in files]})
    step = re.search(r"Reply with the tool call, for example (\{.*\})\.\s*$", request, re.S)
    if step:
        return step.group(1)
    if '{"final"' in request:
        return json.dumps({"final": "I read every required file."})
    return PROSE


class SmallModel(FakeServer):
    def next_response(self, body: Any = None) -> Response:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        if not any(m.get("role") == "assistant" for m in messages[:-1]):
            return text_reply(PROSE)
        return text_reply(answer_for(str(messages[-1].get("content", ""))))


if __name__ == "__main__":
    import threading
    with SmallModel() as server:
        print(f"small model at {server.url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
