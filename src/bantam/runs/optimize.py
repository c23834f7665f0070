"""`bantam optimize`: prompt optimisation with DSPy over runs' own successful traces.

    bantam optimize RUN... --output prompt.json [--max-demos N] [--model ...] [--endpoint ...]

The training set is what earlier runs did right: from each completed run, every model request
whose answer the parser read, the gates accepted and whose tool call (if any) succeeded, with
that answer (`traces`). DSPy's BootstrapFewShot then runs the model on those requests, with
worked examples in front, and keeps as demos the answers that pass the same check as the run's
own (`accepted`: the same proposal, read by bantam's parser). The result is a prompt artifact
(prompts.py) with the demos and the scores before and after; `bantam run --prompt-artifact`
uses it, frozen for that run.

This module needs only bantam; the DSPy side (runs/dspy_program.py) is imported when the
optimisation starts, so a bantam without the `dspy` extra says so in one line and runs are
unchanged.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..options import Parser
from .prompts import FORMAT, RUN_COPY

CLIPPED = "[... clipped ...]"  # the store's mark on an artifact cut at its size limit
EXTRA = "bantam optimize needs the dspy extra: pip install -e '.[dspy]' (dspy==3.4.1)"


@dataclass(frozen=True)
class Trace:
    run: str
    purpose: str
    path: str            # the file a write answer is for
    file_format: str     # the run's file_output_format
    system: str
    request: str         # the user message
    answer: str


def traces(run_dirs: list[Path]) -> list[Trace]:
    """The successful requests of the completed runs among `run_dirs`, oldest run first."""
    found: list[Trace] = []
    for run in run_dirs:
        state = json.loads((run / "state.json").read_text("utf-8"))
        if state.get("status") != "completed":
            continue
        file_format = state["config"]["runtime"]["file_output_format"]
        events = [json.loads(line) for line in (run / "events.jsonl").read_text("utf-8").splitlines() if line.strip()]
        for i, event in enumerate(events):
            if event["type"] != "llm_request" or not _succeeded(events[i + 1:]):
                continue
            answer = next((e for e in events[i + 1:] if e["type"] == "llm_answer"), None)
            trace = _trace(run, state["id"], event, answer, file_format)
            if trace is not None:
                found.append(trace)
    return found


def _succeeded(after: list[dict]) -> bool:
    """Up to the next request: nothing refused the answer, and its tool call (if any) worked."""
    answered = False
    for e in after:
        if e["type"] == "llm_request":
            break
        answered = answered or e["type"] == "llm_answer"
        if e["type"] in ("parse_error", "gate_rejected") or (e["type"] == "tool" and not e.get("ok")):
            return False
    return answered


def _trace(run: Path, run_id: str, request: dict, answer: dict | None, file_format: str) -> Trace | None:
    if answer is None or (request["purpose"] == "write" and not request.get("path")):
        return None  # a write traced before runs recorded its path
    prompt = (run / request["prompt"]).read_text("utf-8")
    text = (run / answer["artifact"]).read_text("utf-8")
    head, _, rest = prompt.partition("\n\n[user]\n")
    if not head.startswith("[system]\n") or CLIPPED in prompt or CLIPPED in text:
        return None
    user = rest.rpartition("\n\n[user]\n")[2]  # after any worked examples the run was given
    return Trace(run_id, request["purpose"], request.get("path", ""), file_format,
                 head.removeprefix("[system]\n"), user, text)


def proposal(answer: str, trace: Trace) -> Any:
    """What bantam's parser reads from `answer` as the reply to the trace's request."""
    from .loop import read_answer
    from .state import PendingAnswer
    pending = PendingAnswer(text=answer, purpose=trace.purpose, path=trace.path, finish_reason="stop")
    return read_answer(pending, trace.file_format)[0]


def accepted(trace: Trace, answer: str) -> bool:
    """The metric: `answer` is read as the same proposal as the traced answer (a plan with the
    same calls, the same tool call, a final answer, or a file for the same write)."""
    from .parser import ParseError
    from .schema import Action, Final, Plan, SchemaError
    try:
        got, want = proposal(answer, trace), proposal(trace.answer, trace)
    except (ParseError, SchemaError):
        return False
    if isinstance(want, Plan):
        return isinstance(got, Plan) and [(s.tool, s.arguments) for s in got.plan] == \
            [(s.tool, s.arguments) for s in want.plan]
    if isinstance(want, Action):
        return isinstance(got, Action) and (got.tool, got.arguments) == (want.tool, want.arguments)
    if isinstance(want, Final):
        return isinstance(got, Final)
    return isinstance(got, str) and bool(got.strip())


def optimize_main(argv: list[str]) -> int:
    from ..options import common_options, flags
    p = Parser(prog="bantam optimize", description="Optimise a controlled run's prompts "
                                "with DSPy (BootstrapFewShot) over the successful traces of earlier runs.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids (under --runs-dir) or run directories")
    p.add_argument("--output", required=True, metavar="FILE", help="where to write the prompt artifact (JSON)")
    p.add_argument("--max-demos", type=int, default=2, metavar="N",
                   help="worked examples per kind of request (default 2)")
    p.add_argument("--runs-dir", default="runs", metavar="DIR", help="where runs live (default: ./runs)")
    common_options(p)
    args = p.parse_args(argv)
    if args.max_demos < 1:
        raise ConfigError("--max-demos must be at least 1")
    from .store import RunDir
    dirs = [RunDir.find(ref, Path(args.runs_dir)).path for ref in args.runs]
    found = traces(dirs)
    if not found:
        raise ConfigError("no successful traces: the runs named include no completed run with an accepted answer")
    try:
        from . import dspy_program
    except ImportError as e:
        raise ConfigError(f"{EXTRA} ({e})") from None
    from ..config import load
    result = dspy_program.bootstrap(load(flags(args)), found, args.max_demos)
    artifact = {"format": FORMAT, "strategy": "bootstrap", "demos": result.demos, "instructions": {},
                "made_by": {**result.made_by, "runs": sorted({t.run for t in found}), "traces": len(found)}}
    from ..fsutil import atomic_write
    atomic_write(args.output, (json.dumps(artifact, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    before, after = result.made_by["score_before"], result.made_by["score_after"]
    print(f"{len(found)} traces from {len(dirs)} runs; {len(result.demos)} worked examples chosen; "
          f"answers accepted on the traced requests: {before} without them, {after} with them; "
          f"wrote {args.output} (use it with: bantam run --prompt-artifact {args.output}; "
          f"a run keeps its copy as {RUN_COPY})", file=sys.stderr)
    return 0
