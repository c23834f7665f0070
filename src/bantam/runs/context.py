"""The context: one fresh, compact prompt per inference, built from the state alone.

No chat history grows: the model sees the goal, excerpts of the required inputs, the plan, the
last four observations (1200 characters of a success, up to 3000 of a failure), the last failure
until it is fixed, and one instruction. Token counts are estimated at three characters a token,
deliberately high; a prompt that does not fit is refused by the token gate, never cut.

The parts go from the steadiest to the most changing, so a prefix cache (llama.cpp's, a
provider's) serves most of each prompt from the one before: the system message is the same for
the whole run, then the goal, the inputs and the plan's steps (changed only by a repair plan),
then the sliding window of results; what changes every step (which steps are done, the budget,
the instruction) comes last.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..clip import clip_middle
from .gates import GateContext, allowed_tools, unmet
from .parser import RESERVE_CHARS_PER_TOKEN
from .planning import describe_call
from .prompts import Artifact, messages
from .settings import RunConfig
from .state import Observation, RunState
from .tools import TOOLS, Workspace

OK_EXCERPT, ERROR_EXCERPT, INPUT_EXCERPT = 1200, 3000, 1200
FILE_EXCERPT = 6000   # of a file being rewritten, and of the best attempt
LISTED = 40           # workspace files named in a planning prompt


@dataclass
class Request:
    purpose: str                   # plan, repair, act, final, write
    messages: list[dict]
    kinds: tuple[str, ...] = ()    # the proposal kinds a JSON answer may have
    path: str = ""                 # the file a write answer is for
    tools: list[str] = field(default_factory=list)  # tools an action may use

    @property
    def prompt_tokens(self) -> int:
        return estimate(sum(len(m["content"]) for m in self.messages))


def estimate(chars: int) -> int:
    return chars // RESERVE_CHARS_PER_TOKEN + 1


def excerpt(text: str, limit: int) -> str:
    return clip_middle(text, limit)[0]


def build(state: RunState, config: RunConfig, ws: Workspace, run_path: Path,
          artifact: Artifact | None = None) -> Request:
    """The request for whatever the state needs next (with the prompt artifact's demos, if any)."""
    index = state.current()
    purpose, kinds = what_is_due(state, config, ws)
    path = state.plan[index].arguments.get("path", "") if purpose == "write" and index is not None else ""
    planning = purpose in ("plan", "repair")
    tools = allowed_tools(config, planning) if planning or "tool" in kinds else []
    user = "\n\n".join(part for part in (
        goal_part(state), inputs_part(state), plan_part(state), recent_part(state),
        listing_part(ws) if planning else "", failure_part(state),
        file_part(ws, path, state, run_path, config) if purpose == "write" else "",
        progress_part(state), hint_part(state), budget_part(state, config),
        instruction(purpose, state, index, config, path, kinds)) if part)
    return Request(purpose, messages(system_prompt(config), user, purpose, artifact), kinds, path, tools)


def what_is_due(state: RunState, config: RunConfig, ws: Workspace) -> tuple[str, tuple[str, ...]]:
    """The purpose of the next request and the proposal kinds its answer may have."""
    index = state.current()
    step = state.plan[index] if index is not None else None
    if state.phase in ("plan", "repair"):
        return state.phase, ("plan",)
    if step is not None and step.tool == "write_file":
        return "write", ("content", "tool") if config.runtime.file_output_format == "json" else ()
    if step is not None:
        return "act", ("tool", "final")
    # every step is done: when nothing else is missing either, only the answer can help
    return "final", ("tool", "final") if unmet(GateContext(state, config, ws)) else ("final",)


def system_prompt(config: RunConfig) -> str:
    """The same for every request of the run: each instruction says which answer it wants."""
    lines = ["You work inside a controlled run: you propose, the runtime checks every proposal and "
             "carries it out. Paths are relative to the workspace. Reply with exactly one JSON object "
             "and nothing else, unless you are asked for a file's content in a code fence.", "Tools:"]
    for name in allowed_tools(config, planning=True):
        line = f"- {TOOLS[name].description}"
        if name == "write_file":
            line += f" (only as a plan step). Files you may write: {', '.join(config.tools.write_paths)}"
        if name == "shell":
            line += f". Commands: {', '.join(config.tools.commands)}"
        lines.append(line)
    return "\n".join(lines)


def goal_part(state: RunState) -> str:
    text = f"Goal:\n{state.goal.strip()}"
    if state.require_read:
        text += f"\n\nFiles that must be read in full: {', '.join(state.require_read)}"
    return text


def listing_part(ws: Workspace) -> str:
    root = ws.root
    files = sorted(p for p in root.rglob("*") if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.parts)
    names = [f"{p.relative_to(root).as_posix()}" for p in files[:LISTED]]
    more = f" (and {len(files) - LISTED} more)" if len(files) > LISTED else ""
    return "Workspace files: " + (", ".join(names) + more if names else "(none)")


def plan_part(state: RunState) -> str:
    """The steps as planned; which are done is said near the end (progress_part)."""
    if not state.plan:
        return ""
    return "Plan:\n" + "\n".join(f"{i}. {step.description}: {describe_call(step.tool, step.arguments)}"
                                  for i, step in enumerate(state.plan, 1))


def progress_part(state: RunState) -> str:
    if not state.plan:
        return ""
    done = [str(i) for i, step in enumerate(state.plan, 1) if step.status == "done"]
    failed = [str(i) for i, step in enumerate(state.plan, 1) if step.status == "failed"]
    current = state.current()
    return "Progress: " + "; ".join(part for part in (
        f"steps done: {', '.join(done)}" if done else "no step done yet",
        f"failed: {', '.join(failed)}" if failed else "",
        f"current: step {current + 1}" if current is not None else "every step done") if part) + "."


def inputs_part(state: RunState) -> str:
    """Required inputs stay visible after many repair steps; a recent read of the same text is
    shown as a reference to them, so nothing is in the prompt twice."""
    parts = [f"--- {path} ---\n{text}" for path, text in state.inputs.items()]
    return "Required inputs (excerpts):\n" + "\n".join(parts) if parts else ""


def observation_text(obs: Observation, inputs: dict[str, str] | None = None) -> str:
    status = "ok" if obs.ok else "FAILED" + (f", exit {obs.exit_code}" if obs.exit_code is not None else "")
    if obs.clipped:
        status += ", output clipped"
    body = excerpt(obs.output, OK_EXCERPT if obs.ok else ERROR_EXCERPT)
    if obs.tool == "read_file" and obs.ok and inputs and inputs.get(obs.arguments.get("path", "")) == body:
        body = "(the text shown under Required inputs)"
    return f"{describe_call(obs.tool, obs.arguments)}: {status}\n{body}".rstrip()


def recent_part(state: RunState) -> str:
    if not state.recent:
        return ""
    return "Recent results (oldest first):\n" + "\n".join(
        f"- {observation_text(o, state.inputs)}" for o in state.recent)


def failure_part(state: RunState) -> str:
    failure = state.last_failure
    if failure is None or any(o.call_id == failure.call_id for o in state.recent):
        return ""
    return "The last failure, still to fix:\n" + observation_text(failure)


def file_part(ws: Workspace, path: str, state: RunState, run_path: Path, config: RunConfig) -> str:
    parts = []
    data = ws.text_of(path)
    current = None if data is None else data.decode("utf-8", "replace")
    edit = config.runtime.repair_edit if config.runtime.file_output_format == "fenced" else "file"
    if current is not None and edit == "lines":
        numbered = "\n".join(f"{n:4} {line}" for n, line in enumerate(current.splitlines(), 1))
        parts.append(f"Current content of {path} (numbered lines):\n{excerpt(numbered, FILE_EXCERPT)}")
    elif current is not None:
        parts.append(f"Current content of {path}:\n{excerpt(current, FILE_EXCERPT)}")
    if current is not None and edit != "file":
        form = "lines A-B` (replace lines A to B" if edit == "lines" else "function NAME` (replace that whole function"
        parts.append(f"To change only part of {path}, write a line `{form}) before the code fence and put "
                     "only the new part in the fence.")
    best = state.best
    if config.runtime.keep_best and best and path in best.files and best.passed < best.total:
        text = (run_path / best.files[path]).read_text("utf-8", "replace")
        if text != current:
            parts.append(f"Best tested attempt so far ({best.passed}/{best.total} passed), {path}:\n"
                         f"{excerpt(text, FILE_EXCERPT)}")
    return "\n\n".join(parts)


def hint_part(state: RunState) -> str:
    return f"Your last answer could not be used: {state.hint}" if state.hint else ""


def budget_part(state: RunState, config: RunConfig) -> str:
    c, limits = state.counters, config.limits
    replans = "unlimited" if limits.max_replans == "unlimited" else limits.max_replans - c.replans
    return (f"Budget left: {limits.max_iterations - c.iterations} iterations, "
            f"{limits.max_tool_calls - c.tool_calls} tool calls, {replans} repair plans.")


PLAN_FORM = '{"plan": [{"description": "...", "tool": "TOOL", "arguments": {...}}, ...]}'


def instruction(purpose: str, state: RunState, index: int | None, config: RunConfig, path: str,
                kinds: tuple[str, ...]) -> str:
    step = state.plan[index] if index is not None else None
    writes = (" A write_file step names only the path: you give the content when the step is due."
              if config.tools.write_paths else "")
    if purpose == "plan":
        return (f"Write a short plan that reaches the goal; each step is one tool call. Reply with "
                f"{PLAN_FORM}.{writes}")
    if purpose == "repair":
        return (f"A step failed (see the results above). Write a repair plan for the remaining work, "
                f"in the same form: {PLAN_FORM}.")
    if purpose == "write":
        if config.runtime.file_output_format == "json":
            return f'Write the complete content of {path}. Reply with {{"content": "THE WHOLE FILE"}}.'
        assert step is not None and index is not None  # a write is always a plan step
        return (f"Step {index + 1}: {step.description}. Reply with the complete content of {path} in one "
                "code fence (a line ``` before it and a line ``` after it) and nothing else; no JSON, no "
                "escaping. If the file itself contains ``` lines, use ```` for the outer fence.")
    if purpose == "act":
        assert step is not None and index is not None  # so is an act
        call = json.dumps({"tool": step.tool, "arguments": step.arguments})
        return f"Do step {index + 1}: {step.description}. Reply with the tool call, for example {call}."
    answer = ('Reply with {"final": "YOUR ANSWER"}: the answer to the goal, based on the results above.')
    if "tool" in kinds:
        return (f"All steps are done, but the run is not complete yet. {answer} Or, to do what is "
                "missing, reply with a tool call.")
    return f"All steps are done and everything needed is there. {answer}"
