"""The command line: parse the arguments, load the configuration, hand off to a front end.

cli.main, the entry point, answers `bantam --version` itself and imports this for every other
command line."""
from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import stat
import sys
import threading

from .errors import BantamError, ConfigError, Refused, Terminated
from .options import SUBCOMMANDS, Parser, flags, global_options, load_config, option_table
from .sanitize import terminal_safe

USAGE = r"""
bantam                         interactive session
bantam FILE                    prompt read from FILE (a prompt starting with ! runs that command)
bantam "WORDS"                 the words are the prompt, when they name no file
bantam -p TEXT                 one-shot prompt
CMD | bantam [-p TEXT]         prompt from standard input (added after TEXT when both are given)
bantam --thread ID [-p TEXT]   continue a persistent thread (without a prompt: resume its last request)
bantam -c [-p TEXT]            continue this folder's latest session, yours or an editor's (one-shot with a prompt)
bantam models                  list the endpoint's models, the current one marked with *
bantam handler                 queue handler: task on stdin, "$ACTOR_RESULT_TOPIC\nRESULT" on stdout
bantam run GOAL ...            a controlled run (bantam run --help); bantam status RUN, bantam resume RUN
bantam optimize RUN ... --output FILE   worked examples from finished runs, for bantam run --prompt-artifact
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
               "A queue handler: the task on standard input; $ACTOR_RESULT_TOPIC, a newline\n"
               "and the answer on standard output (the answer alone when the variable is unset).",
}


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="bantam", usage=USAGE, description="A tiny, powerful AI agent.")
    p.add_argument("words", nargs="*", help=argparse.SUPPRESS)
    return global_options(p)


def run(argv: list[str]) -> int:
    """Run `bantam ARGV...`; return the exit code."""
    stop_on_signals()
    before, word, rest = split_command(argv)
    if word is not None and SUBCOMMANDS[word].entry and "--version" not in before:
        return guarded(lambda: subcommand(word, before, rest))
    if word in ("models", "handler") and {"-h", "--help"} & set(argv):
        print(WORD_HELP[word])
        return 0
    args = parser().parse_args(argv)
    return guarded(lambda: dispatch(args))


def split_command(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(the global options before the subcommand's word, with their values; the word; the rest),
    or (argv, None, []) when the first word that is neither an option nor an option's value names
    no subcommand: `bantam --model fast config` is `config`, `bantam -p run` a prompt."""
    options = option_table(parser())
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        i += 2 if _takes_separate_value(arg, options) else 1
    if i < len(argv) and argv[i] in SUBCOMMANDS:
        return argv[:i], argv[i], argv[i + 1:]
    return argv, None, []


def _takes_separate_value(arg: str, options: dict[str, tuple[str, bool]]) -> bool:
    """Whether the option `arg` takes the next argument as its value (as argparse reads it:
    `--model=x` and `-px` hold theirs, an unambiguous prefix `--mod` is `--model`)."""
    if arg.startswith("--"):
        if "=" in arg:
            return False
        found = options.get(arg) or _prefixed(arg, options)
        return bool(found and found[1])
    for n, letter in enumerate(arg[1:], 1):  # a cluster of short options: -cp TEXT
        found = options.get(f"-{letter}")
        if found and found[1]:
            return n == len(arg) - 1
    return False


def _prefixed(arg: str, options: dict[str, tuple[str, bool]]) -> tuple[str, bool] | None:
    matches = {options[name] for name in options if name.startswith(arg) and name.startswith("--")}
    return matches.pop() if len(matches) == 1 else None


def subcommand(word: str, before: list[str], rest: list[str]) -> int:
    """Run `bantam WORD REST`; the global options given before the word go to it when it takes
    them (`bantam --yolo web` is `bantam web --yolo`), else one line says they do not apply."""
    import importlib
    spec = SUBCOMMANDS[word]
    module, _, function = spec.entry.partition(":")
    forwarded = _forwarded(word, before, spec.takes)
    try:
        entry = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as e:
        if not (e.name and module.startswith(e.name)):  # a missing dependency is a real error
            raise
        raise ConfigError(f"'bantam {word}' is not available in this version") from None
    return entry(forwarded + rest)


def _forwarded(word: str, before: list[str], takes: tuple[str, ...]) -> list[str]:
    """The options before the word, under their long names, checked against what WORD takes."""
    options = option_table(parser())
    out: list[str] = []
    i = 0
    while i < len(before):
        arg = before[i]
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
        else:  # -pTEXT holds its value; -cp TEXT is -c -p TEXT
            name, value = arg[:2], arg[2:]
            sep = "=" if value and options.get(name, ("", False))[1] else ""
            if value and not sep:
                before = [*before[:i], name, f"-{value}", *before[i + 1:]]
        found = options.get(name) or (_prefixed(name, options) if name.startswith("--") else None)
        if found is None:
            raise ConfigError(f"{arg} before `{word}`: not an option of bantam (options of "
                              f"`bantam {word}` come after it); see bantam {word} --help")
        long, has_value = found
        if long not in takes and long != "--help":
            raise ConfigError(f"{long} does not apply to `bantam {word}`; see bantam {word} --help")
        out.append(long)
        if has_value:
            out.append(value if sep else before[i + 1])
            i += 0 if sep else 1
        i += 1
    return out


