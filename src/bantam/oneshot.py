"""The one-shot front end: `bantam -p TEXT`, `bantam FILE`, `CMD | bantam`."""
from __future__ import annotations

import sys

from . import loop
from .config import Config
from .errors import LimitReached, ProviderError
from .events import Done, Error
from .prompt import system_prompt
from .providers import context_window_soon, make_provider
from .render import make_renderer
from .tools import ToolContext, make_toolbox
from .tools.shell import run_shell


def run_prompt(cfg: Config, prompt: str, json_lines: bool = False) -> int:
    """Answer one prompt; return the exit code (0 done, 1 the model failed or a budget ran out)."""
    if prompt.startswith("!"):
        return run_command(cfg, prompt[1:].strip())
    provider = make_provider(cfg)
    window = context_window_soon(provider, cfg)
    render = make_renderer(cfg, json_lines, sys.stdout, sys.stderr, window)
    system = system_prompt(cfg)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    toolbox = make_toolbox(cfg.tools, ToolContext(cfg, provider, system, render))
    try:
        turn = loop.run(provider, messages, toolbox, loop.Limits.from_config(cfg), render)
    except (ProviderError, LimitReached) as e:
        render(Error(message=str(e)))
        return 1
    render(Done(text=turn.text, usage=turn.usage))
    return 0


def run_command(cfg: Config, command: str) -> int:
    """`!cmd`: run it through shell_exec's machinery, no model involved; exit with its status."""
    result = run_shell(command, cfg.shell_timeout, cfg.tool_output_limit)
    sys.stdout.write(result.output if result.output.endswith("\n") or not result.output
                     else result.output + "\n")
    sys.stdout.flush()
    sys.stderr.write(f"exit: {result.exit_code}\n")
    return min(result.exit_code, 255)
