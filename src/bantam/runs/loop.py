"""A controlled run on bantam's one loop: the run's policy as a guard, its model as a provider.

    loop.run(RunProvider(run), [], toolbox, limits(run), on_event, guards=guards(run, limits))

    RunProvider  one step of the run per request: a fully specified plan step (no model call), or
                 prompt -> model -> parser, the typed `Proposal` turned into one tool call: a
                 workspace tool, `plan` (a new plan), `final` (the answer), or `unusable_answer`.
                 Once the run is completed it answers with the final text, and the loop ends.
    guards       the run's policy as the loop's guards, in the order they are consulted:
                 RunGates (before a request: the turn budgets; before a call: the gates),
                 RunBudget (the core's ToolBudget over [limits] max_tool_calls), RunRecord (the
                 intent on disk before the call; after it, the observation, fsynced, and its effects).
    limits       [limits] as the core's Limits (see `limits`).

Every transition is saved before the next one starts: the token reservation before a request,
the answer before it is parsed, the intent before a tool runs, the observation before the state
moves on. That ordering is what makes resume safe; see state.py. A run stops by raising
(Blocked, ProviderError, KeyboardInterrupt, Paused) out of the loop; `drive` records why. The run
prints nothing: the loop's events (tool calls and results) and its own notices go to `on_event`.

Pausing from outside (the terminal's /pause and Ctrl+C, the page's Stop) is one mechanism: the
front end sets the run's `pause` event from any thread, and RunGuard checks it at the two safe
points, before each model request and before each tool call (before a saved answer is acted on,
so it stays pending for resume). The step in progress finishes; nothing after it starts.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from .. import loop as core
from ..errors import BantamError, LimitReached, ProviderError
from ..events import Notice, OnEvent, Usage
from ..providers import DEFAULT_OPTIONS, Provider, RequestOptions
from ..providers import Reply as CoreReply
from ..tools import Outcome, Tool, ToolContext, Toolbox
from . import context, patch
from .context import Request
from .evidence import evidence_note, record_evidence
from .gates import Blocked, Budgets, CallGate, GateContext, Rejected, call_key, check_final, unmet
from .gates import check_tool_budget
from .model import RunModel
from .parser import Answer, ParseError, parse_file, parse_json
from .prompts import Artifact
from .planning import describe_call, direct, matching_step, plan_md, replace_plan, rewrite_plan
from .schema import Action, FileContent, Final, Plan, SchemaError, Step, validate
from .settings import RunConfig
from .state import Call, Inference, Observation, PendingAnswer, PlanStep, RunState
from .store import RunDir
from .tools import TOOLS, Workspace, in_workspace

UNUSABLE = "unusable_answer"  # the call an answer that could not be parsed becomes
# Loop steps that are not iterations of the run: the first step of a resume may act on an answer
# saved before the interruption, and the last one, after `final`, only ends the loop.
UNCOUNTED_STEPS = 2


@dataclass(frozen=True)
class Proposal:
    """What one step of the run proposes, typed. The loop sees it as one tool call (`tool`,
    `arguments`); the guards read its fields, never that call's JSON text."""
    kind: Literal["call", "plan", "final", "unusable"]
    tool: str                            # a workspace tool, plan, final, or unusable_answer
    arguments: dict[str, Any] = field(default_factory=dict)  # kind call: the tool's arguments
    via: Literal["model", "plan"] = "model"  # who proposed it: the model, or a plan step (execute_plan)
    steps: tuple[Step, ...] = ()         # kind plan: the proposed plan
    answer: str = ""                     # kind final: the answer
    gate: str = ""                       # kind unusable: the gate that could not read the answer
    problem: str = ""                    # ... and what was wrong with it
    recovered: str | None = None         # the fallback parser that read the answer, if one did

    def call_arguments(self) -> dict[str, Any]:
        """The arguments of the tool call the loop is handed (what events and the toolbox see)."""
        if self.kind == "plan":
            return {"steps": [s.model_dump() for s in self.steps]}
        if self.kind == "final":
            return {"answer": self.answer}
        if self.kind == "unusable":
            return {"gate": self.gate, "problem": self.problem}
        return self.arguments

    def as_call(self) -> Call:
        return Call(tool=self.tool, arguments=dict(self.arguments))


