"""One agent directory, one process: the daemon's loop, on bantam's loop.run.

    wait until messages.jsonl changes
    read it (finishing an interrupted rewrite, healing), run any STASH_MESSAGE directive
    build the request: system prompt + conversation + LIFE tail; stash the middle half if over 80%
    if the last message wants an answer: the session runs the turn (Session.run(request, checkpoint)),
        whose checkpoint after every step appends the step to messages.jsonl and rebuilds the request
        from the file, so each step sees a fresh prompt and whatever arrived meanwhile
    send the final text to the chat unless muted; inject the next queued trigger once idle
    a turn the model could not answer (server down, 401) is tried again by itself, after a delay
    that doubles up to retry_turn_max_s; an error no retry can fix is told to the operator once

Channel threads (telegram, triggers, mail) and background-work emitters only append to the file;
the loop is the only thing that calls the model.
"""
from __future__ import annotations

import json
import os
import threading
import time
import traceback
from dataclasses import replace
from typing import Any, Callable

from .. import loop, session
from ..config import Config
from ..errors import LimitReached, ProviderError, Unreachable
from ..events import Error, Event, Notice, Retry, ToolCall, quiet
from ..providers import ask
from . import mail, watch
from .bg import interrupted_note
from .bus import MessageFile, system_message, unwrap
from .layout import AgentDir, life, stamp
from .prompt import life_message, system_prompt
from .settings import Settings
from .stash import (CHARS_PER_TOKEN, PRESSURE, SUMMARY_PROMPT, Blobs, directive, is_stash,
                    middle_half, over_budget, render, stash_range)
from .tools import make_toolbox
from .triggers import Triggers

INOTIFY_WAIT_S = 60.0   # with inotify the loop needs no polling; this is only a safety net
RESTART_S = 10.0        # a channel thread that died is started again after this


