"""A fake OpenAI server for batches: every task gets the same two steps, whatever order the
requests come in and however often a task is rerun.

The answer depends only on the request: a conversation whose last message is the task asks for
one `shell_exec` (`echo NAME >> ran.txt`, NAME the task's first word), and one whose last message
is that tool's result gets the final answer `done NAME` with `STATUS: success`. A task whose
first word is `fail` gets an API error. `latency` is the time each reply takes; `stall()` holds
every reply (or, with answers_only, every final answer) until `release()` (to catch a batch
mid-task).
"""
from __future__ import annotations

import threading
from typing import Any

from tests.fakes.openai_server import FakeServer, Response, json_reply, text_reply, tool_reply


class TaskServer(FakeServer):
    def __init__(self, latency: float = 0.0):
        super().__init__()
        self.latency = latency
        self.go, self.answers = threading.Event(), threading.Event()
        self.go.set()
        self.answers.set()
        self.answered: dict[str, int] = {}  # task name -> final answers sent
        self.waiting: set[str] = set()  # tasks whose final answer is held by stall(answers_only=True)

    def stall(self, answers_only: bool = False) -> None:
        (self.answers if answers_only else self.go).clear()

    def release(self) -> None:
        self.go.set()
        self.answers.set()

    def next_response(self, body: Any = None) -> Response:
        messages = body["messages"]
        name = next(str(m["content"]) for m in messages if m["role"] == "user").split()[0]
        self.go.wait(120)
        if name == "fail":
            return json_reply({"error": {"message": "fake server: this task always fails"}}, status=400)
        if messages[-1]["role"] == "user":
            reply = tool_reply("shell_exec", {"command": f"echo {name} >> ran.txt"})
        else:
            if not self.answers.is_set():
                with self.lock:
                    self.waiting.add(name)
            self.answers.wait(120)
            with self.lock:
                self.answered[name] = self.answered.get(name, 0) + 1
            reply = text_reply(f"done {name}\nSTATUS: success")
        reply.delay = self.latency / max(1, len(reply.chunks))
        return reply
