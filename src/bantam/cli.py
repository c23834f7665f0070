"""Command line: parse the arguments, load the configuration, hand off to a front end."""
from __future__ import annotations

import argparse
import os
import re
import signal
import stat
import sys
import threading

from . import __version__
from .errors import BantamError, ConfigError, Terminated
from .options import common_options, flags, load_config

USAGE = r"""
bantam                         interactive session
bantam FILE                    prompt read from FILE (a prompt starting with ! runs that command)
bantam "WORDS"                 the words are the prompt, when they name no file
bantam -p TEXT                 one-shot prompt
CMD | bantam [-p TEXT]         prompt from standard input (added after TEXT when both are given)
bantam --thread ID [-p TEXT]   continue a persistent thread (without a prompt: resume its last request)
bantam -c [-p TEXT]            continue this project's saved session (one-shot with a prompt)
bantam models                  list the endpoint's models, the current one marked with *
bantam handler                 queue handler: task on stdin, "$ACTOR_RESULT_TOPIC\nRESULT" on stdout
bantam run GOAL ...            a controlled run (bantam run --help); bantam status RUN, bantam resume RUN
bantam daemon [DIR ...]        persistent agent(s) (bantam daemon --help)
bantam web                     the browser view (bantam web --help)
bantam config                  every configuration key, its value and where it came from
bantam sessions [show|export|delete ID]   saved sessions
bantam completion bash|zsh|fish           a shell completion script
bantam undo [N] [--thread ID] [--list]    take back the file changes of the last N turns (--yes, --force)
bantam trust [list|revoke [DIR]]          trust this project's files (.bantam.cfg, .mcp.json, ...) as they are
bantam mcp [list|trust]        serve bantam as an MCP server on stdio; list or trust MCP servers
bantam acp                     serve the Agent Client Protocol on stdio, for editors (Zed, JetBrains, Neovim)
bantam batch TASKS -o RESULTS  many tasks, N agents at a time (--workers N, --queue redis://...)
bantam worker redis://...      run tasks from a Redis queue (for batch --queue, or any service)"""
WORD_HELP = {  # the modes that take the common options only
    "models": "usage: bantam models [--model M] [--endpoint URL] [--provider P] [--set KEY=VALUE]\n\n"
              "List the endpoint's models; the configured one is marked with *.",
    "handler": "usage: bantam handler [--model M] [--endpoint URL] [--provider P] [--set KEY=VALUE]\n\n"
               "A queue handler (seed 004): the task on standard input; $ACTOR_RESULT_TOPIC, a newline\n"
               "and the answer on standard output (the answer alone when the variable is unset).",
}
# Modes with options of their own: `bantam WORD ...` hands the rest of the line to MODULE:FUNCTION,
# which parses it (with options.common_options) and returns the exit code. By name, so that this
# module, the top of the layers, is the only one that knows them all.
SUBCOMMANDS = {
    "run": "bantam.runs.cli:run_main",
    "status": "bantam.runs.cli:status_main",
    "resume": "bantam.runs.cli:resume_main",
    "optimize": "bantam.runs.optimize:optimize_main",
    "daemon": "bantam.daemon:main",
    "web": "bantam.web:main",
    "config": "bantam.commands:config_main",
    "sessions": "bantam.commands:sessions_main",
    "completion": "bantam.commands:completion_main",
    "mcp": "bantam.mcp.cli:main",
    "acp": "bantam.acp:main",
    "trust": "bantam.commands:trust_main",
    "undo": "bantam.undo.cli:main",
    "batch": "bantam.batch:main",
    "worker": "bantam.batch.redisq:worker_main",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bantam", usage=USAGE,
                                description="A tiny, powerful AI agent.")
    p.add_argument("words", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("-p", "--prompt", help="the prompt to answer")
    p.add_argument("--json", action="store_true", help="JSON Lines events on stdout")
    p.add_argument("--thread", metavar="ID", help="keep the conversation in thread ID across runs")
    p.add_argument("-c", "--continue", dest="resume", action="store_true",
                   help="continue this project's saved session")
    common_options(p)
    p.add_argument("--version", action="version", version=f"bantam {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stop_on_signals()
    if argv and argv[0] in SUBCOMMANDS and not os.path.isfile(argv[0]):
        return guarded(lambda: subcommand(argv[0], argv[1:]))
    if argv[:1] in (["models"], ["handler"]) and {"-h", "--help"} & set(argv):
        print(WORD_HELP[argv[0]])
        return 0
    args = parser().parse_args(argv)
    return guarded(lambda: dispatch(args))


def subcommand(word: str, rest: list[str]) -> int:
    import importlib
    module, _, function = SUBCOMMANDS[word].partition(":")
    try:
        entry = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as e:
        if not (e.name and module.startswith(e.name)):  # a missing dependency is a real error
            raise
        raise ConfigError(f"'bantam {word}' is not available in this version") from None
    return entry(rest)


def guarded(run) -> int:
    """Run a front end; bantam's own errors become one line and an exit code, never a traceback."""
    try:
        return run()
    except ConfigError as e:
        print(f"bantam: {e}", file=sys.stderr)
        return 2
    except BantamError as e:
        print(f"bantam: {e}", file=sys.stderr)
        return 1
    except Terminated as e:
        print(f"\nbantam: stopped by {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("\nbantam: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bantam ... | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP (a closed terminal, `timeout`, a cancelled job) raise Terminated, which
    ends bantam through every `finally`: the command in flight is killed, nothing is half-written.
    A signal already ignored (`nohup`) stays ignored; the daemon and the web server install their
    own handlers later. (If bantam dies anyway, by SIGKILL, bantam.reaper still ends its commands.)"""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (a test may call main from another)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _terminated)


def _terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def dispatch(args: argparse.Namespace) -> int:
    cfg = load_config(args)  # bad configuration stops every mode here, before anything runs
    words = args.words
    if words and words[0] == "models" and not os.path.isfile("models"):
        return list_models(cfg)
    if words and words[0] == "handler" and not os.path.isfile("handler"):
        from .oneshot import run_handler
        return run_handler(cfg, read_stdin())
    path, text = prompt_words(words, args.prompt)
    piped = read_stdin()
    prompt = read_prompt(text, path, piped)
    if prompt is not None and not prompt.strip():
        raise ConfigError("the prompt is empty")
    from_pipe = args.prompt is None and not words  # untrusted text: always a prompt for the model
    if prompt is not None and prompt.startswith("!") and piped and piped.strip() and not from_pipe:
        raise ConfigError("a !command takes no piped input (it would run as part of the command)")
    if args.resume and args.thread:
        raise ConfigError("-c continues this project's session; --thread ID a thread: give one of them")
    if prompt is None and not args.thread:
        if args.json:
            raise ConfigError("--json needs a prompt: -p TEXT, a FILE, or standard input")
        from .repl import run_repl
        return run_repl(flags(args), resume=args.resume)
    if args.resume:
        from .oneshot import run_continue
        assert prompt is not None  # -c without a prompt went to the terminal above
        return run_continue(cfg, prompt, args.json)
    from .oneshot import run_prompt
    return run_prompt(cfg, prompt, args.json, args.thread, command=not from_pipe)


def prompt_words(words: list[str], text: str | None) -> tuple[str | None, str | None]:
    """(prompt file, prompt text) from the positional words: a file, or else the words are the
    prompt itself (seed 004's `agent "List files in /tmp"`). A word that looks like a file name
    (`notes.md`, `dir/x`) is taken as one, so a mistyped name is an error, not a prompt."""
    files = [w for w in words if os.path.exists(w) or re.fullmatch(r"\S*(/\S*|\.\w{1,8})", w)]
    if not words or (files and len(files) == len(words)):
        if len(words) > 1:
            raise ConfigError(f"expected at most one prompt file, got {len(words)} arguments")
        return (words[0] if words else None), text
    if text is not None:
        raise ConfigError(f"give the prompt once: -p TEXT or as words, not both (got {' '.join(words)!r})")
    return None, " ".join(words)


def read_prompt(text: str | None, path: str | None, piped: str | None) -> str | None:
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read prompt file {path}: {getattr(e, 'strerror', None) or e}") from None
        if text.startswith("!") and "/" not in path:
            # A repository may hold a file named like a word (`review`, `TODO`): `bantam review`
            # must not run its command. As a shell runs a script from here only as ./name, a
            # command file runs only when named as a path.
            raise ConfigError(f"{path} starts with '!', a command; bantam runs a command from a file only "
                              f"when you name the file as a path: bantam ./{path}")
    if text is None:
        return piped
    return f"{text}\n\n{piped}" if piped and piped.strip() else text


def read_stdin() -> str | None:
    """Standard input, when it is a pipe or a file (never a terminal, never /dev/null)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    return sys.stdin.buffer.read().decode("utf-8", "replace")


def list_models(cfg) -> int:
    from .providers import make_provider
    provider = make_provider(cfg)
    for name in provider.list_models():
        print(f"{'*' if name == cfg.model else ' '} {name}")
    return 0