NO_PROPOSAL = Proposal("unusable", UNUSABLE, gate="parser", problem="no proposal yet")


@dataclass
class Run:
    """Everything one run is made of; runtime.py puts it together."""
    state: RunState
    store: RunDir
    workspace: Workspace
    model: RunModel
    call_gates: list[CallGate]      # for a proposed tool call
    step_gates: list[CallGate]      # for each step of a proposed plan
    on_event: OnEvent
    budgets: Budgets = field(default_factory=Budgets)
    clock: Callable[[], float] = time.time
    proposal: Proposal = NO_PROPOSAL  # what the current step proposes (the loop's one tool call)
    pause: threading.Event = field(default_factory=threading.Event)  # set: pause at the next safe point
    prompt: Artifact | None = None  # the run's frozen prompt artifact (prompts.py), if it has one

    @property
    def config(self) -> RunConfig:
        return self.state.config

    def ctx(self, planning: bool = False) -> GateContext:
        return GateContext(self.state, self.config, self.workspace, planning)

    def emit(self, kind: str, message: str = "", **data: Any) -> None:
        self.store.event(kind, message=message, **data)
        if message:
            self.on_event(Notice(message=message))

    def commit(self) -> None:
        self.store.save(self.state, plan_md(self.state))


class Paused(BantamError):
    """The run's pause event was seen at a safe point."""


PAUSED = "paused on request at a safe point; resume continues from here"


def drive(run: Run, retried_gate: str = "") -> RunState:
    """Run until completed, blocked, failed, paused on request (returned) or interrupted
    (KeyboardInterrupt: paused, re-raised)."""
    try:
        recover(run, rerun=bool(retried_gate))
        if retried_gate == "max_replans" and run.state.status == "running":
            repair(run)
        if run.state.status == "running":
            bounds = limits(run)
            core.run(RunProvider(run), [], toolbox(run), bounds, run.on_event, guards=guards(run, bounds))
    except Blocked as b:
        stop(run, "blocked", b.gate, b.reason)
    except LimitReached as e:  # the loop's own step bound: RunGates blocks first, so not expected
        stop(run, "blocked", "max_iterations", str(e))
    except ProviderError as e:
        stop(run, "failed", "model", str(e) + last_failure(run.state))
    except Paused:
        stop(run, "paused", "pause", PAUSED)
    except KeyboardInterrupt:
        if run.state.pending_call is not None:  # the user stopped it, so resume runs it again
            run.state.pending_call.interrupted = True
        stop(run, "paused", "interrupted", "resume continues from here")
        raise
    return run.state


def limits(run: Run) -> core.Limits:
    """[limits] as the core loop's limits, for what is left of them: a run's counts persist
    across resumes, the loop's start at zero. The tool budget is enforced by the core's guard
    (RunBudget); the step bound is a backstop: RunGates blocks at max_iterations first, with the
    run's own count in the reason."""
    c, lim = run.state.counters, run.config.limits
    return core.Limits(
        max_iterations=max(0, lim.max_iterations - c.iterations) + UNCOUNTED_STEPS,
        tool_budget=max(0, lim.max_tool_calls - c.tool_calls),
        # The model retries inside its own request (model.py: the core's with_retries, with the
        # configuration's delays), under the one token reservation saved for that request; a
        # retry by the loop would reserve and count a second inference.
        retry_delays=(),
        # Each answer's reservation covers max_output_tokens: a cut answer is never asked for
        # again with more (the parser reports it as cut instead).
        max_tokens_limit=run.model.max_tokens)


def guards(run: Run, bounds: core.Limits) -> list[core.Guard]:
    """The run's policy as the loop's guards, in the order the loop consults them; a refusal
    by one skips the rest. The tool budget counts only calls the gates let through, and the
    intent is saved only for a call every guard let through."""
    return [RunGates(run), RunBudget(run, bounds.tool_budget), RunRecord(run)]


