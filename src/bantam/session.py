"""One place that builds a session: a configuration and a folder made into what the loop needs.

    cfg = session.load_config(flags, folder)
    s = session.build(cfg, folder, FrontEnd(on_event=render))  # provider, tools (+ MCP), prompt
    turn = s.run([*s.messages(), {"role": "user", "content": "..."}])

The session's folder is a value: shell commands start in it, relative paths are
read and written from it, the sandbox's writable roots, the approvals, the project's AGENTS.md
and config file, its trust and its `.mcp.json` are all taken from it. Nothing here or below reads
the process's folder, so two sessions with different folders run side by side in one process.
Only a front end (cli, oneshot, repl, web, batch, daemon) turns the user's folder into one.

Front ends differ only by one value, `FrontEnd`: where events go, who approves, which tools
(or a `toolbox` of their own, as the daemon has), which prompt, whether MCP servers' tools are
added, whether a model is needed at all, what bounds a turn, what it adds to each tool call.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import config, loop, mcp
from .approval import Approvals
from .config import Config
from .events import OnEvent, ignore
from .prompt import system_prompt
from .providers import Provider, make_provider
from .sandbox import Sandbox, session_tmp
from .tools import ToolContext, Toolbox, ToolFront, make_toolbox


@dataclass(frozen=True)
class FrontEnd:
    """What a front end adds to a session. The default is a session no one watches and no one is
    asked in (a library call, a test); a new configuration rebuilds with the same value."""
    on_event: OnEvent = ignore  # where the session's events go
    approvals: Approvals | None = None  # who is asked (None: no one; "always" lasts the session)
    cancel: threading.Event | None = None  # set by the front end: the turn stops at its next step
    undo: str | None = None  # the key its turns' file changes are recorded under (bantam.undo; None: not)
    # What it adds to each tool call (tools.ToolFront, which the tools read as ctx.front): an
    # editor's buffers and live command output, a thread's durable agents.
    tool_front: ToolFront = ToolFront()
    tools: tuple[str, ...] | None = None  # the core tools offered (None: cfg.tools)
    toolbox: Callable[[ToolContext], Toolbox] | None = None  # a toolbox of its own instead (the daemon's)
    system: str | None = None  # the prompt (None: built from cfg and the folder's AGENTS.md)
    with_mcp: bool = True  # the MCP servers' tools join this toolbox and every child's (when configured)
    with_model: bool = True  # False: no model at all, a tools-only session
    # What bounds a turn, made from the configuration (a new one makes them again): the daemon
    # grows config.json's max_tokens for a cut answer, `bantam mcp` gives a task the steps asked for.
    limits: Callable[[Config], loop.Limits] = loop.Limits.from_config


@dataclass
class Session:
    """What one conversation needs, all of it bound to one folder."""
    cfg: Config
    folder: Path
    provider: Provider | None
    system: str
    toolbox: Toolbox
    limits: loop.Limits  # what bounds each turn (the front end's `limits`, from this configuration)
    front: FrontEnd  # how it was built, so that a new configuration makes a new session the same way

    @property
    def approvals(self) -> Approvals:
        return self.toolbox.ctx.approvals

    def with_config(self, cfg: Config, **changes: Any) -> "Session":
        """This session under a new configuration (/cfg, /trust, a mode or a model chosen in an
        editor): built again as the front end built it, with `changes` to its FrontEnd, a provider
        for the new settings, in the same folder and with the same /tmp."""
        return _assemble(cfg, self.folder, replace(self.front, **changes), None, self.toolbox.ctx.tmp)

    def sandbox(self) -> Sandbox:
        """The boundary around this session's commands (its writable roots are placed from the folder)."""
        return Sandbox.for_config(self.cfg, self.folder, self.toolbox.ctx.tmp)

    def messages(self, history: Iterable[dict] = ()) -> list[dict]:
        """A conversation: this session's system prompt, then `history` (any system message in it dropped)."""
        return [{"role": "system", "content": self.system}, *(m for m in history if m.get("role") != "system")]

    def run(self, messages: list[dict], save: Callable[[list[dict]], Any] | None = None) -> loop.Turn:
        """One turn of the core loop on `messages` (extended in place), with this session's tools and limits."""
        if self.provider is None:
            raise ValueError("this session was built without a model (FrontEnd.with_model=False)")
        return loop.run(self.provider, messages, self.toolbox, self.limits, self.toolbox.ctx.on_event, save,
                        self.guards())

    def guards(self) -> list[loop.Guard]:
        """A turn's policy: the default guards, and the undo recorder when this session records."""
        guards = loop.default_guards(self.limits)
        if self.front.undo and self.cfg.undo_keep:
            from .undo import UndoGuard
            guards.append(UndoGuard(self.front.undo, self.folder, self.cfg.undo_keep, self.toolbox.ctx.on_event))
        return guards


def absolute_folder(folder: str | os.PathLike) -> Path:
    """A session's folder, checked to be absolute: as the front end chose it (a relative one would be read
    against whatever the process's folder happens to be)."""
    path = Path(folder)
    if not path.is_absolute():
        raise ValueError(f"a session's folder must be absolute, got {os.fspath(folder)!r}")
    return path


def load_config(flags: Mapping[str, str] | None, folder: str | os.PathLike, **options: Any) -> Config:
    """The configuration of a session in `folder`: that project's config file (when trusted, its
    boundary keys), the user's, the environment, the flags."""
    return config.load(flags, directory=absolute_folder(folder), **options)


def build(cfg: Config, folder: str | os.PathLike, front: FrontEnd = FrontEnd(),
          provider: Provider | None = None) -> Session:
    """A session in `folder`, as `front` wants it. `provider`: a model already made (a test's, a
    batch worker's kept from task to task); None: made from `cfg`, unless front.with_model is False.
    It stays apart from `front` because it belongs to the configuration: a new one makes a new model."""
    return _assemble(cfg, absolute_folder(folder), front, provider, None)


def _assemble(cfg: Config, folder: Path, front: FrontEnd, provider: Provider | None, tmp: Path | None) -> Session:
    """The session; `tmp` is the folder its commands share as /tmp, kept when a session is built
    again under a new configuration (None: a new one, sandbox.session_tmp)."""
    tmp = tmp if tmp is not None else session_tmp()
    model = provider if provider is not None or not front.with_model else make_provider(cfg)
    approvals = front.approvals if front.approvals is not None else Approvals()
    prompt = front.system if front.system is not None else \
        system_prompt(cfg, folder, can_ask=approvals.ask is not None, tmp=tmp)
    calls = replace(front.tool_front, extend=mcp.offer) if front.with_mcp else front.tool_front
    ctx = ToolContext(cfg, model, prompt, front.on_event, approvals=approvals, folder=folder, run_loop=loop.run,
                      tmp=tmp, front=calls)
    if front.cancel is not None:
        ctx.cancel = front.cancel
    names = cfg.tools if front.tools is None else front.tools
    box = front.toolbox(ctx) if front.toolbox is not None else make_toolbox(tuple(names), ctx)
    return Session(cfg, folder, model, prompt, box, front.limits(cfg), replace(front, approvals=approvals))
