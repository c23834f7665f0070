"""Controlled runs as clients of bantam's core loop: the run's [limits] are the loop's limits and
guards (the tool budget is the core's ToolBudget), and a step's proposal is a typed value that a
resume rebuilds exactly from the saved answer. Real run directories, real files, scripted answers."""
import json

import pytest

from bantam import loop as core
from bantam.events import ToolCall
from bantam.runs import runtime
from bantam.runs.loop import Proposal, guards, limits, propose
from bantam.runs.store import RunDir
from tests.runs.test_runs import FINAL, PLAN_READ, READ_A, bantam, config, only_run, records, script, state_of
from tests.runs.test_runs import workspace

FILES = {"a.txt": "alpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"}
PLAN_THREE = json.dumps({"plan": [{"description": f"Read {name}", "tool": "read_file", "arguments": {"path": name}}
                                  for name in FILES]})


def read(name: str) -> str:
    return READ_A.replace("a.txt", name)


def test_a_run_that_keeps_calling_tools_stops_at_its_budget_through_the_core_guard(home, capsys):
    ws = workspace(home, **FILES)
    cfg = config(home, "[limits]\nmax_tool_calls = 2\n")
    answers = script(home, PLAN_THREE, read("a.txt"), read("b.txt"), read("c.txt"), FINAL)
    code, _, err = bantam(capsys, "run", "read them", "--workspace", ws, "--config", cfg, "--scripted", answers)
    assert code == 1, err
    run = only_run(home)
    state = state_of(run)
    assert (state["status"], state["gate"], state["reason"]) == ("blocked", "max_tool_calls",
                                                                "2 of 2 tool calls used")
    assert "run blocked: max_tool_calls: 2 of 2 tool calls used" in err
    # the third call was stopped before its intent: nothing in flight, nothing run
    assert state["pending_call"] is None and state["counters"]["tool_calls"] == 2
    assert [o["arguments"]["path"] for o in records(run, "observations.jsonl")] == ["a.txt", "b.txt"]

    # What enforced it is the core's guard, over what is left of the run's count (kept across resumes).
    store = RunDir(run)
    resumed = runtime._assemble(store.load(), store, {}, lambda event: None)
    bounds = limits(resumed)
    assert bounds.tool_budget == 0
    budget = [g for g in guards(resumed, bounds) if isinstance(g, core.ToolBudget)]
    assert len(budget) == 1 and budget[0].budget == 0


def test_the_loops_limits_are_the_runs_limits_left(home, capsys):
    ws = workspace(home, **FILES)
    cfg = config(home, "[limits]\nmax_iterations = 1\nmax_tool_calls = 7\n")
    code, _, _ = bantam(capsys, "run", "read a", "--workspace", ws, "--require-read", "a.txt", "--config", cfg,
                        "--scripted", script(home, PLAN_READ, READ_A))
    assert code == 1
    store = RunDir(only_run(home))
    run = runtime._assemble(store.load(), store, {}, lambda event: None)
    bounds = limits(run)
    # one iteration used (the plan); the loop may also act on a saved answer and end after `final`
    assert (bounds.max_iterations, bounds.tool_budget, bounds.retry_delays) == (0 + 2, 7, ())
    assert bounds.max_tokens_limit == run.model.max_tokens  # a cut answer is not asked again larger


def test_a_plan_proposal_stopped_at_its_call_resumes_as_the_same_proposal(home, capsys):
    """Stopped between the model's answer and acting on it (the browser's Stop at the tool call
    event): resume proposes the very same plan from the saved answer, without asking again."""
    ws = workspace(home, **FILES)
    answers = script(home, PLAN_THREE, read("a.txt"), read("b.txt"), read("c.txt"), FINAL)
    calls: list[ToolCall] = []

    def stop_at_the_plan(event):
        if isinstance(event, ToolCall):
            calls.append(event)
            if event.name == "plan":
                raise KeyboardInterrupt
    options = runtime.Options(workspace=ws, scripted=answers)
    with pytest.raises(KeyboardInterrupt):
        runtime.start({}, "read them", options, stop_at_the_plan)
    run = only_run(home)
    interrupted = calls[-1]
    saved = RunDir(run).load()
    assert saved.status == "paused" and saved.pending_answer is not None and saved.plan == []

    # the saved answer alone gives the same typed proposal
    store = RunDir(run)
    again = propose(runtime._assemble(store.load(), store, {}, lambda event: None), saved.pending_answer)
    assert isinstance(again, Proposal) and again.kind == "plan" and again.via == "model"
    assert [s.arguments["path"] for s in again.steps] == list(FILES)
    assert json.loads(interrupted.arguments) == again.call_arguments()

    calls.clear()
    _, state = runtime.resume({}, run.name, runtime.Options(), calls.append)
    resumed = [c for c in calls if isinstance(c, ToolCall)]
    assert (resumed[0].name, resumed[0].arguments) == (interrupted.name, interrupted.arguments)
    assert state.status == "completed" and [s.status for s in state.plan] == ["done"] * 3
    assert state.counters.model_calls == 5 and state.scripted_used == 5  # the plan was not asked for twice


def test_a_plan_step_run_without_the_model_is_proposed_via_the_plan(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    cfg = config(home, '[runtime]\nplanning_strategy = "files"\nexecute_plan = true\n')
    code, out, err = bantam(capsys, "run", "read a", "--workspace", ws, "--require-read", "a.txt", "--config", cfg,
                            "--scripted", script(home, FINAL))
    assert code == 0 and out == "done\n", err
    intents = [e for e in records(only_run(home), "events.jsonl") if e["type"] == "intent"]
    assert [e["via"] for e in intents] == ["plan"]


def test_a_proposal_is_one_tool_call_for_the_loop():
    """The proposal's loop-facing shape: one tool call whose name and arguments are the proposal's."""
    from bantam.runs.schema import Step
    plan = Proposal("plan", "plan", steps=(Step(description="d", tool="read_file", arguments={"path": "x"}),))
    assert plan.call_arguments() == {"steps": [{"description": "d", "tool": "read_file", "arguments": {"path": "x"}}]}
    call = Proposal("call", "read_file", {"path": "x"}, via="plan")
    assert call.as_call().tool == "read_file" and call.as_call().arguments == {"path": "x"}
    assert Proposal("unusable", "unusable_answer", gate="parser", problem="p").call_arguments() == \
        {"gate": "parser", "problem": "p"}
