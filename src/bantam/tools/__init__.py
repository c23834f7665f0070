"""Tools: a registry of names, one place that runs them, and the argument checks they share.

A tool has a name, a description, a JSON schema for its parameters and `run(args, ctx)`, which
returns the text the model sees, or an `Outcome` when it has more to say (a clipped output, an
exit code, facts a controlled run keeps as evidence). It raises ToolError for anything the model
should hear about; `Toolbox.execute` turns every failure into a result the model can read, and
sanitises arguments and results.
"""
from __future__ import annotations

import importlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..approval import Approvals
from ..envpolicy import redact
from ..errors import ConfigError, ToolError
from ..events import OnEvent, Usage, ignore, labelled, quiet
from ..sanitize import loads, sanitize
from ..toolnames import ALIASES, DELEGATING, REGISTRY  # the names live below the config

if TYPE_CHECKING:
    import subprocess

    from ..config import Config
    from ..limits import Turn
    from ..providers import Provider
    from ..sandbox import Sandbox
    from ..transcripts import DurableAgents
    from .files import Buffers
    from .workspace import Workspace

_usage_lock = threading.Lock()


class Tool(Protocol):
    """What a tool is. Every tool subclasses it, so what it leaves out takes the default here and
    the core asks every tool the same questions, never probing for attributes."""
    name: str
    description: str
    parameters: dict[str, Any]
    # Several calls of it in one assistant message may run at the same time (sub-agents, MCP
    # requests); the rest run one after another, in order.
    parallel: bool = False
    # Arguments kept byte for byte (file content is data); every other string is sanitised.
    raw_arguments: tuple[str, ...] = ()

    def run(self, args: dict[str, Any], ctx: "ToolContext") -> "str | Outcome": ...

    def parameters_for(self, ctx: "ToolContext") -> dict[str, Any]:
        """The schema as offered in this context: a tool may leave out what cannot apply here."""
        return self.parameters

    def saved_first(self, arguments: str, ctx: "ToolContext") -> bool:
        """Whether the step that makes this call must be saved before it runs (a call that starts
        something a restart must find, such as a durable sub-agent)."""
        return False


@dataclass(frozen=True)
class ToolFront:
    """What one front end adds to its tools' calls (session.FrontEnd carries it); a plain session
    leaves each at its default. Children's calls get the same, less `durable`."""
    # A thread's durable sub-agents (oneshot --thread): their work survives a killed run.
    durable: "DurableAgents | None" = None
    # An editor's buffers (bantam acp, when the client offers fs/*): the model's file tools read
    # and write through it once the path is checked (tools/files.py). None: the disk.
    buffers: "Buffers | None" = None
    # Given each piece of a command's output as it is read, before the command ends (bantam acp
    # shows it in the editor while it runs); the result the model sees is unchanged.
    on_output: "Callable[[bytes], Any] | None" = None
    # A controlled run's: file and shell tools are confined to it (tools/workspace.py).
    workspace: "Workspace | None" = None
    # The daemon's. Paths no model write or edit may land in, whatever the sandbox mode or a
    # person allowed (its own config.json, tools/, providers/); added to every write's Boundary.
    guarded: tuple[Path, ...] = ()
    # Files no model read may return, whatever the sandbox mode (every config.json, which holds
    # its keys and which its commands see empty); the read tools refuse them.
    secret: tuple[Path, ...] = ()
    # Narrows the sandbox of every command the model runs (its own files read-only).
    fence: "Callable[[Sandbox], Sandbox] | None" = None
    # Told each process a tool starts, as soon as it exists (its pid noted for bg_run).
    on_process: "Callable[[subprocess.Popen], Any] | None" = None
    # What is added to every toolbox made in this context, the children's too: the MCP servers'
    # tools (the session builder sets it; bantam acp adds the editor's servers). The registry
    # itself knows only the core tools.
    extend: "Callable[[Toolbox], Toolbox] | None" = None