def pause_point(run: Run) -> None:
    """A safe point: nothing is in flight, so the run can stop here and resume exactly here."""
    if run.pause.is_set():
        raise Paused


def last_failure(st: RunState) -> str:
    """The run's unfixed failure, named beside a model failure that may only be its consequence
    (scripted answers used up while a check kept failing for its own reason)."""
    failure = st.last_failure
    if failure is None:
        return ""
    lines = [line.strip() for line in failure.output.splitlines() if line.strip()]
    code = f" (exit {failure.exit_code})" if failure.exit_code is not None else ""
    return (f"; the last failure before it: {describe_call(failure.tool, failure.arguments)}{code}"
            + (f": {lines[-1][:200]}" if lines else ""))


def stop(run: Run, status: str, gate: str, reason: str) -> None:
    st = run.state
    st.status, st.gate, st.reason = status, gate, reason  # type: ignore[assignment]
    run.commit()  # saved before it is told: whoever hears it may read the state at once
    run.emit(status, f"run {status}: {gate}: {reason}", gate=gate, reason=reason)


def toolbox(run: Run) -> Toolbox:
    """The workspace tools, and the two that move the run itself: plan and final."""
    return in_workspace(run.workspace, plan=PlanTool(run), final=FinalTool(run))


# --- the model: one request of the loop is one step of the run ----------------------------------------

