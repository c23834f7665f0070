"""The chat behind the page: a Conversation (conversation.py, the terminal's too), with its
input and output in the browser.

`WebSession` owns a `Conversation`, so a message, `!command` and every slash command go through
`Conversation.handle` exactly as in the terminal (sessions, compaction, /cfg, controlled runs).
What the page supplies is only where things go:

- events become JSON objects, kept in a log (so a page that connects late, or reloads, replays
  the conversation) and pushed to every open event stream;
- one input at a time runs in a worker thread; the page's Stop is the terminal's Ctrl+C;
- a controlled run works in that worker thread (not in one of its own), and Stop pauses it as
  the terminal's /pause does: it sets the run's pause event, and the run stops at its next safe
  point (before its next model request or tool call); /resume continues it.

Stop gives the Ctrl+C guarantee without signals (they reach only the main thread): it sets the
toolbox's cancel flag (shell commands and sub-agents poll it), shuts the sockets of the
provider's in-flight responses (a request waiting on the model wakes at once), and the renderer
raises KeyboardInterrupt at the worker's next event. The loop then rolls back the unfinished
step, as it does for Ctrl+C, and `Conversation.turn` saves it without a partial message.
"""
from __future__ import annotations

import asyncio
import queue
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

from .. import config, undo
from ..approval import Choice
from ..commands import trust_note
from ..conversation import Conversation
from ..envpolicy import redact
from ..errors import BantamError
from ..events import Done, Event, Reasoning, RequestStarted, Retry, Text, ToolCall, UsageReport
from ..providers import ModelFacts
from ..providers.cancel import Stopper
from ..render import stated_window, usage_line
from ..runs.chat import PAUSING

# Events at which a stopped worker raises KeyboardInterrupt: the ones a turn emits while it still
# has work ahead. A ToolResult is not one: a tool that has finished keeps its step.
STOP_AT = (RequestStarted, Text, Reasoning, ToolCall, Retry)
RESULT_CHARS = 20_000  # characters of a tool result or argument list sent to the page
LOG_LIMIT = 5000       # events kept for replay; beyond it the log restarts from the messages
_STOP = object()       # put in the answer queue to end a pending question