@dataclass
class ToolContext:
    """What a tool may use besides its arguments: what every call needs, and the front end's part."""
    cfg: "Config"
    provider: "Provider | None" = None
    system_prompt: str = ""
    on_event: OnEvent = ignore
    depth: int = 0  # 0 for the agent the user talks to, 1 for its children
    cancel: threading.Event = field(default_factory=threading.Event)  # set: stop at the next step
    spawn_numbers: Any = field(default_factory=itertools.count)  # sub-agents started this run
    children_usage: Usage = field(default_factory=Usage)  # tokens this run's sub-agents spent
    approvals: Approvals = field(default_factory=Approvals)  # who is asked; by default no one
    # The session's folder: shell commands start there, relative paths are read and written from
    # there, the sandbox's roots are placed from there. Every bantam front end sets it (session.py);
    # None only for a library caller that builds a context by hand, whose paths stay as given.
    folder: Path | None = None
    # The loop these tools run in, for a sub-agent's turn: the loop sits above the tools, so it
    # hands itself down (loop.run sets it) instead of being imported from here.
    run_loop: "Callable[..., Turn] | None" = None
    # The session's /tmp (sandbox.session_tmp): the host folder its sandboxed commands share as
    # /tmp, sub-agents' too. None: each command gets an empty one.
    tmp: Path | None = None
    front: ToolFront = ToolFront()  # what this session's front end adds

    def child(self, on_event: OnEvent, label: str = "sub-agent") -> "ToolContext":
        """A sub-agent's context: its events are labelled and quiet (its answer is the result)."""
        return replace(self, depth=self.depth + 1, on_event=labelled(quiet(on_event), label),
                       front=replace(self.front, durable=None), children_usage=Usage())

    def at(self, path: str | Path) -> Path:
        """`path` as the model gave it (~ expanded), placed in the session's folder when relative,
        where the model's commands find it: below /tmp, in the session's /tmp (Sandbox.on_host)."""
        given = Path(path).expanduser()
        placed = self.folder / given if self.folder is not None and not given.is_absolute() else given
        if self.tmp is None:
            return placed
        from ..sandbox import Sandbox
        return Sandbox.for_config(self.cfg, self.folder, self.tmp).on_host(placed, self.folder)

    def add_child_usage(self, usage: Usage) -> None:
        with _usage_lock:  # sub-agents finish side by side
            self.children_usage.add(usage, latest=False)


@dataclass(slots=True)
class Outcome:
    """What a tool call produced: the one result type of every tool."""
    content: str                        # what the model sees
    is_error: bool = False
    error: BaseException | None = None  # kept, not flattened into a string
    clipped: bool = False               # content was cut: not a complete result
    exit_code: int | None = None        # for tools that run a process
    facts: dict[str, Any] = field(default_factory=dict)  # sha256, bytes, full_read, report ...


@dataclass
class Toolbox:
    tools: dict[str, Tool]
    ctx: ToolContext
    used: int = field(default=0)  # tool calls made through this toolbox

    def start_run(self) -> None:
        """Per-run counters start again. A cancel flag left set by an interrupted run is replaced
        (its children keep the old one); an unset one stays shared with the parent."""
        self.used = 0
        self.ctx.children_usage = Usage()
        if self.ctx.cancel.is_set():
            self.ctx.cancel = threading.Event()
        self.ctx.spawn_numbers = itertools.count()

    def parallel(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and tool.parallel

    def schemas(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.parameters_for(self.ctx)}}
                for t in self.tools.values()]

    def execute(self, name: str, arguments: str) -> Outcome:
        """Run one call; the result is sanitised and every known secret in it is ***, so the model,
        the thread and every renderer see the same clean text."""
        outcome = self._execute(name, arguments)
        outcome.content = redact(outcome.content)
        return outcome

    def _execute(self, name: str, arguments: str) -> Outcome:
        self.used += 1
        tool = self.tools.get(name) or self.tools.get(ALIASES.get(name, ""))
        if tool is None:
            return Outcome(f"error: unknown tool {name!r}; available: {', '.join(self.tools)}", True)
        try:
            args = clean_arguments(arguments, tool.raw_arguments)
            check_args(tool.parameters, args)
            result = tool.run(args, self.ctx)
            if isinstance(result, Outcome):
                return replace(result, content=sanitize(result.content))
            return Outcome(sanitize(result))
        except ToolError as e:
            return Outcome(sanitize(f"error: {e}"), True, e)
        except Exception as e:  # a tool bug must not kill the session; the model sees what broke
            return Outcome(sanitize(f"error: {type(e).__name__}: {e}"), True, e)