class RunProvider(Provider):
    """The run's model behind the core Provider protocol: text proposals become tool calls."""

    def __init__(self, run: Run):
        self.run = run
        self.model = run.model.label

    def complete(self, messages: list[dict], tools: list[dict], on_event: OnEvent,
                 options: RequestOptions = DEFAULT_OPTIONS) -> CoreReply:
        """`options` asks for nothing a run uses: the run's [model] settles the output limit and
        the run's workspace is its own."""
        run, st = self.run, self.run.state
        if st.status != "running":  # completed: the answer ends the loop
            return CoreReply({"role": "assistant", "content": st.final})
        if st.pending_answer is not None:  # saved before an interruption: no new request
            run.emit("answer_reused", "an answer saved before the interruption is used (no new request)")
            return self.proposal(st.pending_answer, None)
        index = st.current()
        if st.phase == "act" and index is not None and direct(st.plan[index], run.config):
            step = st.plan[index]
            return self.call(Proposal("call", step.tool, dict(step.arguments), via="plan"))
        request = context.build(st, run.config, run.workspace, run.store.path, run.prompt)
        try:
            answer, usage = infer(run, request)
        except ProviderError as e:  # failed for good; plain, so the loop does not try to repair it
            raise ProviderError(str(e), retryable=False) from e
        return self.proposal(answer, usage)

    def proposal(self, answer: PendingAnswer, usage: Usage | None) -> CoreReply:
        """Parser, then the proposal as one tool call (the guards check it). The state is not
        touched here: the answer stays pending until RunGates acts on it, so an interrupt in
        between (Ctrl+C, the browser's Stop at the tool call event) leaves it for resume, where
        the same saved answer gives the same proposal."""
        return self.call(propose(self.run, answer), usage)

    def call(self, proposal: Proposal, usage: Usage | None = None) -> CoreReply:
        self.run.proposal = proposal
        call_id = f"call-{self.run.state.counters.iterations}"
        arguments = json.dumps(proposal.call_arguments(), ensure_ascii=False)
        return CoreReply({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": proposal.tool, "arguments": arguments}}]},
            usage)

    def list_models(self) -> list[str]:
        return [self.model]

    def context_window(self) -> int | None:
        return self.run.model.window()


def propose(run: Run, answer: PendingAnswer) -> Proposal:
    """The saved answer read as a typed proposal (an unreadable one is a proposal too: the reason
    goes back to the model)."""
    try:
        proposal, recovered = read_answer(answer, run.config.runtime.file_output_format)
        if isinstance(proposal, str) and answer.purpose == "write":
            proposal = partial_repair(run, answer, proposal)
    except (ParseError, SchemaError) as e:
        gate = "schema" if isinstance(e, SchemaError) else "parser"
        return Proposal("unusable", UNUSABLE, gate=gate, problem=str(e))
    if isinstance(proposal, Plan):
        return Proposal("plan", "plan", steps=tuple(proposal.plan), recovered=recovered)
    if isinstance(proposal, Final):
        return Proposal("final", "final", answer=proposal.final, recovered=recovered)
    if isinstance(proposal, Action):
        return Proposal("call", proposal.tool, dict(proposal.arguments), recovered=recovered)
    return Proposal("call", "write_file", {"path": answer.path, "content": proposal}, recovered=recovered)


def infer(run: Run, request: Request) -> tuple[PendingAnswer, Usage]:
    """Reserve the tokens, ask, save the answer. A process killed in between keeps the reservation
    (lost: nobody knows what that request used); a request that failed for good (refused, or no
    answer after the retries) returned no answer and no usage to count, so it gives its
    reservation back and is no lost reservation."""
    reserve(run, request)
    try:
        reply = run.model.answer(request, run.on_event)
    except ProviderError:
        inference = run.state.inference
        run.state.counters.tokens_used -= inference.reserved if inference else 0
        run.state.inference = None
        raise
    answer = record(run, request, reply)
    return answer, Usage(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)


def reserve(run: Run, request: Request) -> None:
    st, c = run.state, run.state.counters
    prompt, output = request.prompt_tokens, run.model.max_tokens
    run.budgets.before_inference(st, run.config, prompt, output, run.model.window())
    st.inference = Inference(reserved=prompt + output, purpose=request.purpose, started=run.clock())
    c.tokens_used += prompt + output
    c.model_calls += 1
    run.commit()
    prompt_file = run.store.artifact(f"prompt-{c.model_calls:04d}.txt", "\n\n".join(
        f"[{m['role']}]\n{m['content']}" for m in request.messages))
    run.emit("llm_request", purpose=request.purpose, path=request.path, prompt=prompt_file,
             prompt_tokens=prompt, reserved=prompt + output)


def record(run: Run, request: Request, reply: Any) -> PendingAnswer:
    """The measured use replaces the reservation; the answer is saved before it is parsed."""
    st, c = run.state, run.state.counters
    reserved = st.inference.reserved if st.inference else 0
    c.tokens_used += reply.prompt_tokens + reply.completion_tokens - reserved
    c.prompt_tokens += reply.prompt_tokens
    c.completion_tokens += reply.completion_tokens
    c.context_tokens = reply.prompt_tokens or c.context_tokens
    st.inference = None
    st.scripted_used = getattr(run.model, "used", st.scripted_used)
    artifact = run.store.artifact(f"answer-{c.model_calls:04d}.txt", reply.text)
    st.pending_answer = PendingAnswer(text=reply.text, purpose=request.purpose, path=request.path,
                                      finish_reason=reply.finish_reason, max_tokens=run.model.max_tokens)
    run.commit()
    run.emit("llm_answer", purpose=request.purpose, artifact=artifact, finish_reason=reply.finish_reason,
             prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)
    return st.pending_answer


def partial_repair(run: Run, answer: PendingAnswer, content: str) -> str:
    """With repair_edit, an answer that names lines or a function replaces only that part of the
    current file; the whole new file is what gets written."""
    runtime = run.config.runtime
    if runtime.repair_edit == "file" or runtime.file_output_format != "fenced":
        return content
    target = patch.header(answer.text)
    if target is None:
        return content
    data = run.workspace.text_of(answer.path)
    try:
        current = None if data is None else data.decode("utf-8")
    except UnicodeDecodeError:
        current = None
    if current is None:
        raise ParseError(f"{answer.path} does not exist yet: give its whole content in one fence")
    return patch.apply(current, target, content, answer.path)


def read_answer(answer: PendingAnswer, file_format: str) -> tuple[Any, str | None]:
    """(a Plan, Action or Final; or a file's text for a write step), and the recovery used."""
    raw = Answer(answer.text, answer.finish_reason, answer.max_tokens)
    if answer.purpose == "write" and file_format == "fenced":
        return parse_file(raw, answer.path), None
    planning = answer.purpose in ("plan", "repair")
    parsed = parse_json(raw, plan_due=planning)
    if answer.purpose != "write":
        return validate(parsed.obj, ("plan",) if planning else ("tool", "final")), parsed.recovered_by
    proposal = validate(parsed.obj, ("content", "tool"))
    if isinstance(proposal, Action):  # a full write_file call for the planned path is fine too
        args = proposal.arguments
        if proposal.tool != "write_file" or args.get("path") != answer.path or not isinstance(args.get("content"), str):
            raise SchemaError(f'expected {{"content": ...}} with the whole of {answer.path}')
        return args["content"], parsed.recovered_by
    assert isinstance(proposal, FileContent)
    return proposal.content, parsed.recovered_by


# --- the policy: gates, budgets and persistence around every call -------------------------------------

class RunGates:
    """Before a request: the turn budgets; before a call: the gates. A gate's refusal goes back
    to the model; a budget that ran out blocks the run."""

    def __init__(self, run: Run):
        self.run = run

    def before_request(self, messages: list[dict]) -> None:
        st = self.run.state
        if st.status != "running":
            return  # completed: only the final answer ends the loop
        pause_point(self.run)
        if st.pending_answer is not None:
            return  # a saved answer: not a new turn
        self.run.budgets.before_turn(st, self.run.config, self.run.clock())
        st.counters.iterations += 1

    def before_call(self, name: str, arguments: str) -> str | None:
        run, proposal = self.run, self.run.proposal
        if run.state.status == "running":
            pause_point(run)  # before taken(): the answer stays pending, resume acts on it
        taken(run)
        try:
            if proposal.kind == "unusable":
                return unusable(run, proposal.gate, proposal.problem)
            if proposal.kind == "plan":
                for i, step in enumerate(proposal.steps, 1):
                    try:
                        check_call(run, Call(tool=step.tool, arguments=step.arguments), planning=True)
                    except Rejected as r:
                        raise Rejected(r.gate, f"plan step {i}: {r.reason}") from None
                return None
            if proposal.kind == "final":
                check_final(run.ctx())
                return None
            check_call(run, proposal.as_call(), planning=False)
            if run.state.current() is None and not unmet(run.ctx()):
                raise Rejected("completion", 'everything the run needs is done; only the final answer may '
                                             'follow: reply with {"final": ...}')
        except Rejected as r:
            return reject(run, r)
        return None

    def after_call(self, name: str, arguments: str, outcome: Outcome) -> None:
        pass


class RunBudget(core.ToolBudget):
    """[limits] max_tool_calls, enforced by the core's tool budget over the tool calls the gates
    let through (a plan or a final answer is not a tool call). `budget` is what is left of the
    run's count, which persists across resumes. Spent, the run blocks, resumable with a larger
    limit, rather than refusing the call: the run cannot go on without its tools."""

    def __init__(self, run: Run, budget: int):
        super().__init__(budget)
        self.run = run

    def before_call(self, name: str, arguments: str) -> str | None:
        if self.run.proposal.kind != "call" or super().before_call(name, arguments) is None:
            return None
        check_tool_budget(self.run.state, self.run.config)  # raises Blocked with the run's count
        raise Blocked("max_tool_calls", f"the tool budget of this resume ({self.budget}) is used")


class RunRecord:
    """The intent on disk before the call every other guard let through; after the call, the
    observation and its effects."""

    def __init__(self, run: Run):
        self.run = run
        self.files_before = ""

    def before_request(self, messages: list[dict]) -> None:
        pass

    def before_call(self, name: str, arguments: str) -> str | None:
        run = self.run
        if run.proposal.kind == "call":
            intend(run, run.proposal.as_call())
            self.files_before = run.workspace.files_hash(run.config.tools.write_paths)
        return None

    def after_call(self, name: str, arguments: str, outcome: Outcome) -> None:
        call = self.run.state.pending_call
        if self.run.proposal.kind == "call" and call is not None:
            observe(self.run, call, outcome, self.files_before)


def taken(run: Run) -> None:
    """The pending answer is acted on now: from here on its effects are in the state."""
    st = run.state
    if st.pending_answer is None:
        return  # a plan step run without asking the model
    st.pending_answer, st.hint = None, ""
    recovered = run.proposal.recovered
    if run.proposal.kind != "unusable":
        st.counters.parse_retries = 0
    if recovered:
        st.counters.parser_recoveries += 1
        form = {"json_fence": "a JSON code fence", "plan_call": "a tool call named plan"}[recovered]
        run.emit("parse_recovered", f"parser: read the answer from {form}", form=recovered)


def check_call(run: Run, call: Call, planning: bool) -> None:
    ctx = run.ctx(planning)
    for gate in run.step_gates if planning else run.call_gates:
        gate.check(call, ctx)


def unusable(run: Run, gate: str, problem: str) -> str:
    c = run.state.counters
    c.parse_failures += 1
    c.parse_retries += 1
    c.consecutive_failures += 1
    run.state.hint = problem
    run.emit("parse_error", f"{gate}: {problem}", gate=gate)
    run.commit()
    return f"{gate}: {problem}"


def reject(run: Run, rejection: Rejected) -> str:
    c = run.state.counters
    c.gate_rejections += 1
    c.consecutive_failures += 1
    run.state.hint = f"the {rejection.gate} gate refused it: {rejection.reason}"
    run.emit("gate_rejected", f"gate {rejection.gate}: {rejection.reason}", gate=rejection.gate)
    run.commit()
    return run.state.hint


class PlanTool(Tool):
    """`plan`: the run's plan replaced by the proposed steps (the gates passed each one)."""
    name, description = "plan", "the plan: a list of steps, each one tool call"
    parameters = {"type": "object", "required": ["steps"], "properties": {"steps": {"type": "array"}}}

    def __init__(self, owner: Run):
        self.owner = owner

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        run, steps = self.owner, [PlanStep(**s) for s in args["steps"]]
        kind = "repair plan" if run.state.phase == "repair" else "plan"
        replace_plan(run.state, steps)
        run.emit("plan", f"{kind}: " + "; ".join(describe_call(s.tool, s.arguments) for s in steps),
                 steps=[s.model_dump() for s in steps])
        run.commit()
        return f"{kind} accepted: {len(steps)} steps"


class FinalTool(Tool):
    """`final`: the run completes with this answer (the completion gate passed)."""
    name, description = "final", "the final answer to the goal"
    parameters = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}

    def __init__(self, owner: Run):
        self.owner = owner

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        run, st = self.owner, self.owner.state
        st.final, st.status, st.gate, st.reason = args["answer"], "completed", "", ""
        run.commit()
        run.emit("completed", "run completed: every step done, reads and checks proven")
        return "run completed"


