"""Front ends without a conversation on screen: `bantam -p TEXT`, `bantam FILE`, `CMD | bantam`,
`bantam --thread ID`, and `bantam handler` (a queue handler: task on stdin, topic and result out).

A front end: its workspace is the folder the user started bantam in (`here()`), or the folder a
caller passes (a batch task's); the session itself is built by bantam.session."""
from __future__ import annotations

import io
import os
import stat
import sys
import threading
from pathlib import Path
from typing import IO, BinaryIO

from . import loop, session, transcripts
from .compact import is_context_overflow
from .config import FALLBACK_CONTEXT_WINDOW, Config, embedded_notice
from .envpolicy import user_env
from .fsutil import read_up_to
from .errors import ConfigError, LimitReached, ProviderError
from .events import Done, Error, Notice, OnEvent
from .providers import context_window_later, make_provider
from .render import make_renderer
from .transcripts import Thread
from .tools import ToolFront
from .tools.shell import run_shell


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
    return finished(turn)


def finished(turn: loop.Turn) -> int:
    """The exit code of a turn that ended with an answer: 1 when it was cut at the output limit
    (a budget ran out, as DESIGN.md's exit codes say; stderr said so), else 0. A script reading
    the answer from a pipe learns from this that it is not whole."""
    return 1 if turn.finish_reason in loop.CUT else 0


def run_continue(cfg: Config, prompt: str, json_lines: bool = False) -> int:
    """`bantam -c -p TEXT`: one more turn of this folder's latest saved session (the project's, or
    one an editor made here), which is saved again."""
    autosave = transcripts.Autosave(here(), transcripts.continued(here()))
    provider = make_provider(cfg)
    render = make_renderer(cfg, json_lines, sys.stdout, sys.stderr, context_window_later(provider, cfg))
    try:
        history = autosave.resume(lambda text: render(Notice(message=text)))
    except transcripts.SessionError as e:
        if not transcripts.exists(autosave.id):
            raise ConfigError(transcripts.CONTINUE_NONE) from None
        raise ConfigError(f"bantam -c: {e}") from None
    def save(messages: list[dict]) -> None:  # a warning (another bantam saves it) is said, not dropped
        if warning := autosave(messages, model=cfg.model, secret=cfg.api_key):
            render(Notice(message=warning))
    turn = answer(cfg, provider, prompt, render, history=[m for m in history if m.get("role") != "system"],
                  save=save)
    if turn is None:
        return 1
    render(Done(text=turn.text, usage=turn.usage))
    return finished(turn)


def answer(cfg: Config, provider, prompt: str | None, render: OnEvent, thread_id: str | None = None,
           history: list[dict] | None = None, save=None, folder: Path | None = None,
           cancel: threading.Event | None = None) -> loop.Turn | None:
    """Run the loop on a new conversation, a thread's, or a saved session's `history` (then
    `save(messages)` after each step), in `folder` (default: the user's); None if the model or a
    budget failed."""
    thread = Thread(thread_id) if thread_id else None
    past = thread.history() if thread else history or []
    turn_number = sum(m["role"] == "user" for m in past) + (prompt is not None)
    undo = None
    if thread:  # its turns are recorded for `bantam undo --thread ID`; the undo package loads only then
        from .undo import thread_key
        undo = thread_key(thread.id)
    front = session.FrontEnd(on_event=render, tool_front=ToolFront(durable=thread.agents(turn_number) if thread else None),
                             undo=undo, cancel=cancel)  # a batch task's: set by the batch's stop
    work = session.build(cfg, folder or here(), front, provider)
    messages = [{"role": "system", "content": work.system}, *past]
    before = list(messages)
    if prompt is not None:
        if thread and loop.unanswered(messages):  # its saved call finds a durable sub-agent's work
            raise ConfigError(f"thread {thread_id} has a step cut off before its results; finish it "
                              f"first: bantam --thread {thread_id}")
        messages.append({"role": "user", "content": prompt})
    elif messages[-1]["role"] not in ("user", "tool") and not loop.unanswered(messages):
        # a request, a turn cut off between steps, or a step saved before its calls ran
        raise ConfigError(f"thread {thread_id} has no unanswered request to resume; give a prompt")
    if cfg.embedded:
        render(Notice(message=embedded_notice(cfg)))
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
    """Actor-mesh handler: the task on stdin; `ACTOR_RESULT_TOPIC\\nRESULT` on stdout."""
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


# --- input from a pipe or a file -----------------------------------------------------------------

# No tokenizer packs more than a few bytes of text into a token on average (English prose is about
# 4): input longer than the window at this many bytes a token cannot fit, whatever it says.
BYTES_PER_TOKEN = 6
INPUT_HARD_CAP = 16 * 1024 * 1024  # read at most this much, whatever window is configured
BINARY_PROBE = 8192                # the head looked at for NUL bytes before the rest is read


def input_window(cfg: Config) -> int:
    """The context window in tokens, as known before any request: the configured one, the local
    model's n_ctx, else the fallback (large: input is refused only when it surely cannot fit)."""
    if cfg.context_window:
        return cfg.context_window
    if cfg.provider == "local":
        from .providers.local import DEFAULT_CTX
        return cfg.n_ctx or DEFAULT_CTX
    return FALLBACK_CONTEXT_WINDOW


def read_input(cfg: Config, stream: BinaryIO | None = None) -> str | None:
    """Standard input (or `stream`) as the prompt's text, when it is a pipe or a file (never a
    terminal, never /dev/null). At most what could fit the context window is read, plus one
    byte: input past that, or binary input, is refused at once (ConfigError: bad usage, exit 2)
    with what to do instead, before any request and without holding it all in memory."""
    stream = stream or sys.stdin.buffer
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    window = input_window(cfg)
    cap = min(window * BYTES_PER_TOKEN, INPUT_HARD_CAP)
    data = stream.read(min(cap + 1, BINARY_PROBE))
    _refuse_binary(data)
    if len(data) <= cap and len(data) == BINARY_PROBE:
        data += read_up_to(stream, cap + 1 - len(data))  # the rest, without taking `cap` first
    if len(data) > cap:
        size = os.fstat(stream.fileno()).st_size if stat.S_ISREG(mode) else 0
        told = f"{size:,} bytes" if size else f"more than {cap:,} bytes"
        raise ConfigError(f"the input ({told}) cannot fit the model's context window ({window:,} tokens, "
                          f"{cap:,} bytes at most); save it to a file and name the file in the prompt "
                          "(the agent reads what it needs with its tools), or use a model with a larger "
                          "context_window")
    _refuse_binary(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"the input is not UTF-8 text (byte {e.start:,} of {len(data):,}); bantam "
                          "takes text: convert it (iconv -t utf-8), or name the file in the prompt "
                          "for the agent to look at with its tools") from None


def _refuse_binary(data: bytes) -> None:
    at = data.find(b"\0")
    if at >= 0:
        raise ConfigError(f"the input is binary (a NUL byte at byte {at:,}), not text; name the file "
                          "in the prompt for the agent to look at with its tools")