class Agent:
    def __init__(self, agent_dir: AgentDir, settings: Settings, cfg: Config):
        from .bg import Background
        from .provider import load_provider
        self.dir, self.settings, self.cfg = agent_dir, settings, cfg
        self.stop = threading.Event()
        self.wake, self.trigger_wake, self.mail_wake = threading.Event(), threading.Event(), threading.Event()
        self.blobs = Blobs(agent_dir / "blobs", f"{agent_dir.rel()}/blobs")
        self.conv = MessageFile(agent_dir / "messages.jsonl", on_change=self.wake.set,
                                 on_unreadable=self.keep_unreadable)
        self.provider = load_provider(agent_dir, settings, cfg)
        self.telegram = self._telegram()
        self.bg = Background(agent_dir / "bg", settings.tool_timeout, self.clip, self.deliver_system,
                             self.log)
        self.triggers = Triggers(self)
        # its own tools, in its home (daemon/tools.py adds the MCP servers' tools itself); its own
        # prompt, which refresh() builds anew for every request
        front = session.FrontEnd(on_event=self.on_event, system="", with_mcp=False,
                                 toolbox=lambda ctx: make_toolbox(self, ctx), limits=daemon_limits)
        self.session = session.build(cfg, agent_dir.home, front, self.provider)
        self.toolbox = self.session.toolbox
        self.wait_s = settings.poll_s
        self.busy = False          # a turn is running: triggers wait
        self.current_call = ""     # the tool call being run, for bg's "tc:" note
        self.replied = ""          # what became of the turn's answer, for the terminal
        self.cut_at: int | None = None  # the answer being sent was cut at this many tokens (loop.AnswerCut)
        self.pending: list[dict] = []   # image messages READ_FILE attached, added after the step
        self.known: list[dict] = []     # the conversation as last read
        self.live: set[int] = set()     # ids of the request's messages as last built
        self._web: Any = None
        self.failures = 0               # turns in a row the model did not answer
        self.retry_at: float | None = None  # (monotonic) when to try the unanswered turn again
        self.told: set[str] = set()     # errors already told to the operator, until one succeeds
        self.stuck: tuple[int, dict] | None = None  # where a turn stopped at a limit (at()): not asked again

    def _telegram(self) -> Any:
        if not self.settings.telegram_token:
            return None
        from .telegram import Telegram
        return Telegram(self.settings, self.cfg, self.dir, self.log, self.say)

    # --- running ------------------------------------------------------------------------------

    def serve(self) -> None:
        """Run until stopped (SIGTERM / SIGINT raise KeyboardInterrupt here)."""
        try:
            self.start()
            self.run_loop()
        except KeyboardInterrupt:
            pass
        finally:
            self.shutdown()

    def start(self) -> None:
        for job in self.bg.lost():
            self.deliver_system(interrupted_note(job))
        threads: list[tuple[Callable[..., object], tuple]] = [(self.triggers.run, (self.stop, self.trigger_wake)),
                   (mail.run, (self, self.stop, self.mail_wake))]
        if self.telegram is not None:
            threads.append((self.telegram.poll_forever, (self.stop, self.deliver_user)))
            threads.append((self.telegram.outbox.send_forever, (self.stop,)))
        for target, args in threads:
            threading.Thread(target=self._keep_running, args=(target, args), daemon=True).start()
        if self.settings.watch == "auto" and watch.start(
                {self.dir.root: self.wake.set, self.dir / "triggers": self.trigger_wake.set,
                 self.dir / "mail_inbox": self.mail_wake.set}, self.stop, self._watch_failed):
            self.wait_s = INOTIFY_WAIT_S
        me = f"pid {os.getpid()}, model {self.cfg.model}"
        # the start message goes in before LIFE.md says "start": whoever waits for that line (an
        # operator's script, a test) and then writes finds its message after this one, not before
        self.deliver_system(f"[start] bantam daemon started ({me})")
        self.log("start", f"{me}, {'inotify' if self.wait_s == INOTIFY_WAIT_S else 'polling'}")
        self.say(f"started ({me})")

    def _keep_running(self, target: Any, args: tuple) -> None:
        """A channel thread that dies of a bug is started again: a chat that silently stops
        listening is the worst way for a months-long daemon to fail."""
        while not self.stop.is_set():
            try:
                target(*args)
                return
            except Exception as e:
                self.log("error", f"{getattr(target, '__qualname__', target)} failed: {bug(e)}; "
                                  f"restarting it in {RESTART_S:g} s")
                self.stop.wait(RESTART_S)

    def _watch_failed(self, message: str) -> None:
        self.log("watch", message)
        self.wait_s = self.settings.poll_s

    def run_loop(self) -> None:
        handled = None
        while not self.stop.is_set():
            self.wake.clear()
            seen = self.conv.signature()
            due = self.retry_at is not None and time.monotonic() >= self.retry_at
            if seen != handled or due:
                handled = seen  # what this step acts on; anything later changes the signature
                self.retry_at = None
                self.safe_step()
                continue
            if self.triggers.inject_next():
                continue
            wait = self.wait_s if self.retry_at is None else \
                min(self.wait_s, max(0.05, self.retry_at - time.monotonic()))
            self.wake.wait(wait)

    def safe_step(self) -> None:
        try:
            self.step()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # a bug must not end the agent: log it, wait for the next change
            self.log("error", bug(e))

    def step(self) -> None:
        request = self.refresh()
        if self.known and self.known[-1].get("role") in ("user", "tool") and self.stuck != self.at():
            self.turn(request)

    def at(self) -> tuple[int, dict]:
        """Where the conversation stands: its length and last message."""
        return len(self.known), self.known[-1]

    def turn(self, request: list[dict]) -> None:
        self.busy, self.cut_at = True, None
        woke = woken_by(self.known)
        self.replied = "no answer"
        try:
            self.session.run(request, self.checkpoint)
        except ProviderError as e:
            self.say(f"woke by {woke}: {self._failed(e)}")
            return
        except LimitReached as e:
            self.stuck = self.at()  # the file changing again is not new input: only a new message is
            self.log("error", f"{e}; waiting for new input")
            self.tell_once("limit", f"[bantam] {e}; I am waiting for new input.")
            self.say(f"woke by {woke}: stopped: {e}")
            return
        finally:
            self.busy, self.current_call = False, ""
        if self.failures:
            self.log("model", f"answered again after {self.failures} failed attempt(s)")
        self.failures, self.told = 0, set()
        self.say(f"woke by {woke}: {self.replied}")

    def _failed(self, e: ProviderError) -> str:
        """The turn stays unanswered: try it again later, by itself, backing off."""
        s = self.settings
        delay = min(s.retry_turn_s * 2 ** min(self.failures, 30), s.retry_turn_max_s)
        self.failures += 1
        self.retry_at = time.monotonic() + delay
        self.log("error", f"{e}; the turn is unanswered: retrying it in {delay:g} s "
                          f"(attempt {self.failures} failed)")
        if isinstance(e, Unreachable):  # the server is down or misnamed: it may come back
            self.tell_once("unreachable", f"[bantam] I cannot reach the model: {e}. I keep "
                           f"retrying every {s.retry_turn_max_s:g} s at most.")
        elif not e.retryable:  # a refused key, a bad request: waiting alone will not fix it
            status = getattr(e, "status", None)
            self.tell_once(f"status {status}", f"[bantam] the model API refuses my requests: {e}. "
                           f"I keep retrying every {s.retry_turn_max_s:g} s at most; this needs you "
                           f"(check the key and config.json, then restart me).")
        return f"failed: {e}; retrying in {delay:g} s"

    def tell_once(self, key: str, text: str) -> None:
        """Tell the operator something that needs them, once until a turn succeeds again."""
        if key in self.told:
            return
        self.told.add(key)
        self.log("notice", text)
        self.tell_operator(text)

    def say(self, text: str) -> None:
        """One line per turn on standard output: what `journalctl` shows for the service."""
        flat = " ".join(text.split())
        line = f"{stamp()} {self.dir.name}: {flat[:300]}"
        try:
            print(line, flush=True)
        except (OSError, ValueError):  # no terminal any more: the LIFE.md entry is the record
            pass

    def shutdown(self) -> None:
        self.stop.set()
        for event in (self.wake, self.trigger_wake, self.mail_wake):
            event.set()
        self.log("stop", f"pid {os.getpid()}")
        self.say("stopped")
        if self.telegram is not None:
            self.telegram.close()

    # --- the request, rebuilt from the file -------------------------------------------------

    def refresh(self) -> list[dict]:
        conv = self.shrink_huge(self.run_directives(self.conv.read()))
        system = system_prompt(self.dir, self.settings, self.telegram is not None)
        tail = life_message(self.dir, self.settings)
        size = len(system) + len(tail["content"]) + len(json.dumps(conv, ensure_ascii=False))
        if over_budget(size, self.settings.context_window) and len(conv) >= 4:
            start, end = middle_half(conv)
            # never stash a stash again: that only summarises a summary and loses the history
            start = max([start] + [i + 1 for i, m in enumerate(conv[:end]) if is_stash(m)])
            if end - start >= 2:
                self.log("stash", f"context at ~{size // CHARS_PER_TOKEN} tokens, over 80% of "
                                  f"{self.settings.context_window}: stashing lines {start + 1}-{end}")
                self.log("stash", stash_range(self.conv, self.blobs, self.summarize, start, end))
                conv = self.conv.read()
        self.known = conv
        request = [{"role": "system", "content": system}, *conv, tail]
        self.live = {id(m) for m in request}
        return request

    def shrink_huge(self, conv: list[dict]) -> list[dict]:
        """A message bigger than half the context budget can never be answered whole, and stashing
        the rest of the history around it would not help: stash the message itself to a blob and
        leave its head, tail and the blob's name (as a clipped tool result does). What is left
        keeps at most half the limit, so the shortened copy is never over it again (a copy still
        over it was stashed anew at every wake-up, a new blob each time); with a window too small
        for even the note, the message is left as it is."""
        limit = int(self.settings.context_window * CHARS_PER_TOKEN * PRESSURE / 2)
        for i, message in enumerate(conv):
            content = message.get("content")
            if not isinstance(content, str) or len(content) <= limit:
                continue
            wrapped, text = unwrap(content)
            clipped = self.blobs.clip(text, min(self.settings.tool_output_limit, limit // 2))
            smaller = {**message, "content": system_message(clipped)["content"] if wrapped else clipped}
            if len(smaller["content"]) > limit:
                continue
            def swap(cur: list[dict], i: int = i, m: dict = message, new: dict = smaller) -> list[dict] | None:
                return cur[:i] + [new] + cur[i + 1:] if cur[i:i + 1] == [m] else None
            if self.conv.edit(swap):
                self.log("stash", f"line {i + 1} of messages.jsonl ({len(content)} characters, over "
                                  f"half the context budget) was stashed whole; the agent sees its "
                                  f"head and tail: {clipped[clipped.find('[stash '):][:40]}")
                conv = conv[:i] + [smaller] + conv[i + 1:]
        return conv

    def keep_unreadable(self, lines: list[tuple[int, bytes]]) -> None:
        """messages.jsonl healing drops a line it cannot read: keep it in a blob, and say so."""
        for number, raw in lines:
            digest = self.blobs.put(raw)
            self.log("heal", f"messages.jsonl line {number} was unreadable ({len(raw)} bytes: "
                             f"{raw[:60].decode('utf-8', 'replace')!r}) and left the conversation; "
                             f"it is kept in {self.blobs.rel}/{digest}")

    def run_directives(self, conv: list[dict]) -> list[dict]:
        """STASH_MESSAGE: <start> <end> | all, intercepted before the model sees it."""
        while True:
            found = next(((i, m, d) for i, m in enumerate(conv) if (d := directive(m)) is not None), None)
            if found is None:
                return conv
            self._run_directive(*found)
            conv = self.conv.read()

    def _run_directive(self, i: int, message: dict, found: str | tuple[int, int]) -> None:
        def drop(cur: list[dict]) -> list[dict] | None:
            return cur[:i] + cur[i + 1:] if cur[i:i + 1] == [message] else None
        if not self.conv.edit(drop):
            return  # the file moved on meanwhile: the directive is found again at its new place
        if isinstance(found, str):  # "all"
            start, end = 0, len(self.conv.read())
        else:  # 1-based, inclusive, numbered as the file was with the directive still in it
            start, end = found[0] - 1 - (found[0] - 1 > i), found[1] - (found[1] > i)
        done = stash_range(self.conv, self.blobs, self.summarize, start, end)
        self.log("stash", f"directive {unwrap(message.get('content'))[1].strip()[:80]}: {done}")
        after = self.conv.read()
        if after and after[-1].get("role") == "assistant":  # the agent is owed a turn to re-orient
            self.deliver_system(f"[stash] {done}. Re-read what you need and carry on.")

    def checkpoint(self, request: list[dict]) -> None:
        """After each step of loop.run: persist the step, then rebuild the request in place."""
        new = [m for m in request if id(m) not in self.live]
        if self.known and not any(id(m) in self.live for m in request[1:]):
            new = self._adopt_compaction(new)
        known = self.known
        last = new[-1] if new else {}
        if last.get("role") == "assistant" and not last.get("tool_calls"):  # the final answer:
            # into the outbox before it is in the file, so a crash between the two sends it
            # again (the turn is answered anew) rather than never
            self.replied = self.reply(marked(str(last.get("content") or ""), self.cut_at), known + new)
            self.cut_at = None
        pending, self.pending = self.pending, []  # (READ_FILE's workers add to it)
        new += pending
        if new:  # before any line another writer added meanwhile: that is the order it happened
            self.conv.edit(lambda cur: known + new + cur[len(known):] if cur[:len(known)] == known
                           else cur + new)
        request[:] = self.refresh()

    def _adopt_compaction(self, new: list[dict]) -> list[dict]:
        """loop.run compacted after a context-overflow error: keep its summary as a stash."""
        summary = str(new[0].get("content", "")) if new else ""
        self.log("stash", stash_range(self.conv, self.blobs, lambda _: summary, 0, len(self.known)))
        self.known = self.conv.read()
        return new[1:]

    def summarize(self, chosen: list[dict]) -> str:
        text = render(chosen, int(self.settings.context_window * CHARS_PER_TOKEN * 0.4))
        try:
            return ask(self.provider, [{"role": "system", "content": SUMMARY_PROMPT},
                                       {"role": "user", "content": text}],
                       self.cfg.retry_delays, quiet(self.on_event)) or "(the model gave no summary)"
        except ProviderError as e:
            self.log("stash", f"no summary: {e}")
            return f"(no summary: {e})"

    # --- channel out ------------------------------------------------------------------------

    def reply(self, text: str, conv: list[dict]) -> str:
        """Send the answer, the last message of `conv`, where it goes; says what became of it."""
        if not text:
            return "no answer"
        if is_muted(conv):
            self.log("reply", f"(muted) {text}")
            return f"replied (muted): {text}"
        if self.telegram is None:
            self.log("reply", text)
            return f"replied: {text}"
        self.log("reply", f"(to telegram) {text}")
        self.tell_operator(text)
        return f"replied (to telegram): {text}"

    def tell_operator(self, text: str) -> None:
        """Into the Telegram outbox: sent in order, at least once, whatever the network does."""
        if self.telegram is not None:
            self.telegram.send_text(text)

    # --- what the parts use --------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if isinstance(event, ToolCall):
            self.current_call = event.id
            self.log("tool", f"{event.name} {event.arguments[:300]}")
        elif isinstance(event, Retry):
            self.log("retry", f"{event.attempt} in {event.delay:g}s: {event.message}")
        elif isinstance(event, (Notice, Error)):
            if isinstance(event, loop.AnswerCut) and not event.agent:  # a sub-agent's is its parent's tool result
                self.cut_at = event.limit
            self.log("notice", event.message)

    def deliver_user(self, text: str) -> None:
        self.conv.append({"role": "user", "content": text})

    def deliver_system(self, text: str) -> None:
        self.conv.append(system_message(text))

    def attach(self, content: list[dict]) -> None:
        self.pending.append({"role": "user", "content": content})

    def clip(self, text: str) -> str:
        return self.blobs.clip(text, self.settings.tool_output_limit)

    def log(self, kind: str, text: str) -> None:
        life(self.dir, kind, text)

    @property
    def web(self) -> Any:
        if self._web is None:
            from ..providers.http import make_client
            self._web = make_client(self.cfg)
        return self._web


def daemon_limits(cfg: Config) -> loop.Limits:
    """The configured limits, except that config.json's max_tokens is an answer's first budget, not
    a fixed one: an answer cut at it is asked for again with twice the budget, up to
    max_tokens_limit (loop.request), before a reply goes to the chat marked as cut."""
    return replace(loop.Limits.from_config(cfg), fixed_max_tokens=None)


def bug(e: Exception) -> str:
    """An unexpected exception in one line, with where it was raised."""
    where = traceback.extract_tb(e.__traceback__)[-1]
    return f"{type(e).__name__}: {e} (at {where.filename}:{where.lineno})"


def marked(text: str, cut_at: int | None) -> str:
    """The answer as it is sent: one cut at the output limit says so, so that nobody takes the
    fragment for the whole (the conversation keeps the model's text as it was)."""
    if cut_at is None or not text:
        return text
    return f"{text}\n\n[answer cut at {cut_at} tokens]" if cut_at else f"{text}\n\n[answer cut at the output limit]"


def woken_by(conv: list[dict]) -> str:
    """What a turn answers, in a few words: its newest user message, or unfinished tool work."""
    if conv and conv[-1].get("role") == "tool":
        return "unfinished tool work"
    last = next((m for m in reversed(conv) if m.get("role") == "user"), None)
    text = " ".join(unwrap(last.get("content"))[1].split()) if last else ""
    return (text[:100] + " [...]" if len(text) > 100 else text) or "(nothing)"


def is_muted(conv: list[dict]) -> bool:
    """A reply is muted when everything it answers was a harness injection and the
    turn did no tool work. The span is what came after the previous plain reply."""
    plain = [i for i, m in enumerate(conv) if m.get("role") == "assistant" and not m.get("tool_calls")]
    if not plain:
        return False
    span = conv[plain[-2] + 1 if len(plain) > 1 else 0:plain[-1]]
    if any(m.get("role") == "assistant" for m in span):  # tool calls were made
        return False
    users = [m for m in span if m.get("role") == "user"]
    return bool(users) and all(unwrap(m.get("content"))[0] for m in users)