# --- tools ------------------------------------------------------------------------------------------

def intend(run: Run, call: Call) -> None:
    """The intent on disk before anything runs (the tool budget was checked: RunBudget)."""
    st = run.state
    call.key = call_key(call, run.ctx())
    call.step = matching_step(st, call.tool, call.arguments)
    call.call_id, call.started = st.new_call_id(), run.clock()
    st.pending_call = call
    st.counters.tool_calls += 1
    run.commit()
    run.store.event("intent", call_id=call.call_id, call=describe_call(call.tool, call.arguments), via=run.proposal.via)


def run_call(run: Run, call: Call) -> None:
    """A call outside the loop (a read repeated on resume): run it, then observe it."""
    files_before = run.workspace.files_hash(run.config.tools.write_paths)
    outcome = in_workspace(run.workspace).execute(call.tool, json.dumps(call.arguments))
    observe(run, call, outcome, files_before)


def observe(run: Run, call: Call, result: Outcome, files_before: str) -> None:
    args = {k: v for k, v in call.arguments.items() if k != "content"}
    obs = Observation(call_id=call.call_id, tool=call.tool, arguments=args, ok=not result.is_error,
                      output=result.content, clipped=result.clipped, exit_code=result.exit_code,
                      step=call.step, facts={**result.facts, "files_hash": files_before})
    run.store.artifact(f"result-{call.call_id}.json", obs.model_dump_json(indent=1))
    run.store.observe(obs)  # fsynced: from here on the call counts as done
    apply(run, obs, call)
    run.commit()