@dataclass(frozen=True)
class Offered(Tool):
    """A core tool offered under another name, description and parameters (a subset of its own
    arguments): how the daemon and controlled runs offer the core tools. It runs as the core tool
    does, in the context it is given: what the offer confines it to (the daemon's home and
    boundary, a run's workspace) is that context's front end part, which the core tool applies."""
    name: str
    core: str                           # the core tool it is (REGISTRY)
    description: str
    parameters: dict[str, Any]
    mutates: bool = False               # a call may change files
    # the core tool's data arguments that this offer passes on, kept byte for byte as it keeps
    # them: taken from the core tool, never restated (a restated list fell out of step once)
    raw_arguments: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        raw = tuple(a for a in core_tool(self.core).raw_arguments if a in self.parameters["properties"])
        object.__setattr__(self, "raw_arguments", raw)  # frozen: set once, here

    def run(self, args: dict[str, Any], ctx: ToolContext) -> "str | Outcome":
        return core_tool(self.core).run(args, ctx)


def make_toolbox(names: tuple[str, ...] | list[str], ctx: ToolContext) -> Toolbox:
    tools: dict[str, Tool] = {}
    for name in names:
        if ctx.depth > 0 and name in DELEGATING:
            continue
        if name not in REGISTRY:
            raise ConfigError(f"tools: unknown tool {name!r} (known: {', '.join(REGISTRY)})")
        tools[name] = core_tool(name)
    box = Toolbox(tools, ctx)
    return ctx.front.extend(box) if ctx.front.extend is not None else box


def core_tool(name: str) -> Tool:
    """A new instance of a registered tool; its module is imported now."""
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


def clean_arguments(text: str, raw: tuple[str, ...]) -> dict[str, Any]:
    """The call's arguments, sanitised, except those named in `raw` (file content: data, kept
    byte for byte, CRLF, zero-width joiners and all)."""
    if not raw:
        return sanitize_value(parse_arguments(sanitize(text)))
    try:
        parsed = parse_arguments(text)
    except ToolError:  # a stray control character in the JSON text: the old way
        parsed = parse_arguments(sanitize(text))
    return {sanitize(k): v if k in raw and isinstance(v, str) else sanitize_value(v)
            for k, v in parsed.items()}


def parse_arguments(text: str) -> dict[str, Any]:
    try:
        args = loads(text or "{}")  # nested too deep: TooDeep, a ValueError
    except ValueError as e:
        raise ToolError(f"arguments are not valid JSON ({e}); send a JSON object") from None
    if not isinstance(args, dict):
        raise ToolError(f"arguments must be a JSON object, got {type(args).__name__}")
    return args


def sanitize_value(value: Any) -> Any:
    """Sanitise every string in parsed arguments: a JSON escape like \\u200b survives the raw-text pass."""
    if isinstance(value, str):
        return sanitize(value)
    if isinstance(value, dict):
        return {sanitize(k): sanitize_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize_value(v) for v in value]
    return value


_TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
          "array": list, "object": dict}


def check_args(schema: dict[str, Any], args: dict[str, Any]) -> None:
    """Required keys present, types as declared; "12" is accepted where an integer is due."""
    for key in schema.get("required", []):
        if key not in args or args[key] is None:
            raise ToolError(f"missing required argument {key!r}")
    for key, spec in schema.get("properties", {}).items():
        value = args.get(key)
        if value is None:
            continue
        kind = spec.get("type")
        if kind == "integer" and isinstance(value, str):
            try:
                args[key] = value = int(value)
            except ValueError:  # "--5", "²", "abc": reported as the wrong type below
                pass
        wanted = _TYPES.get(kind) if isinstance(kind, str) else None  # MCP schemas may list types
        if wanted and (not isinstance(value, wanted) or (kind != "boolean" and isinstance(value, bool))):
            raise ToolError(f"argument {key!r} must be {kind}, got {type(value).__name__}")
