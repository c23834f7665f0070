"""One ACP session: a bantam session (session.build) in the editor's folder, talking through the
connection instead of a terminal.

The loop's events become `session/update` notifications; an approval becomes a
`session/request_permission` request; `session/cancel` is the terminal's Ctrl+C without a
signal (signals reach only the main thread): it sets the toolbox's cancel flag (the running
command's process group is killed at its next poll, sub-agents stop), shuts the sockets of the
model's responses in flight, and the next event raises KeyboardInterrupt, so the loop drops the
unfinished step as it does for Ctrl+C. The conversation is an ordinary saved session
(`~/.bantam/sessions/<id>.jsonl`), appended after every step.

Where the editor offers `fs/read_text_file` and `fs/write_text_file`, the model's read_file,
write_file and edit_file go through it (tools/files.Buffers), after bantam's own checks: the
model reads the buffer the person sees, unsaved changes included, and a write shows in the
editor. Shell commands are not run by the editor: bantam runs them in its sandbox, with its
scrubbed environment, its process-group kill and its bounded, redacted output, none of which a
command the editor starts would have (the sandbox's seccomp filter is a descriptor handed to
bubblewrap; an editor terminal inherits the editor's environment, keys included). Their output
is shown while they run, in one of the editor's terminals when it offers them (output.py).

The MCP servers the editor names in `session/new` (or `session/load`) are started there, and the
answer waits, at most SERVERS_WAIT, for those bantam has never seen with that configuration: the
editor shows the session once it has the answer, so its first prompt offers their tools. A server
seen before offers its cached tools at once and starts in the background, as the user's own do;
one that never answers holds the session's start up for SERVERS_WAIT and no longer, and its
tools are offered if its start ever ends.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import config, mcp, session, slash, transcripts, undo
from ..approval import Approvals, Request, Verdict
from ..errors import BantamError, LimitReached, OutputLimitReached, ToolError
from ..events import Error, Event, Notice, Reasoning, RequestStarted, Retry, Text, ToolCall, ToolResult, UsageReport
from ..loop import CUT
from ..providers import context_window_later
from ..providers.cancel import Stopper
from ..toolnames import DELEGATING
from ..tools import ToolFront
from ..tools.files import Buffers
from . import commands, settings, updates
from .output import Display, Mirror, Updates, exit_meta
from .rpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, RpcError, RpcLink, log

# Events at which a cancelled turn stops: those a turn emits while it still has work ahead (a
# ToolResult is not one: a tool that has finished keeps its step).
STOP_AT = (RequestStarted, Text, Reasoning, ToolCall, Retry)
REFUSED = ("content_filter", "refusal")  # finish reasons of a model that declined to answer
SERVERS_WAIT = 30.0  # seconds a session's start waits for the editor's new MCP servers (a start's own limit)


class EditorSession:
    commands = slash.EDITOR  # its slash commands (slash.py: the table every front end runs)
    keys = ""

    def __init__(self, conn: RpcLink, session_id: str, folder: Path, flags: dict[str, str],
                 mcp_servers: dict[str, Any], client: dict | None = None):
        self.conn, self.id, self.folder = conn, session_id, folder
        self.client = client or {}  # initialize's clientCapabilities
        fs: dict = self.client["fs"] if isinstance(self.client.get("fs"), dict) else {}
        self.buffers = Buffers(read=self.read_text if fs.get("readTextFile") else None,
                               write=self.write_text if fs.get("writeTextFile") else None)
        self.written: dict[str, tuple[str | None, str]] = {}  # real path -> (old, new) text of a write through the editor
        self.plan: list[dict] = []  # this turn's sub-agents, as the editor's plan
        self.given = dict(flags)  # the options after `bantam acp`
        self.flags = dict(flags)  # and this session's choices: its mode's keys, its model
        self.editor_servers = mcp_servers  # ServerSpecs from session/new: the editor user's choice
        self.busy = threading.Lock()    # one prompt at a time
        self.stopper = Stopper()        # cancel: the flag, and the sockets of responses in flight
        self.cancelled = self.stopper.event
        self.calls: dict[str, tuple[str, Path | None, str | None, dict]] = {}  # id -> (tool, file, old text, arguments)
        self.running: dict[int, str] = {}  # thread -> the call it runs (sub-agents run in threads of their own)
        self.streams: dict[str, Updates | Mirror | Display] = {}  # call id -> its command's output, shown as it comes
        self.usage: Any = None
        self.early: list[str] = []      # notices from before the client knows this session
        self.announced = False
        self.commands_offered: list[dict] = []  # as the editor was last told (commands.offer)
        # the person at the editor approves; "always" lasts for this session, across /model
        self.approvals = Approvals(ask=self.ask)
        self.log = transcripts.SessionLog(session_id, folder)
        self.messages: list[dict] = []
        self.configure(first=True)
        self.running_session = self.session
        self.mode = settings.mode_of(self.cfg.sandbox, self.cfg.approval)
        self.models: list[str] = []  # the endpoint's, once fetched (announce)
        self.messages = self.session.messages()

    # --- building -------------------------------------------------------------------------------

    def configure(self, first: bool = False, cfg: config.Config | None = None) -> None:
        """(Re)build the bantam session from the flags (`cfg`: as already loaded from them): at the
        start (`first`: the editor waits for the answer, and the servers it named start), for a
        mode and for a model."""
        cfg = cfg or session.load_config(self.flags, self.folder)
        before: session.Session | None = getattr(self, "session", None)
        built = before.with_config(cfg) if before is not None else \
            session.build(cfg, self.folder, session.FrontEnd(
                on_event=self.on_event, approvals=self.approvals, undo=undo.session_key(self.id),
                tool_front=ToolFront(buffers=self.buffers, on_output=self.command_output)))
        self.session = replace(built, system=built.system + settings.PLAN_NOTE) \
            if getattr(self, "mode", "") == "plan" else built
        self.window = context_window_later(self.session.provider, cfg) if self.session.provider else None
        if self.editor_servers:
            if first:
                self.start_servers()
            self.add_mcp(self.session.toolbox)
        if self.messages:
            self.messages[0] = {"role": "system", "content": self.session.system}
        self.stopper.watch(self.session.provider)

    def servers(self) -> dict[str, Any]:
        """The editor's servers, keyed by session in the process's one hub, so that two sessions'
        servers of one name coexist."""
        return {f"{self.id}/{name}": spec for name, spec in self.editor_servers.items()}

    def start_servers(self) -> None:
        """Start the editor's servers and wait, at most SERVERS_WAIT in all, for those whose tools
        bantam does not know (neither running nor cached), so that the toolbox built next offers
        them from the first request. A server still starting at the bound, or failed, is left to
        add_mcp: its tools come when its start ends, its failure is one notice."""
        from .. import mcp
        if not mcp.has_sdk():
            return
        from ..mcp import cache, launch
        unseen = {key: spec for key, spec in self.servers().items()
               if launch.running(key, spec) is None and cache.load(spec) is None}
        if not unseen:
            return
        deadline = time.monotonic() + SERVERS_WAIT
        try:  # the SDK's import first (waiting starts it at once), then every start, in parallel
            connections = launch.wait(launch.launch(unseen), timeout=SERVERS_WAIT)
            for c in connections.values():
                if c.started is not None:
                    launch.wait(c.started, timeout=max(deadline - time.monotonic(), 0.0))
        except Exception:  # past the bound, or the SDK failed to import (add_mcp says so)
            return

    def add_mcp(self, box: Any) -> None:
        """The editor's MCP servers, started like the user's own trusted ones; children get them too."""
        from .. import mcp
        if not mcp.has_sdk():
            return mcp.tell(box.ctx, "acp-sdk", "the editor's MCP servers were not started: the mcp "
                            "package is not installed (pip install 'bantam[mcp]')")
        from ..mcp.tools import add_tools
        add_tools(box, self.servers())
        base = box.ctx.front.extend

        def extend(child: Any) -> Any:
            child = base(child) if base is not None else child
            add_tools(child, self.servers())
            return child
        box.ctx.front = replace(box.ctx.front, extend=extend)

    @property
    def cfg(self) -> config.Config:
        return self.session.cfg

    # --- what the slash commands ask of a chat (slash.Chat) -------------------------------------

    @property
    def session_id(self) -> str:
        return self.id

    def confirm(self, question: str, default: bool) -> bool:
        """Nobody is asked in the editor: the default (an undo goes ahead and keeps files you
        changed since; --force overwrites them)."""
        return default

    def keep(self) -> None:
        self.save()

    def undo_key(self) -> str:
        return undo.session_key(self.id)

    def choose(self, keys: dict[str, str]) -> None:
        """A new session with `keys` chosen for this session (a slash command's); the mode picker
        and the model dropdown follow."""
        self.flags.update(keys)
        cfg = session.load_config(self.flags, self.folder)
        if set(keys) & set(settings.MODE_KEYS):
            self.mode = settings.mode_of(cfg.sandbox, cfg.approval)
            self.update({"sessionUpdate": "current_mode_update", "currentModeId": self.mode})
        self.configure(cfg=cfg)
        self.show_options()

    def mcp_servers(self) -> dict[str, Any]:
        """The servers this session offers: the user's (trusted) and the editor's."""
        return {**mcp.servers_here(self.cfg.mcp, self.folder), **self.servers()}

    def modes(self) -> dict:
        return settings.modes(self.mode)

    def set_mode(self, mode: str) -> None:
        """A new session configuration with the mode's keys; the conversation goes on in it (a
        turn that runs finishes under the old one)."""
        if mode not in settings.MODES:
            raise RpcError(INVALID_PARAMS, f"unknown mode {mode!r} (modes: {', '.join(settings.MODES)})")
        self.mode = mode
        self.flags = settings.flags_for(mode, self.given, self.flags)
        self.configure()

    def set_model(self, name: str) -> None:
        """A new session configuration with this model (any name the endpoint takes: its list
        may be partial); the conversation goes on with it."""
        if not name.strip():
            raise RpcError(INVALID_PARAMS, "a model name is required")
        self.flags["model"] = name.strip()
        self.configure()

    def settings(self) -> dict:
        """What the answer that opens this session says of its settings."""
        return {"modes": self.modes(), "configOptions": self.config_options()}

    def config_options(self) -> list[dict]:
        return settings.options(self.mode, self.cfg.model, self.models)

    def set_option(self, option: str, value: str) -> list[dict]:
        """session/set_config_option: the mode or the model; all options as they are now."""
        if option == "mode":
            self.set_mode(value)
        elif option == "model":
            self.set_model(value)
        else:
            raise RpcError(INVALID_PARAMS, f"unknown configuration option {option!r} (options: mode, model)")
        return self.config_options()

    def fetch_models(self) -> None:
        """The endpoint's models for the dropdown (a request to it, so not before the editor has
        the session); a failure leaves the current model alone in the list."""
        try:
            models = self.session.provider.list_models() if self.session.provider is not None else []
        except BantamError as e:
            return log(f"the model list could not be read: {e}")
        self.models = models
        self.show_options()

    def show_options(self) -> None:
        self.update({"sessionUpdate": "config_option_update", "configOptions": self.config_options()})

    def announce(self) -> None:
        """After the client has the session's id: the commands, and what was said while building."""
        self.announced = True
        commands.offer(self)
        for message in self.early:
            self.update(updates.text("agent_message_chunk", f"bantam: {message}\n\n"))
        self.early.clear()
        threading.Thread(target=self.fetch_models, daemon=True, name=f"acp models {self.id}").start()

    # --- a turn ---------------------------------------------------------------------------------

    def prompt(self, blocks: list) -> dict:
        if not self.busy.acquire(blocking=False):
            raise RpcError(INVALID_REQUEST, "a prompt is already running in this session")
        try:
            self.stopper.clear()
            self.usage = None
            self.plan = []
            words, content, left_out = updates.prompt_content(blocks)
            if left_out:
                self.say(f"not taken from the prompt: {', '.join(left_out)}")
            if commands.run(self, words):
                return {"stopReason": "end_turn"}
            sent = self.mcp_prompt(words, content)
            if sent is None:
                return {"stopReason": "end_turn"}
            stop = self.turn(sent)
            commands.offer(self)  # the prompts of MCP servers that started during the turn
            result: dict[str, Any] = {"stopReason": "cancelled" if self.cancelled.is_set() else stop}
            if self.usage is not None:
                u = self.usage
                result["usage"] = {"inputTokens": u.prompt_tokens, "outputTokens": u.completion_tokens,
                                   "totalTokens": u.prompt_tokens + u.completion_tokens,
                                   **({"cachedReadTokens": u.cached_tokens} if u.cached_tokens else {}),
                                   **({"cachedWriteTokens": u.cache_write_tokens} if u.cache_write_tokens else {})}
            return result
        finally:
            for call_id in list(self.streams):  # a cancelled command's: its terminal is released
                self.streams.pop(call_id).close()
            self.busy.release()

    def mcp_prompt(self, words: str, content: str | list[dict]) -> str | list[dict] | None:
        """`/server:prompt ARGS` naming one of the session's MCP servers (the user's and the
        editor's): the server's messages join the conversation and the last one is what is sent.
        Anything else is sent as it came; None: nothing to send (the editor was told why)."""
        name, _, arg = words.strip().partition(" ")
        server = name.removeprefix("/").partition(":")[0]
        servers = self.mcp_servers()
        if not (name.startswith("/") and ":" in name and any(s.name == server for s in servers.values())):
            return content
        from ..mcp.prompts import expand
        try:
            messages = expand(servers, name, arg.strip(), self.session.toolbox.ctx)
            if not messages or messages[-1]["role"] != "user":
                raise ToolError(f"{name}: the server's prompt does not end with a message of yours to send")
        except BantamError as e:
            self.say(str(e))
            return None
        self.messages += messages[:-1]
        return messages[-1]["content"]

    def turn(self, content: str | list[dict]) -> str:
        """Run the loop on the user's message; the stop reason, as exact as the model said it."""
        asked = {"role": "user", "content": content}
        self.messages.append(asked)
        unanswered = "[no answer: the model returned an empty answer]"  # closes the turn if it has none
        try:
            self.running_session = self.session  # a mode or model chosen meanwhile is the next turn's
            done = self.running_session.run(self.messages, lambda _: self.save())
        except KeyboardInterrupt:  # cancelled: the unfinished step is gone, the rest is kept
            unanswered = transcripts.INTERRUPTED
            return "cancelled"
        except LimitReached as e:
            unanswered = f"[no answer: {e}]"
            self.say(str(e))
            return "max_tokens" if isinstance(e, OutputLimitReached) else "max_turn_requests"
        except BantamError as e:
            unanswered = transcripts.INTERRUPTED if self.cancelled.is_set() else f"[no answer: {e}]"
            if isinstance(content, list) and not self.cancelled.is_set():  # a model that takes no
                asked["content"] = without_images(content, e)  # images: not sent again next turn
            if self.cancelled.is_set():  # a response whose socket cancel shut
                return "cancelled"
            raise RpcError(INTERNAL_ERROR, str(e)) from None
        finally:
            transcripts.close_turn(self.messages, unanswered)  # the next prompt is not this one's continuation
            self.save()
        if done.finish_reason in CUT:
            return "max_tokens"
        return "refusal" if done.finish_reason in REFUSED else "end_turn"

    def cancel(self) -> None:
        """session/cancel: stop the running turn now (nothing to do when none runs)."""
        if not self.busy.locked():
            return
        # the running command's group is killed at its next poll (the turn's session: a mode or
        # model chosen since has built another)
        self.running_session.toolbox.ctx.cancel.set()
        self.stopper.set()

    def save(self) -> None:
        try:
            self.log.sync(self.messages, self.cfg.model, self.cfg.api_key)
        except (OSError, BantamError) as e:  # the turn goes on; the editor hears why it is not saved
            self.say(f"the session could not be saved: {e}")

    # --- what the loop says -------------------------------------------------------------------

    def update(self, payload: dict) -> None:
        self.conn.notify("session/update", {"sessionId": self.id, "update": payload})

    def say(self, message: str) -> None:
        """bantam's own words (not the model's): shown as a message, never kept in the history."""
        log(message)
        if not self.announced:
            self.early.append(message)
        else:
            self.update(updates.text("agent_message_chunk", f"\n\nbantam: {message}\n\n"))

    def show(self, text: str) -> None:
        """A command's output (a listing), shown as it is; never kept in the history."""
        self.update(updates.text("agent_message_chunk", f"\n\n{text}\n\n"))

    def on_event(self, event: Event) -> None:
        if self.cancelled.is_set() and isinstance(event, STOP_AT):
            raise KeyboardInterrupt
        if isinstance(event, Text):
            self.update(updates.text("agent_message_chunk", event.text))
        elif isinstance(event, Reasoning):
            self.update(updates.text("agent_thought_chunk", event.text))
        elif isinstance(event, ToolCall):
            self.tool_started(event)
        elif isinstance(event, ToolResult):
            self.tool_finished(event)
        elif isinstance(event, UsageReport):
            self.usage_report(event)
        elif isinstance(event, (Notice, Error)):
            self.say(event.message)
        elif isinstance(event, Retry):
            log(f"{event.message}; retrying in {event.delay:g}s")

    def tool_started(self, event: ToolCall) -> None:
        call_id = f"{event.agent}/{event.id}" if event.agent else event.id
        args = updates.arguments(event.arguments)
        ctx = self.session.toolbox.ctx
        where = ctx.at(args["path"]) if isinstance(args.get("path"), str) else None
        old = updates.read_text(where, ctx.tmp) if where is not None and event.name in updates.EDITS else None
        self.calls[call_id] = (event.name, where, old, args)  # the text before the write, for its diff
        self.running[threading.get_ident()] = call_id  # the tool runs in the thread that announced it
        self.update(updates.started(call_id, event.name, args, where))
        if event.name in DELEGATING and not event.agent:  # a sub-agent's task: a step of the plan
            self.plan.append({"content": str(args.get("task") or args.get("prompt") or "")[:500], "priority": "medium",
                              "status": "in_progress", "call": call_id})
            self.show_plan()

    def tool_finished(self, event: ToolResult) -> None:
        call_id = f"{event.agent}/{event.id}" if event.agent else event.id
        name, where, old, _ = self.calls.pop(call_id, (event.name, None, None, {}))
        diff = None
        if where is not None and name in updates.EDITS:
            new: str | None
            through_editor = self.written.pop(os.path.realpath(where), None)
            if through_editor is not None:  # the editor's text before (when it serves reads) and after
                old, new = through_editor[0] if through_editor[0] is not None else old, through_editor[1]
            else:
                new = updates.read_text(where, self.session.toolbox.ctx.tmp)
            diff = updates.diff(where, old, new)
        stream = self.streams.pop(call_id, None)
        shown = stream.close() if stream is not None else []
        last = updates.finished(call_id, event.content, event.is_error, diff, shown)
        if isinstance(stream, Mirror):
            last["_meta"] = exit_meta(call_id, event.content)
        self.update(last)
        for entry in self.plan:
            if entry["call"] == call_id:
                entry["status"] = "completed"
                self.show_plan()

    def command_output(self, data: bytes) -> None:
        """A piece of a running command's output (in the thread that runs it), for the editor."""
        call_id = self.running.get(threading.get_ident())
        if call_id is None:
            return
        stream = self.streams.get(call_id)
        if stream is None:
            stream = self.streams[call_id] = self.open_stream(call_id)
        stream.feed(data)

    def open_stream(self, call_id: str) -> Updates | Mirror | Display:
        meta = self.client.get("_meta")
        if isinstance(meta, dict) and meta.get("terminal_output") is True:
            return Mirror(self.update, call_id, str(self.folder))
        if self.client.get("terminal") is True:
            try:
                return Display(self.conn, self.id, call_id, self.update, self.cancelled)
            except (RpcError, OSError) as e:  # no terminal after all: the output goes in the call
                log(f"no terminal for {call_id}: {e}")
        return Updates(self.update, call_id)

    def show_plan(self) -> None:
        """The turn's sub-agents as the editor's plan (each update carries the whole plan)."""
        self.update({"sessionUpdate": "plan", "entries": [{k: v for k, v in entry.items() if k != "call"}
                                                          for entry in self.plan]})

    # --- the editor's files ---------------------------------------------------------------------

    def read_text(self, path: Path) -> str:
        """fs/read_text_file: the file as the editor has it, unsaved changes included."""
        try:
            answer = self.conn.request("fs/read_text_file", {"sessionId": self.id, "path": str(path)},
                                       cancel=self.cancelled)
        except RpcError as e:
            raise ToolError(f"the editor could not read {path}: {e}") from None
        content = (answer or {}).get("content")
        if not isinstance(content, str):
            raise ToolError(f"the editor sent no text for {path}")
        return content

    def write_text(self, path: Path, text: str) -> None:
        """fs/write_text_file: the editor writes the file and shows the change (its text before,
        for the diff, is the editor's too)."""
        old = None
        if self.buffers.read is not None and path.is_file():
            try:
                old = self.read_text(path)
            except ToolError:
                old = updates.read_text(path)
        try:
            self.conn.request("fs/write_text_file", {"sessionId": self.id, "path": str(path), "content": text},
                              cancel=self.cancelled)
        except RpcError as e:
            raise ToolError(f"the editor could not write {path}: {e}") from None
        self.written[os.path.realpath(path)] = (old, text)

    def usage_report(self, event: UsageReport) -> None:
        self.usage = event.usage
        size = self.window() if self.window is not None else 0
        if event.usage.context_tokens and size:
            self.update({"sessionUpdate": "usage_update", "used": event.usage.context_tokens, "size": size})

    # --- approvals ------------------------------------------------------------------------------

    def ask(self, request: Request) -> Verdict:
        """Where bantam would ask a person: the editor asks its user."""
        options = [{"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
                   {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}]
        if request.prefix:
            shown = f"'{request.prefix}'" if request.action != "write" else f"writes in {request.prefix}"
            options.insert(1, {"optionId": "allow_always", "name": f"Always allow {shown} in this session",
                               "kind": "allow_always"})
        call_id = self.running.get(threading.get_ident(), "")
        name, where, old, args = self.calls.get(call_id, ("", None, None, {}))
        call: dict[str, Any] = {"toolCallId": call_id or "approval", "status": "pending",
                                "title": f"{request.why}: {request.text}",
                                "content": updates.asked(request.action, request.text, name, args, where, old)}
        if args:
            call["rawInput"] = args
        answer = self.conn.request("session/request_permission",
                                   {"sessionId": self.id, "toolCall": call, "options": options},
                                   cancel=self.cancelled)
        outcome = (answer or {}).get("outcome") or {}
        if outcome.get("outcome") == "cancelled":  # the client cancelled the turn
            self.cancelled.set()
            raise KeyboardInterrupt
        chosen = outcome.get("optionId")
        if chosen not in ("allow_once", "allow_always"):
            return Verdict(False, "the user rejected it in the editor")
        if call_id:
            self.update({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
        return Verdict(True, request.text, remember=chosen == "allow_always")

    # --- loading --------------------------------------------------------------------------------

    def adopt(self, history: list[dict]) -> None:
        """Start from another session's conversation (a fork), saved at once under this id."""
        self.messages = self.session.messages(history)
        self.save()

    def resume(self) -> list[dict]:
        """The saved conversation, read so that the next save appends to it; the replay's updates."""
        history = self.log.read(notify=log)
        self.messages = self.session.messages(history)
        return updates.replay(history)


def without_images(content: list[dict], why: Exception) -> str:
    """A message's text, its images replaced by a note (the request with them failed)."""
    words = "\n\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    dropped = sum(p.get("type") == "image_url" for p in content)
    return f"{words}\n\n[{dropped} attached image(s) left out: the request with them failed: {why}]"
