"""bantam: a tiny, powerful AI agent. Importing it has no side effects.

The public API. A session is what every bantam front end runs: a configuration and a folder made
into a model, a prompt and tools (the folder's AGENTS.md, sandbox, MCP servers and all), with
what the caller adds to it (a `FrontEnd`: where events go, who approves, ...):

    from bantam import FrontEnd, build_session, load_config
    cfg = load_config({"model": "gpt-4o-mini"}, directory="/path/to/project")
    s = build_session(cfg, "/path/to/project", FrontEnd(on_event=print))
    turn = s.run([*s.messages(), {"role": "user", "content": "hi"}])
    print(turn.text)

Programs that drive the loop themselves have its parts: `run`, `make_provider`, `make_toolbox`,
`ToolContext`, `Limits`, and `Tool` to subclass for a tool of their own.

Names are imported on first use, so `import bantam` stays as cheap as the command line needs.
"""
from __future__ import annotations

__version__ = "0.4.0"

# name -> the module that defines it
_PUBLIC = {
    "run": "loop", "Limits": "loop", "Turn": "loop", "Guard": "loop",
    "Provider": "providers", "Reply": "providers", "make_provider": "providers",
    "Tool": "tools", "ToolContext": "tools", "Toolbox": "tools", "Outcome": "tools", "make_toolbox": "tools",
    "Config": "config", "load_config": "config", "Session": "session", "build_session": "session",
    "FrontEnd": "session",
    "Event": "events", "OnEvent": "events", "Usage": "events", "RequestStarted": "events", "Text": "events",
    "Reasoning": "events", "ToolCall": "events", "ToolResult": "events", "UsageReport": "events",
    "Retry": "events", "Notice": "events", "Error": "events", "Done": "events",
    "BantamError": "errors", "ConfigError": "errors", "ProviderError": "errors", "LimitReached": "errors",
    "ToolError": "errors",
}
_RENAMED = {"load_config": "load", "build_session": "build"}
__all__ = [  # the same names as _PUBLIC, spelled out for readers and linters
    "__version__",
    "run", "Limits", "Turn", "Guard",
    "Provider", "Reply", "make_provider",
    "Tool", "ToolContext", "Toolbox", "Outcome", "make_toolbox",
    "Config", "load_config", "Session", "build_session", "FrontEnd",
    "Event", "OnEvent", "Usage", "RequestStarted", "Text", "Reasoning", "ToolCall", "ToolResult",
    "UsageReport", "Retry", "Notice", "Error", "Done",
    "BantamError", "ConfigError", "ProviderError", "LimitReached", "ToolError",
]

TYPE_CHECKING = False  # type checkers take this as True; `typing` itself is not imported at start-up
if TYPE_CHECKING:
    from .config import Config
    from .config import load as load_config
    from .errors import BantamError, ConfigError, LimitReached, ProviderError, ToolError
    from .events import (Done, Error, Event, Notice, OnEvent, Reasoning, RequestStarted, Retry, Text,
                         ToolCall, ToolResult, Usage, UsageReport)
    from .loop import Guard, Limits, Turn, run
    from .providers import Provider, Reply, make_provider
    from .session import FrontEnd, Session
    from .session import build as build_session
    from .tools import Outcome, Tool, Toolbox, ToolContext, make_toolbox


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bantam' has no attribute {name!r}")
    import importlib  # here, not at the top: `bantam --version` should import nothing it need not
    module = importlib.import_module(f".{_PUBLIC[name]}", __name__)
    value = getattr(module, _RENAMED.get(name, name))
    globals()[name] = value
    return value
