"""What every command line shares: the common options and the configuration they produce.

`bantam` (cli.py) and each subcommand with options of its own (`bantam run`, `daemon`, `web`,
`batch`, `worker`, `mcp`, `config`, ...) parse their arguments with `common_options` and turn
them into a configuration with `load_config`. This module sits below all of them (the layers in
docs/architecture.md): a subcommand never imports the command line that dispatches to it.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import Config


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
    """The configuration, with this command line's options on top; its warnings go to stderr."""
    from . import config  # here: `bantam --version` and `--help` load no configuration code
    cfg = config.load(flags(args))
    for line in cfg.warning.splitlines():
        print(f"bantam: warning: {line}", file=sys.stderr)
    return cfg


def flags(args: argparse.Namespace) -> dict[str, str]:
    """The configuration keys the command line sets: --model, --endpoint, --provider, --yolo
    and each --set KEY=VALUE, later ones winning."""
    values = {k: v for k in ("model", "endpoint", "provider") if (v := getattr(args, k)) is not None}
    if getattr(args, "yolo", False):  # the seeds' way; a --set after it still wins
        values.update(sandbox="off", approval="never")
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value
    return values