class Hub:
    """Fan-out to the open event streams; each is an asyncio queue fed from any thread."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # RLock: emit() is also called with it held
        self.streams: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []

    def add(self, loop: asyncio.AbstractEventLoop, q: asyncio.Queue) -> None:
        self.streams.append((loop, q))

    def remove(self, q: asyncio.Queue) -> None:
        with self.lock:
            self.streams = [s for s in self.streams if s[1] is not q]

    def close(self) -> None:
        """End every stream (None is the end mark), so a shutting-down server need not wait on them."""
        with self.lock:
            for loop, q in self.streams:
                try:
                    loop.call_soon_threadsafe(q.put_nowait, None)
                except RuntimeError:
                    pass

    def publish(self, event: dict) -> None:
        """Call with `lock` held, so no stream sees events out of order."""
        for loop, q in list(self.streams):
            try:
                loop.call_soon_threadsafe(q.put_nowait, event)
            except RuntimeError:  # its event loop is gone
                self.streams.remove((loop, q))


class PageRenderer:
    """Loop events to page events; raises KeyboardInterrupt once the worker has been stopped."""

    def __init__(self, emit: Callable[[dict], None], window: Callable[[], int],
                 stopping: threading.Event):
        self.emit, self.window, self.stopping = emit, window, stopping

    def __call__(self, event: Event) -> None:
        if self.stopping.is_set() and isinstance(event, STOP_AT):
            raise KeyboardInterrupt
        self.emit(self.page_event(event))

    def page_event(self, event: Event) -> dict:
        if isinstance(event, UsageReport):
            return {"type": "usage", "line": usage_line(event.model, event.usage, stated_window(self.window))}
        if isinstance(event, Done):
            return {"type": "done"}
        data = event.to_json()
        for key in ("content", "arguments"):
            if isinstance(data.get(key), str) and len(data[key]) > RESULT_CHARS:
                data[key] = data[key][:RESULT_CHARS] + f"\n… ({len(data[key]) - RESULT_CHARS} more characters)"
        return data

    def reset(self) -> None:
        """After an interrupt: the answer shown so far was not kept; the page marks it so."""
        self.emit({"type": "discard"})


class WebSession:
    def __init__(self, flags: dict[str, str], folder: Path):
        self.hub = Hub()
        self.log: list[dict] = []
        self.lock = self.hub.lock      # one lock for the log, the streams and the job state
        self.job: threading.Thread | None = None
        self.job_start = 0             # where the running input's events begin in the log
        self.stopper = Stopper()       # Stop: the flag, and the sockets of the responses in flight
        self.stopping = self.stopper.event
        self.question: str | None = None
        self.choices: list[dict] = []  # the pending question's answers, as the page's buttons
        self.answers: queue.Queue = queue.Queue()
        # the input's worker thread drives a run (background_runs=False): Stop reaches it by
        # run_pause; Stop (not SIGINT) ends a `!command`
        self.chat = Conversation(flags, folder, ask=self.ask, show=self.print, renderer=self.renderer,
                                 background_runs=False, shell_cancel=self.stopping,
                                 continue_hint="/continue resumes it, or pick one under Sessions")
        self.log = [self.reset_event()]
        self.undoable = [int(r["seq"]) for r in self.records()]  # as the page last heard: blocks to mark undone
        self.turns_seen = max(self.undoable, default=0)  # the newest turn record the page has a block for
        self.chat.greet()
        if note := trust_note(self.chat.folder):  # the terminal asks at start; the page says how
            self.chat.say(note)

    # --- the conversation's outputs, on the page -------------------------------------------

    def renderer(self, cfg: config.Config, window: ModelFacts) -> PageRenderer:
        return PageRenderer(self.emit, window, self.stopping)

    def print(self, text: str) -> None:
        self.emit({"type": "output", "text": text})

    def ask(self, question: str, choices: tuple[Choice, ...] = ()) -> str:
        """The conversation's questions (approvals, compaction, undo): the next input from the page
        answers it, typed or sent by one of the `choices`' buttons."""
        with self.lock:
            if self.stopping.is_set():
                raise KeyboardInterrupt
            self.question = question
            self.choices = [{"answer": c.answer, "word": c.word, "more": c.more, "draft": redact(c.draft)}
                            for c in choices]
            self.emit(self.ask_event())
        try:
            answer = self.answers.get()
        finally:
            with self.lock:
                self.question, self.choices = None, []
                self.emit(self.ask_event())
        if answer is _STOP:
            raise KeyboardInterrupt
        return answer

    # --- the page's events -----------------------------------------------------------------

    def emit(self, event: dict) -> None:
        event = {k: redact(v) if isinstance(v, str) else v for k, v in event.items()}  # no secret on the page
        with self.lock:
            last = self.log[-1] if self.log else None
            if last and event["type"] in ("text", "reasoning") and last["type"] == event["type"]:
                self.log[-1] = {**last, "text": last["text"] + event["text"]}  # replay one piece
            else:
                self.log.append(event)
            self.hub.publish(event)

    def subscribe(self, loop: asyncio.AbstractEventLoop, q: asyncio.Queue) -> None:
        """A new event stream: the log so far, then the live events, in order."""
        with self.lock:
            for event in self.log:
                q.put_nowait(event)
            q.put_nowait(self.state_event())
            self.hub.add(loop, q)

    def reset_event(self) -> dict:
        return {"type": "reset", "items": transcript(self.chat.messages)}

    def state_event(self) -> dict:
        return {**self.ask_event(), "type": "busy", "busy": self.job is not None}

    def ask_event(self) -> dict:
        return {"type": "ask", "question": self.question, "choices": self.choices}

    # --- one input at a time -----------------------------------------------------------------

    def submit(self, line: str) -> str:
        """Start `line` in the worker, or answer the pending question: "started", "answered", "busy"."""
        with self.lock:
            if self.question is not None:
                self.answers.put(line)
                return "answered"
            if self.job is not None:
                return "busy"
            self.stopper.clear()
            while not self.answers.empty():
                self.answers.get_nowait()
            self.job = threading.Thread(target=self.work, args=(line,), name="bantam-web-turn", daemon=True)
            self.job_start = len(self.log)
        self.emit({"type": "input", "text": line})
        self.emit({"type": "busy", "busy": True, "question": None, "choices": []})
        self.job.start()
        return "started"

    def work(self, line: str) -> None:
        chat = self.chat
        first = chat.messages[1] if len(chat.messages) > 1 else None
        is_turn = not line.lstrip().startswith(("/", "!"))
        try:
            # The context-window lookup that configure() starts may still be creating the
            # provider's HTTP client (the lazy property has no lock: two can be made, the last
            # one wins). Once it is done the client stays, and Stop can hook into it.
            chat.window()
            self.stopper.watch(chat.provider)
            if line.strip() == "/quit":
                chat.say("the page has no quit: close the tab, or stop `bantam web` with Ctrl+C")
            else:
                chat.handle(line.strip() if not is_turn else line)
        except KeyboardInterrupt:  # a stop that landed outside turn()'s and command()'s own handling
            chat.render.reset()
            chat.say("interrupted")
        except Exception as e:  # a bug must not take the server down; the page hears what broke
            traceback.print_exc(file=sys.stderr)
            self.emit({"type": "error", "message": f"internal error: {type(e).__name__}: {e}"})
        finally:
            self.finish(first, is_turn)

    def finish(self, first: dict | None, is_turn: bool) -> None:
        messages = self.chat.messages
        now = messages[1] if len(messages) > 1 else None
        replaced = now is not first and not (first is None and is_turn)  # /clear, /load, /compact
        turns = self.turn_events()
        with self.lock:  # held throughout, so a new input cannot slip in before "not busy" is sent
            self.job = None
            if replaced or len(self.log) > LOG_LIMIT:
                # the page restarts from the conversation now, followed by what this input showed
                tail = [e for e in self.log[self.job_start:] if e["type"] not in ("busy", "ask")]
                self.log = []
                self.emit({"type": "reset", "items": transcript(messages) + tail})
            for event in turns:
                self.emit(event)
            self.emit(self.state_event())

    # --- the turns that changed files: the page's Diff and Undo ------------------------------

    def records(self) -> list[dict]:
        """This conversation's turns that changed files and can be undone, newest first."""
        try:
            return undo.undoable(self.chat.undo_key())
        except (OSError, BantamError):  # an unreadable store takes the buttons away, not the page
            return []

    def turn_events(self) -> list[dict]:
        """After an input: a block for each turn that changed files since the last (its Diff and
        Undo), and, when that changed, which blocks can still be undone (an undo marks the rest)."""
        records = self.records()
        seqs = [int(r["seq"]) for r in records]
        events = [changes_event(r) for r in reversed(records) if int(r["seq"]) > self.turns_seen]
        self.turns_seen = max([self.turns_seen, *seqs])
        if seqs != self.undoable:
            self.undoable = seqs
            events.append({"type": "undoable", "seqs": seqs})
        return events

    def stop(self) -> bool:
        """The page's Stop: what Ctrl+C does in the terminal. False when nothing was running."""
        with self.lock:
            if self.job is None:
                return False
            if self.chat.run_active.is_set():  # a controlled run: paused at its next safe point, as /pause does
                self.chat.run_pause.set()
                self.emit({"type": "notice", "message": PAUSING})
                return True
            self.chat.toolbox.ctx.cancel.set()
            self.stopper.set()
            if self.question is not None:
                self.answers.put(_STOP)
        return True

    def close(self) -> None:
        """At server shutdown: stop a running input, and save as the terminal does on exit."""
        job = self.job
        if job is not None and self.stop():
            job.join(5)
        self.chat.save_auto()


