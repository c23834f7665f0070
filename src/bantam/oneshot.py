"""Front ends without a conversation on screen: `bantam -p TEXT`, `bantam FILE`, `CMD | bantam`,
`bantam --thread ID`, and `bantam handler` (a queue handler: task on stdin, topic and result out).

A front end: its workspace is the folder the user started bantam in (`here()`), or the folder a
caller passes (a batch task's); the session itself is built by bantam.session."""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import IO

from . import loop, session, sessions
from .compact import is_context_overflow
from .config import EMBEDDED_NOTICE, Config
from .envpolicy import user_env
from .errors import ConfigError, LimitReached, ProviderError
from .events import Done, Error, Notice, OnEvent
from .providers import context_window_later, make_provider
from .render import make_renderer
from .sessions import Thread
from .tools.shell import run_shell
from .undo import thread_key


def here() -> Path:
    """The user's folder, where they started bantam: the workspace of a command-line session."""
    return Path.cwd()


def run_prompt(cfg: Config, prompt: str | None, json_lines: bool = False, thread_id: str | None = None,
               out: IO[str] | None = None, command: bool = True) -> int:
    """Answer one prompt (or resume a thread's unanswered one); return the exit code. A prompt
    starting with ! is run as the user's command when `command` (never for piped input)."""
    if command and prompt is not None and prompt.startswith("!"):
        return run_command(cfg, prompt[1:].strip())
    provider = make_provider(cfg)
    render = make_renderer(cfg, json_lines, out or sys.stdout, sys.stderr, context_window_later(provider, cfg))
    turn = answer(cfg, provider, prompt, render, thread_id)
    if turn is None:
        return 1
    render(Done(text=turn.text, usage=turn.usage))
    return 0


def run_continue(cfg: Config, prompt: str, json_lines: bool = False) -> int:
    """`bantam -c -p TEXT`: one more turn of this project's saved session, which is saved again."""
    autosave = sessions.Autosave(here())
    provider = make_provider(cfg)
    render = make_renderer(cfg, json_lines, sys.stdout, sys.stderr, context_window_later(provider, cfg))
    try:
        history = autosave.resume(lambda text: render(Notice(message=text)))
    except sessions.SessionError as e:
        if not sessions.exists(autosave.id):
            raise ConfigError("bantam -c: this project has no saved session yet (bantam starts one)") from None
        raise ConfigError(f"bantam -c: {e}") from None
    save = lambda messages: autosave(messages, model=cfg.model, secret=cfg.api_key)  # noqa: E731
    turn = answer(cfg, provider, prompt, render, history=[m for m in history if m.get("role") != "system"],
                  save=save)
    if turn is None:
        return 1
    render(Done(text=turn.text, usage=turn.usage))
    return 0


def answer(cfg: Config, provider, prompt: str | None, render: OnEvent, thread_id: str | None = None,
           history: list[dict] | None = None, save=None, folder: Path | None = None) -> loop.Turn | None:
    """Run the loop on a new conversation, a thread's, or a saved session's `history` (then
    `save(messages)` after each step), in `folder` (default: the user's); None if the model or a
    budget failed."""
    thread = Thread(thread_id) if thread_id else None
    past = thread.history() if thread else history or []
    turn_number = sum(m["role"] == "user" for m in past) + (prompt is not None)
    work = session.build(cfg, folder or here(), on_event=render, provider=provider,
                         durable=thread.agents(turn_number) if thread else None,
                         undo=thread_key(thread.id) if thread else None)  # bantam undo --thread ID
    messages = [{"role": "system", "content": work.system}, *past]
    before = list(messages)
    if prompt is not None:
        messages.append({"role": "user", "content": prompt})
    elif messages[-1]["role"] not in ("user", "tool"):  # a request, or a turn cut off between steps
        raise ConfigError(f"thread {thread_id} has no unanswered request to resume; give a prompt")
    if cfg.embedded:
        render(Notice(message=EMBEDDED_NOTICE))
    if thread:
        thread.checkpoint(messages)  # the request is on disk before any work starts
    try:
        return work.run(messages, thread.checkpoint if thread else save)
    except (ProviderError, LimitReached) as e:
        message = str(e)
        if thread and prompt is not None and is_context_overflow(e):
            thread.checkpoint(before)  # kept, the refused request would break every later run
            message += f" (even after compacting; this request was not kept in thread {thread.id})"
        render(Error(message=message))
        return None


def run_command(cfg: Config, command: str) -> int:
    """`!cmd`: run it through shell_exec's machinery, no model involved; exit with its status."""
    result = run_shell(command, cfg.shell_timeout, cfg.tool_output_limit, env=user_env(), cwd=here())
    sys.stdout.write(result.output if result.output.endswith("\n") or not result.output
                     else result.output + "\n")
    sys.stdout.flush()
    sys.stderr.write(f"exit: {result.exit_code}\n")
    return min(result.exit_code, 255)


def run_handler(cfg: Config, task: str | None) -> int:
    """Actor-mesh handler (seed 004): the task on stdin; `ACTOR_RESULT_TOPIC\\nRESULT` on stdout."""
    if not task or not task.strip():
        raise ConfigError("bantam handler: no task on standard input")
    provider = make_provider(cfg)
    quiet_out = io.StringIO()  # the answer is written once, whole, after the topic line
    render = make_renderer(cfg, False, quiet_out, sys.stderr, context_window_later(provider, cfg))
    turn = answer(cfg, provider, task, render)
    if turn is None:
        return 1
    topic = os.environ.get("ACTOR_RESULT_TOPIC")
    sys.stdout.write(f"{topic}\n{turn.text}" if topic else turn.text)
    sys.stdout.flush()
    return 0