def guarded(run) -> int:
    """Run a front end; bantam's own errors become one line and an exit code, never a traceback.
    An error may quote what a project's file or a server said (a server name in .mcp.json, an
    API's message), so it is written as sanitize.terminal_safe leaves it: no escape sequence."""
    try:
        return run()
    except ConfigError as e:
        print(f"bantam: {terminal_safe(str(e))}", file=sys.stderr)
        return 2
    except BantamError as e:
        print(f"bantam: {terminal_safe(str(e))}", file=sys.stderr)
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
    except OSError as e:  # a read-only folder, a full disk: the user's to fix, said in one line
        if e.errno not in STORAGE_ERRORS:
            raise
        print(f"bantam: {terminal_safe(storage_problem(e))}", file=sys.stderr)
        return 2


STORAGE_ERRORS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM)


def storage_problem(e: OSError) -> str:
    """What failed and where, for a folder bantam cannot write. Every write of state is atomic
    (fsutil), so what was saved before stays whole: a run resumes from it once there is room."""
    verb = "cannot write" if e.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT) else "cannot use"
    where = f" {e.filename}" if e.filename else ""
    return f"{verb}{where}: {e.strerror or e}"


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
    words = args.words
    refuse_near_miss(words, args.prompt)  # before the configuration: a typo costs no request
    if args.thread is not None:
        from .transcripts import given_id
        given_id(args.thread, "--thread")
    cfg = load_config(args)  # bad configuration stops every mode here, before anything runs
    if words[:1] == ["models"]:
        return list_models(cfg)
    if words[:1] == ["handler"] or queue_handler(args):
        if args.json:
            raise ConfigError("--json does not apply to the queue handler (its answer follows the topic line)")
        from .oneshot import run_handler
        return run_handler(cfg, read_stdin(cfg))
    path, text = prompt_words(words, args.prompt)
    piped = read_stdin(cfg)
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


def queue_handler(args: argparse.Namespace) -> bool:
    """An actor mesh runs the binary itself as its handler (`ACTOR_HANDLER=./agent`), with
    ACTOR_RESULT_TOPIC set and the task on stdin. So with the variable set, no prompt given, and
    no person at standard input, bantam is the handler without the `handler` word."""
    return bool(os.environ.get("ACTOR_RESULT_TOPIC") and not args.words and args.prompt is None
                and not args.thread and not args.resume and not _terminal_input())


def _terminal_input() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):
        return False


def refuse_near_miss(words: list[str], text: str | None) -> None:
    """A single word that is almost a subcommand (`confg`, `sesions`, `mpc`) is a typo, not a
    prompt: say which one was meant and send nothing. A real one-word prompt (`hello`), a file,
    or a word that looks like a path (`./review`) goes on."""
    if len(words) != 1 or text is not None:
        return
    word = words[0]
    if word in SUBCOMMANDS or os.path.exists(word) or re.fullmatch(r"\S*(/\S*|\.\w{1,8})", word):
        return
    meant = near_subcommand(word)
    if meant:
        raise ConfigError(f"unknown command {word!r}: did you mean `bantam {meant}`? (a one-word prompt "
                          f"so close to a command is refused: bantam -p {word})")


def near_subcommand(word: str) -> str | None:
    """The subcommand `word` misspells: close by difflib with the same first letter (so that
    `patch` is not `batch`), or one swap of neighbouring letters (`mpc`, `udno`)."""
    import difflib  # here: only a lone word that is no file and no subcommand gets this far
    low = word.lower()
    for name in SUBCOMMANDS:
        if low == name or any(low == name[:i] + name[i + 1] + name[i] + name[i + 2:] for i in range(len(name) - 1)):
            return name
    close = difflib.get_close_matches(low, [n for n in SUBCOMMANDS if n[0] == low[:1]], n=1, cutoff=0.8)
    return close[0] if close else None


def prompt_words(words: list[str], text: str | None) -> tuple[str | None, str | None]:
    """(prompt file, prompt text) from the positional words: a file, or else the words are the
    prompt itself (`bantam "List files in /tmp"`). A word that looks like a file name
    (`notes.md`, `dir/x`) is taken as one, so a mistyped name is an error, not a prompt."""
    files = [w for w in words if os.path.exists(w) or re.fullmatch(r"\S*(/\S*|\.\w{1,8})", w)]
    if not words or (files and len(files) == len(words)):
        if len(words) > 1:
            raise ConfigError(f"expected at most one prompt file, got {len(words)} arguments")
        return (words[0] if words else None), text
    if text is not None:
        raise ConfigError(f"give the prompt once: -p TEXT or as words, not both (got {' '.join(words)!r})")
    return None, " ".join(words)


PROMPT_FILE_LIMIT = 16 << 20  # bytes of a prompt file, as of piped input (oneshot.INPUT_HARD_CAP)


def read_prompt(text: str | None, path: str | None, piped: str | None) -> str | None:
    if path is not None:
        from .fsutil import read_named
        try:
            text = read_named(path, PROMPT_FILE_LIMIT).decode("utf-8")
        except Refused as e:
            raise ConfigError(str(e)) from None
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


def read_stdin(cfg) -> str | None:
    """Standard input, when it is a pipe or a file (never a terminal, never /dev/null): read
    bounded by the context window, refused when binary (oneshot.read_input)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    from .oneshot import read_input
    return read_input(cfg, sys.stdin.buffer)


def list_models(cfg) -> int:
    from .providers import make_provider
    provider = make_provider(cfg)
    for name in provider.list_models():
        print(f"{'*' if name == cfg.model else ' '} {name}")
    return 0