def apply(run: Run, obs: Observation, call: Call) -> None:
    """An observation's effects on the state: evidence, counters, the step, repair."""
    st, c = run.state, run.state.counters
    st.pending_call = None
    st.remember(obs)
    st.repeats = st.repeats + 1 if call.key == st.last_call else 1
    st.last_call = call.key
    step = st.plan[obs.step] if obs.step is not None and obs.step < len(st.plan) else None
    complete = obs.ok and not obs.clipped
    record_evidence(run, obs)
    if not obs.ok:
        c.tool_failures += 1
        c.consecutive_failures += 1
        st.last_failure = obs
    elif complete or step is None:
        c.consecutive_failures = 0
        if st.last_failure and (st.last_failure.tool, st.last_failure.arguments) == (obs.tool, obs.arguments):
            st.last_failure = None
    status = "ok" if complete else "FAILED" if not obs.ok else "ok, output clipped"
    code = f" (exit {obs.exit_code})" if obs.exit_code is not None else ""
    line = f"{describe_call(obs.tool, obs.arguments)}: {status}{code}"
    run.store.event("tool", message=line, call_id=obs.call_id, ok=obs.ok, clipped=obs.clipped, step=obs.step)
    if not complete:  # a plain success is already on screen as the loop's tool result
        run.on_event(Notice(message=line))
    if step is None:
        if not obs.ok and st.current() is None and unmet(run.ctx()):
            # Off the plan, with every step done and the run not complete: files are written only
            # as plan steps, so without a new plan the run could do nothing but spend its budget.
            repair(run)
        return
    if complete:
        step.status, step.note = "done", evidence_note(obs)
        return
    step.status = "failed"
    step.note = f"failed{code}" if not obs.ok else "output clipped: a step needs the complete result"
    if obs.ok:
        c.consecutive_failures += 1
    repair(run)


