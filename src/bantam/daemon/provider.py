"""The agent's model client: bantam's provider, or <agent>/providers/<name>.py when config.json
says `"provider": "<name>"` and the agent has that file (copied from opt/providers/ at first boot;
`"provider": "anthropic"` brings opt/providers/anthropic.py with it). Such a file defines
`make_provider(cfg) -> Provider`."""
from __future__ import annotations

from ..config import Config
from ..errors import ConfigError
from ..providers import Provider, make_provider
from .layout import AgentDir, load_module
from .settings import Settings


def load_provider(agent: AgentDir, s: Settings, cfg: Config) -> Provider:
    path = agent / "providers" / f"{s.provider}.py"
    if not s.provider or not path.is_file():
        return make_provider(cfg)
    try:
        return load_module(path, "bantam_agent_providers").make_provider(cfg)
    except Exception as e:  # the agent's own file: say which and why, in one line
        raise ConfigError(f"{path}: cannot make a provider: {type(e).__name__}: {e}") from None
