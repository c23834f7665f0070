"""What every command line shares: the common options and the configuration they produce.

`bantam` (commandline.py) and each subcommand with options of its own (`bantam run`, `daemon`, `web`,
`batch`, `worker`, `mcp`, `config`, ...) parse their arguments with `common_options` and turn
them into a configuration with `load_config`. This module sits below all of them (the layers in
docs/architecture.md): a subcommand never imports the command line that dispatches to it.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import Config


COMMON = ("--model", "--endpoint", "--provider", "--set", "--yolo")  # what common_options adds


@dataclass(frozen=True)
class Subcommand:
    """A word of `bantam WORD ...`. `entry` names MODULE:FUNCTION, which parses the rest of the
    line and returns the exit code ("" for the modes bantam's own parser runs: models, handler);
    `takes` are the global flags its parser accepts too, so that `bantam --yolo web` is `bantam
    web --yolo`; `actions` are the words it takes first (for shell completion)."""
    entry: str
    takes: tuple[str, ...] = COMMON
    actions: tuple[str, ...] = ()


# The one table of subcommands: the command line dispatches by it, the completion scripts are
# made from it, a near-miss of one of its words is refused (tests/test_cli_words.py checks each
# entry's `takes` and `actions` against the subcommand's own --help). By name, so that no layer
# below the command line imports the front ends it names.
SUBCOMMANDS: dict[str, Subcommand] = {
    "models": Subcommand(""),
    "handler": Subcommand(""),
    "run": Subcommand("bantam.runs.cli:run_main", COMMON + ("--json",)),
    "status": Subcommand("bantam.runs.cli:status_main", ("--json",)),
    "resume": Subcommand("bantam.runs.cli:resume_main", COMMON + ("--json",)),
    "optimize": Subcommand("bantam.runs.optimize:optimize_main"),
    "daemon": Subcommand("bantam.daemon:main"),
    "web": Subcommand("bantam.web:main"),
    "config": Subcommand("bantam.commands:config_main"),
    "sessions": Subcommand("bantam.commands:sessions_main", (), ("list", "show", "export", "delete")),
    "completion": Subcommand("bantam.commands:completion_main", (), ("bash", "zsh", "fish")),
    "mcp": Subcommand("bantam.mcpserve.cli:main", COMMON, ("serve", "list", "trust")),
    "acp": Subcommand("bantam.acp:main"),
    "trust": Subcommand("bantam.commands:trust_main", (), ("list", "revoke")),
    "undo": Subcommand("bantam.undo.cli:main", ("--thread",)),
    "batch": Subcommand("bantam.batch:main", COMMON + ("--json",)),
    "worker": Subcommand("bantam.batch.redisq:worker_main"),
}


class Parser(argparse.ArgumentParser):
    """An argument parser whose every mistake is one line: the error and where the help is
    (argparse's own prints the whole usage first, 19 lines for `bantam` itself)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}{self.near_option(message)}; see {self.prog} --help\n")

    def near_option(self, message: str) -> str:
        """` (did you mean --model?)` for a mistyped option (`--modle`), as subcommands and keys
        have; "" when nothing is close."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        import difflib  # here: only a mistake needs it, and it is not cheap to import
        names = [name for action in self._actions for name in action.option_strings if name.startswith("--")]
        for word in message.split(": ", 1)[1].split():
            if word.startswith("--"):
                close = difflib.get_close_matches(word.partition("=")[0], names, n=1, cutoff=0.6)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def global_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`bantam`'s own options: the prompt, its output, its conversation, and the common ones."""
    p.add_argument("-p", "--prompt", help="the prompt to answer")
    p.add_argument("--json", action="store_true", help="JSON Lines events on stdout")
    p.add_argument("--thread", metavar="ID", help="keep the conversation in thread ID across runs")
    p.add_argument("-c", "--continue", dest="resume", action="store_true",
                   help="continue this folder's latest saved session (the project's or an editor's)")
    common_options(p)
    from . import __version__
    p.add_argument("--version", action="version", version=f"bantam {__version__}")
    return p


def option_table(p: argparse.ArgumentParser) -> dict[str, tuple[str, bool]]:
    """Each option string of `p` -> (its long name, whether it takes a value)."""
    table = {}
    for action in p._actions:  # argparse offers no public list of its options
        for name in action.option_strings:
            table[name] = (max(action.option_strings, key=len), action.nargs != 0)
    return table


def common_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every mode takes: model, endpoint, provider, --set, --yolo."""
    p.add_argument("--model", help="model name")
    p.add_argument("--endpoint", help="API base URL")
    p.add_argument("--provider", help="openai, anthropic or local")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any configuration key (repeatable)")
    p.add_argument("--yolo", action="store_true",
                   help="no sandbox and no approvals: the model's commands run with your full rights")
    return p


def load_config(args: argparse.Namespace) -> "Config":
    """The configuration, with this command line's options on top; its warnings go to stderr.
    A warning quotes what a project's file says (a value it may not set), so every character
    that is not printable is shown as its escape (sanitize.visible), never sent to the terminal."""
    from . import config  # here: `bantam --version` and `--help` load no configuration code
    from .sanitize import visible
    cfg = config.load(flags(args))
    for line in cfg.warning.split("\n") if cfg.warning else ():  # bantam's own lines; a value's \r stays one
        print(f"bantam: warning: {visible(line)}", file=sys.stderr)
    return cfg


def flags(args: argparse.Namespace) -> dict[str, str]:
    """The configuration keys the command line sets: --model, --endpoint, --provider, --yolo
    and each --set KEY=VALUE, later ones winning."""
    values = {k: v for k in ("model", "endpoint", "provider") if (v := getattr(args, k)) is not None}
    if getattr(args, "yolo", False):  # everything runs, unasked; a --set after it still wins
        values.update(sandbox="off", approval="never")
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value
    return values