def repair(run: Run) -> None:
    """After a failed step: a repair plan, the model's or the runtime's, within max_replans."""
    st = run.state
    run.budgets.before_replan(st, run.config)
    st.counters.replans += 1
    if run.config.runtime.repair_strategy == "rewrite":
        replace_plan(st, rewrite_plan(run.config))
        run.emit("plan", f"repair plan {st.counters.replans} (rewrite): " + "; ".join(
            describe_call(s.tool, s.arguments) for s in st.plan if s.status != "done"))
    else:
        st.phase = "repair"
        run.emit("replan", f"asking the model for repair plan {st.counters.replans}")


# --- resume -----------------------------------------------------------------------------------------

def recover(run: Run, rerun: bool) -> None:
    """Finish what a killed or interrupted process left in flight (see state.py)."""
    st = run.state
    if st.inference is not None:
        st.counters.lost_reservations += st.inference.reserved
        run.emit("inference_lost", f"an interrupted {st.inference.purpose} request is asked again; its "
                 f"reservation of {st.inference.reserved} tokens stays counted")
        st.inference = None
        run.commit()
    if st.pending_call is not None:
        recover_call(run, st.pending_call, rerun)
    # a saved answer (pending_answer) is taken up by RunProvider on the loop's first request


def recover_call(run: Run, call: Call, rerun: bool) -> None:
    shown = describe_call(call.tool, call.arguments)
    obs = run.store.observation(call.call_id)
    if obs is not None:
        run.emit("observation_reused", f"{shown}: its saved result is taken over (not run again)")
        apply(run, obs, call)
        return run.commit()
    mutates = TOOLS[call.tool].mutates
    if mutates and not rerun and not call.interrupted:  # killed: nobody knows how far it got
        raise Blocked("interrupted", f"{shown} was interrupted before its result was saved; it may "
                                     "have run. Check the workspace, then resume with --retry-blocked "
                                     "to run it again")
    why = "it only reads" if not mutates else "stopped by the user" if call.interrupted else "--retry-blocked"
    run.emit("call_repeated", f"{shown}: interrupted without a result; run again ({why})")
    if mutates:
        run.state.counters.tool_calls += 1
        run.commit()
    run_call(run, call)
