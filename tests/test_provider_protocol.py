"""Per-request settings travel with the request (issue 29). Parallel sub-agents share one provider
object: one child's larger output budget, asked for after its answer was cut, must reach only that
child's next request, never a sibling's; and a child gets its limits from the configuration, as
its parent does. Through the real OpenAI provider against a real local server."""
import threading

from bantam import loop
from bantam.config import Config
from bantam.providers.openai import OpenAIProvider
from bantam.tools import ToolContext, make_toolbox
from bantam.tools.subagent import CHILD_NOTE
from tests.fakes.openai_server import FakeServer, chunk, completion, json_reply, sse, text_reply, usage
from tests.fakes.scripted import ScriptedProvider, call, calls, text

HOLD = 30  # seconds a held reply waits for the other child; only a broken run waits this long


def cut_text(completion_tokens: int):
    """A text answer stopped by the output limit after `completion_tokens` tokens."""
    return sse([chunk("Half of the answ"), chunk(finish="length"),
                chunk(usage=usage(10, completion_tokens), no_choices=True)])


def spawn_reply(*tasks: str):
    return json_reply(completion(tool_calls=[
        {"id": f"call_{i}", "type": "function",
         "function": {"name": "spawn_agent", "arguments": f'{{"task": "{t}"}}'}} for i, t in enumerate(tasks)]))


class Children(FakeServer):
    """Answers the parent from its script and each child by its task; a reply may be held until
    another request has arrived (`holds`), so the children's requests interleave in one order."""

    def __init__(self, parent, children):
        super().__init__(list(parent))
        self.children = {task: list(replies) for task, replies in children.items()}
        self.arrived: dict[tuple[str, int], threading.Event] = {}
        self.holds: dict[tuple[str, int], tuple[str, int]] = {}  # reply (task, n) waits for request (task, n)
        self.bodies: dict[str, list[dict]] = {task: [] for task in children}

    def event(self, key):
        with self.lock:
            return self.arrived.setdefault(key, threading.Event())

    def next_response(self, body=None):
        messages = body.get("messages", []) if isinstance(body, dict) else []
        if not messages or CHILD_NOTE not in str(messages[0].get("content")):
            return super().next_response(body)
        task = messages[1]["content"]
        with self.lock:
            self.bodies[task].append(body)
            key = (task, len(self.bodies[task]))
            reply = self.children[task].pop(0)
        self.event(key).set()
        if key in self.holds:
            self.event(self.holds[key]).wait(HOLD)
        return reply


def parent_run(provider, cfg, folder=None):
    messages = [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "go"}]
    box = make_toolbox(cfg.tools, ToolContext(cfg, provider, "SYSTEM", folder=folder))
    return loop.run(provider, messages, box, loop.Limits.from_config(cfg), lambda e: None), messages


def config(server, **values) -> Config:
    return Config(endpoint=server.url, model="test-model", tools=("shell_exec", "spawn_agent"),
                  retry_delays=(0,), **values)


def max_tokens(body: dict):
    return body.get("max_tokens", body.get("max_completion_tokens"))


def test_a_childs_larger_output_budget_never_reaches_its_sibling(home):
    # A1 is cut; A2, its retry with twice the budget, is held until B2 arrives. B1 is held until
    # A2 is in flight, then refused with a 500, so B2, B's retry, is built while A2 is out: a
    # budget kept on the shared provider (as before) would be in B2's body.
    server = Children(parent=[spawn_reply("task A", "task B"), text_reply("both done")],
                      children={"task A": [cut_text(2000), text_reply("A whole\nSTATUS: success")],
                                "task B": [json_reply({"error": {"message": "overloaded"}}, status=500),
                                           text_reply("B done\nSTATUS: success")]})
    server.holds = {("task A", 2): ("task B", 2), ("task B", 1): ("task A", 2)}
    with server:
        turn, messages = parent_run(OpenAIProvider(config(server)), config(server))
    assert turn.text == "both done"
    assert [max_tokens(b) for b in server.bodies["task A"]] == [None, 4000]  # the retry carries it
    assert [max_tokens(b) for b in server.bodies["task B"]] == [None, None]  # the sibling never does
    assert [max_tokens(r.body) for r in server.chat_requests()
            if CHILD_NOTE not in str(r.body["messages"][0]["content"])] == [None, None]
    assert '"status": "success"' in messages[3]["content"] and '"status": "success"' in messages[4]["content"]


def test_a_child_gets_max_tokens_limit_from_the_configuration(home):
    server = Children(parent=[spawn_reply("task A"), text_reply("done")],
                      children={"task A": [cut_text(2000), text_reply("whole\nSTATUS: success")]})
    with server:
        cfg = config(server, max_tokens_limit=3000)
        turn, _ = parent_run(OpenAIProvider(cfg), cfg)
    assert turn.text == "done"
    # doubled from 2000, but no further than the configured 3000 (the default limit is 32768)
    assert [max_tokens(b) for b in server.bodies["task A"]] == [None, 3000]


def test_every_request_carries_the_sessions_folder_the_childrens_too(home, tmp_path):
    class Routed(ScriptedProvider):
        def next_step(self, messages):
            if CHILD_NOTE in messages[0]["content"]:
                return text("child done\nSTATUS: success")
            return super().next_step(messages)

    model = Routed(calls(call("spawn_agent", {"task": "look"})), text("done"))
    cfg = Config(model="test-model", tools=("shell_exec", "spawn_agent"), retry_delays=(0,))
    turn, _ = parent_run(model, cfg, folder=tmp_path)
    assert turn.text == "done" and len(model.requests) == 3
    assert {r.options.folder for r in model.requests} == {tmp_path}
    assert {r.options.output_tokens for r in model.requests} == {None}
