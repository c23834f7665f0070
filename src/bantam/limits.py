"""What bounds one agent's turn (`Limits`, from the configuration) and what a turn gives back
(`Turn`). Below the tools and the loop: the loop runs under them, and a tool that starts a
sub-agent builds its child's from the same configuration."""
from __future__ import annotations

from dataclasses import dataclass, field

from .config import FIBONACCI_DELAYS, Config
from .events import Usage


@dataclass(frozen=True)
class Limits:
    # the configuration's defaults, one value each (config.py's knobs)
    max_iterations: int = Config.max_al_iterations  # model requests per turn
    tool_budget: int = Config.tool_budget           # tool calls per turn
    retry_delays: tuple[float, ...] = FIBONACCI_DELAYS
    max_tokens_limit: int = Config.max_tokens_limit  # a cut answer is asked again with doubled max_tokens, up to this
    # The max_tokens the user set (`max_tokens=20`): their choice, never raised; an answer cut at
    # it stands, and says so. None: the provider's default, which a cut answer grows.
    # The daemon passes None whatever its config.json says: it doubles its per-request budget itself.
    fixed_max_tokens: int | None = None

    @classmethod
    def from_config(cls, cfg: Config, max_iterations: int | None = None) -> "Limits":
        """The configured limits; every agent's come from here (a sub-agent may take fewer steps)."""
        return cls(max_iterations or cfg.max_al_iterations, cfg.tool_budget, cfg.retry_delays,
                   cfg.max_tokens_limit, user_max_tokens(cfg))


def user_max_tokens(cfg: Config) -> int | None:
    """The output limit the configuration sets for every request (a forwarded key), if any."""
    value = cfg.forward.get("max_tokens", cfg.forward.get("max_completion_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass
class Turn:
    text: str                   # the final answer (or the last text seen, when a limit stopped it)
    usage: Usage = field(default_factory=Usage)
    steps: int = 0              # model requests made
    finish_reason: str = ""      # the last reply's, as the server said it ("stop", "length", "content_filter")
