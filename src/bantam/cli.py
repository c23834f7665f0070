"""Command line: parse the arguments, load the configuration, hand off to a front end."""
from __future__ import annotations

import argparse
import os
import stat
import sys

from . import __version__
from .errors import BantamError, ConfigError

USAGE = """\
bantam                         interactive session
bantam FILE                    prompt read from FILE (a prompt starting with ! runs that command)
bantam -p TEXT                 one-shot prompt
CMD | bantam [-p TEXT]         prompt from standard input (added after TEXT when both are given)
bantam --thread ID [-p TEXT]   continue a persistent thread (without a prompt: resume its last request)
bantam models                  list the endpoint's models, the current one marked with *
bantam handler                 queue handler: task on stdin, "$ACTOR_RESULT_TOPIC\nRESULT" on stdout
bantam mcp [list|trust]        serve bantam as an MCP server on stdio; list or trust MCP servers"""
# Modes with options of their own: `bantam WORD ...` hands the rest of the line to MODULE:FUNCTION,
# which parses it (with common_options) and returns the exit code.
SUBCOMMANDS = {
    "run": "bantam.runs.cli:run_main",
    "status": "bantam.runs.cli:status_main",
    "resume": "bantam.runs.cli:resume_main",
    "daemon": "bantam.daemon:main",
    "web": "bantam.web:main",
    "mcp": "bantam.mcp.cli:main",
}


def common_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every mode takes: model, endpoint, provider, --set."""
    p.add_argument("--model", help="model name")
    p.add_argument("--endpoint", help="API base URL")
    p.add_argument("--provider", help="openai, anthropic or local")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any configuration key (repeatable)")
    return p


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bantam", usage=USAGE,
                                description="A tiny, powerful AI agent.")
    p.add_argument("words", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("-p", "--prompt", help="the prompt to answer")
    p.add_argument("--json", action="store_true", help="JSON Lines events on stdout")
    p.add_argument("--thread", metavar="ID", help="keep the conversation in thread ID across runs")
    common_options(p)
    p.add_argument("--version", action="version", version=f"bantam {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS and not os.path.isfile(argv[0]):
        return guarded(lambda: subcommand(argv[0], argv[1:]))
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
    except KeyboardInterrupt:
        print("\nbantam: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bantam ... | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def load_config(args: argparse.Namespace):
    """The configuration, with this command line's options on top."""
    from . import config
    cfg = config.load(flags(args))
    if cfg.warning:
        print(f"bantam: warning: {cfg.warning}", file=sys.stderr)
    return cfg


def flags(args: argparse.Namespace) -> dict[str, str]:
    values = {k: v for k in ("model", "endpoint", "provider") if (v := getattr(args, k)) is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value
    return values


def dispatch(args: argparse.Namespace) -> int:
    cfg = load_config(args)  # bad configuration stops every mode here, before anything runs
    words = args.words
    if words and words[0] == "models" and not os.path.isfile("models"):
        return list_models(cfg)
    if words and words[0] == "handler" and not os.path.isfile("handler"):
        from .oneshot import run_handler
        return run_handler(cfg, read_stdin())
    if len(words) > 1:
        raise ConfigError(f"expected at most one prompt file, got {len(words)} arguments")
    prompt = read_prompt(args.prompt, words[0] if words else None)
    if prompt is not None and not prompt.strip():
        raise ConfigError("the prompt is empty")
    if prompt is None and not args.thread:
        if args.json:
            raise ConfigError("--json needs a prompt: -p TEXT, a FILE, or standard input")
        from .repl import run_repl
        return run_repl(flags(args))
    from .oneshot import run_prompt
    return run_prompt(cfg, prompt, args.json, args.thread)


def read_prompt(text: str | None, path: str | None) -> str | None:
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read prompt file {path}: {getattr(e, 'strerror', None) or e}") from None
    piped = read_stdin()
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