def changes_event(record: dict) -> dict:
    """A turn's record as the page's block: each path, and whether the turn created, changed or deleted it."""
    files = [{"path": redact(path), "change": "created" if before is None else "deleted" if after is None else "changed"}
             for path, (before, after) in sorted(record["changes"].items())]
    return {"type": "changes", "seq": int(record["seq"]), "turn": record.get("turn"), "files": files}


def transcript(messages: list[dict]) -> list[dict]:
    """The conversation as the page draws it: the same shapes as the live events."""
    names: dict[str, str] = {}
    items: list[dict] = []
    for m in messages:
        role, content = m.get("role"), text_of(m.get("content"))
        if role == "user":
            items.append({"type": "input", "text": content})
        elif role == "assistant":
            thought = m.get("reasoning_content") or m.get("reasoning")
            if isinstance(thought, str) and thought:
                items.append({"type": "reasoning", "text": thought})
            if content:
                items.append({"type": "text", "text": content})
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                names[call.get("id", "")] = str(fn.get("name", ""))
                items.append({"type": "tool_call", "name": names[call.get("id", "")],
                              "arguments": str(fn.get("arguments", ""))[:RESULT_CHARS]})
            items.append({"type": "done"})
        elif role == "tool":
            items.append({"type": "tool_result", "name": names.get(m.get("tool_call_id", ""), ""),
                          "content": content[:RESULT_CHARS], "is_error": content.startswith("error:")})
    return items


def text_of(content: Any) -> str:
    """A message's content as text; of multi-part content, the text parts and a mark for the rest."""
    if isinstance(content, list):
        parts = [p if isinstance(p, dict) else {} for p in content]
        return "\n".join(p.get("text", "") if p.get("type") == "text" else f"[{p.get('type', 'part')}]"
                         for p in parts)
    return content if isinstance(content, str) else "" if content is None else str(content)
