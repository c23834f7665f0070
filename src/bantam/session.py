"""One place that builds a session: a configuration and a folder made into what the loop needs.

    cfg = session.load_config(flags, folder)
    s = session.build(cfg, folder, on_event=render)       # provider, tools (+ MCP), prompt
    turn = s.run([*s.messages(), {"role": "user", "content": "..."}])

The session's folder is a value: shell commands start in it, relative paths are
read and written from it, the sandbox's writable roots, the approvals, the project's AGENTS.md
and config file, its trust and its `.mcp.json` are all taken from it. Nothing here or below reads
the process's folder, so two sessions with different folders run side by side in one process.
Only a front end (cli, oneshot, repl, web, batch, daemon) turns the user's folder into one.

Front ends differ only by explicit parameters: who approves (`approvals`), which tools
(`tools`, or a `toolbox` of their own as the daemon has), which prompt (`system`), whether MCP
servers' tools are added (`with_mcp`), whether a model is needed at all (`with_model`), what
bounds a turn (`limits`).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import config, loop, mcp
from .approval import Approvals
from .config import Config
from .events import OnEvent, ignore
from .prompt import system_prompt
from .providers import Provider, make_provider
from .sandbox import Sandbox, session_tmp
from .tools import ToolContext, Toolbox, make_toolbox
from .tools.files import Buffers


@dataclass
class Session:
    """What one conversation needs, all of it bound to one folder."""
    cfg: Config
    folder: Path
    provider: Provider | None
    system: str
    toolbox: Toolbox
    limits: loop.Limits  # what bounds each turn (build's `limits`, from this configuration)
    undo: str | None = None  # the conversation's undo key (undo.thread_key/session_key): its turns are recorded
    # How the front end built it (build's keyword arguments), so that a new configuration makes a
    # new session the same way (with_config) instead of an edited one.
    made: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def approvals(self) -> Approvals:
        return self.toolbox.ctx.approvals

    def with_config(self, cfg: Config, **changes: Any) -> "Session":
        """This session under a new configuration (/cfg, /trust, a mode or a model chosen in an
        editor): built again as the front end built it, with `changes`, a provider for the new
        settings unless one is given, in the same folder and with the same /tmp."""
        made = {**self.made, "provider": None, "tmp": self.toolbox.ctx.tmp, **changes}
        return build(cfg, self.folder, **made)

    def sandbox(self) -> Sandbox:
        """The boundary around this session's commands (its writable roots are placed from the folder)."""
        return Sandbox.for_config(self.cfg, self.folder, self.toolbox.ctx.tmp)

    def messages(self, history: Iterable[dict] = ()) -> list[dict]:
        """A conversation: this session's system prompt, then `history` (any system message in it dropped)."""
        return [{"role": "system", "content": self.system}, *(m for m in history if m.get("role") != "system")]

    def run(self, messages: list[dict], save: Callable[[list[dict]], Any] | None = None) -> loop.Turn:
        """One turn of the core loop on `messages` (extended in place), with this session's tools and limits."""
        if self.provider is None:
            raise ValueError("this session was built without a model (with_model=False)")
        return loop.run(self.provider, messages, self.toolbox, self.limits, self.toolbox.ctx.on_event, save,
                        self.guards())

    def guards(self) -> list[loop.Guard]:
        """A turn's policy: the default guards, and the undo recorder when this session records."""
        guards = loop.default_guards(self.limits)
        if self.undo and self.cfg.undo_keep:
            from .undo import UndoGuard
            guards.append(UndoGuard(self.undo, self.folder, self.cfg.undo_keep, self.toolbox.ctx.on_event))
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


def build(cfg: Config, folder: str | os.PathLike, *, on_event: OnEvent = ignore,
          provider: Provider | None = None, with_model: bool = True, approvals: Approvals | None = None,
          tools: Iterable[str] | None = None, system: str | None = None, with_mcp: bool = True,
          toolbox: Callable[[ToolContext], Toolbox] | None = None, durable: Any = None,
          cancel: threading.Event | None = None, undo: str | None = None, buffers: Buffers | None = None,
          tmp: Path | None = None, limits: Callable[[Config], loop.Limits] = loop.Limits.from_config) -> Session:
    """A session in `folder`. `provider`: the model (None: made from `cfg`; with_model=False: none,
    a tools-only session). `tools`: the core tools offered (default `cfg.tools`); `toolbox`: a front end's own
    toolbox from the context instead (the daemon's). `system`: the prompt (default: built from
    `cfg` and the folder's AGENTS.md). `with_mcp`: the MCP servers' tools are added to this
    toolbox and every child's (when `cfg.mcp` and a server is configured). `undo`: the key its
    turns' file changes are recorded under, for `bantam undo` (bantam.undo; None: not recorded).
    `buffers`: an editor's, which the file tools read and write through (tools/files.Buffers).
    `tmp`: the folder its commands share as /tmp (default: a new one, sandbox.session_tmp; a front
    end that builds its session again keeps the one it had). `limits`: what bounds a turn, made from
    the configuration (a new one makes them again): the daemon grows config.json's max_tokens for a
    cut answer, `bantam mcp` gives a task the steps its client asked for."""
    made = {"on_event": on_event, "with_model": with_model, "approvals": approvals, "tools": tools,
            "system": system, "with_mcp": with_mcp, "toolbox": toolbox, "durable": durable, "cancel": cancel,
            "undo": undo, "buffers": buffers, "limits": limits}
    where = absolute_folder(folder)
    model = provider if provider is not None or not with_model else make_provider(cfg)
    approvals = approvals if approvals is not None else Approvals()
    tmp = tmp if tmp is not None else session_tmp()
    prompt = system if system is not None else system_prompt(cfg, where, can_ask=approvals.ask is not None, tmp=tmp)
    ctx = ToolContext(cfg, model, prompt, on_event, approvals=approvals, folder=where, durable=durable,
                      extend=mcp.offer if with_mcp else None, run_loop=loop.run, buffers=buffers, tmp=tmp)
    if cancel is not None:
        ctx.cancel = cancel
    box = toolbox(ctx) if toolbox is not None else make_toolbox(tuple(cfg.tools if tools is None else tools), ctx)
    return Session(cfg, where, model, prompt, box, limits(cfg), undo, {**made, "approvals": approvals, "tmp": tmp})
