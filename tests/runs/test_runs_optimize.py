"""Prompt artifacts and `bantam optimize` (seed 002's DSPy prompt optimisation).

The artifact side needs nothing extra: a run given `--prompt-artifact` puts its demos before each
request of the same kind, keeps a copy and uses only that copy on resume. The optimisation needs
the `dspy` extra; its test is slow and skips cleanly without it. The model is
tests/fakes/small_model.py on 127.0.0.1: prose without a worked example, the asked-for form with one.
"""
import json
from pathlib import Path

import pytest

from tests.conftest import base_cfg, write_cfg
from tests.fakes.small_model import PROSE, SmallModel
from tests.runs.test_runs import bantam, only_run, records, script, state_of

TASKS = {"one": {"a.txt": "alpha\n"}, "two": {"b.txt": "bravo\n", "c.txt": "charlie\n"}, "three": {"d.txt": "delta\n"}}


@pytest.fixture
def small(home):
    with SmallModel() as server:
        write_cfg(home, **base_cfg(server))
        yield server


def task(home: Path, name: str) -> list[str]:
    """`bantam run` arguments for a task of TASKS: read its files, say what they hold."""
    files = TASKS[name]
    ws = home / "tasks" / name
    ws.mkdir(parents=True, exist_ok=True)
    for file, text in files.items():
        (ws / file).write_text(text)
    required = [a for f in files for a in ("--require-read", f)]
    return [f"Read {', '.join(files)} and say what they hold.", "--workspace", str(ws), *required]


def scripted_runs(home: Path, capsys) -> list[Path]:
    """The task set: each task done right by scripted answers (a plan, one read each, the answer)."""
    for name, files in TASKS.items():
        plan = {"plan": [{"description": f"Read {f}", "tool": "read_file", "arguments": {"path": f}} for f in files]}
        answers = script(home, json.dumps(plan), *[json.dumps({"tool": "read_file", "arguments": {"path": f}})
                                                  for f in files], json.dumps({"final": "read " + ", ".join(files)}))
        code, _, err = bantam(capsys, "run", *task(home, name), "--scripted", answers)
        assert code == 0, err
    return sorted((home / "runs").iterdir())


def artifact(home: Path, **demo_answers: str) -> str:
    """A prompt artifact written by hand: one demo for each purpose named."""
    demos = [{"purpose": purpose, "request": f"an earlier {purpose} request", "answer": answer}
             for purpose, answer in demo_answers.items()]
    path = home / "prompt.json"
    path.write_text(json.dumps({"format": "bantam-prompt/1", "strategy": "by hand", "demos": demos}))
    return str(path)


PLAN_DEMO = json.dumps({"plan": [{"description": "Read x", "tool": "read_file", "arguments": {"path": "x"}}]})
DEMOS = {"plan": PLAN_DEMO, "act": '{"tool": "read_file", "arguments": {"path": "x"}}', "final": '{"final": "x"}'}


def test_without_worked_examples_the_small_model_never_gets_anywhere(home, capsys, small):
    code, _, err = bantam(capsys, "run", *task(home, "one"))
    assert code == 1 and "max_parse_retries" in err
    assert {r.body["messages"][-1]["role"] for r in small.chat_requests()} == {"user"}
    assert [a for a in (only_run(home) / "artifacts").glob("answer-*")][0].read_text() == PROSE


def test_a_prompt_artifact_puts_its_demos_before_each_request_of_their_kind(home, capsys, small):
    code, out, err = bantam(capsys, "run", *task(home, "one"), "--prompt-artifact", artifact(home, **DEMOS))
    assert code == 0 and out == "I read every required file.\n", err
    run = only_run(home)
    assert "prompt artifact: 3 worked examples (by hand)" in err
    sent = [r.body["messages"] for r in small.chat_requests()]
    assert len(sent) == 3  # plan, the read, the answer
    assert [m["role"] for m in sent[0]] == ["system", "user", "assistant", "user"]
    assert sent[0][1]["content"] == "an earlier plan request" and sent[0][2]["content"] == PLAN_DEMO
    assert sent[1][2]["content"] == DEMOS["act"] and sent[2][2]["content"] == DEMOS["final"]
    record = state_of(run)["prompt_artifact"]
    assert record["demos"] == 3 and record["file"] == "prompt.json"
    assert (run / "prompt.json").read_bytes() == (home / "prompt.json").read_bytes()
    assert (run / "prompt.json").stat().st_mode & 0o777 == 0o600


def test_the_artifact_is_frozen_for_the_run_on_resume(home, capsys, small):
    limits = home / "short.toml"
    limits.write_text("[limits]\nmax_iterations = 1\n")
    code, _, err = bantam(capsys, "run", *task(home, "one"), "--prompt-artifact", artifact(home, **DEMOS),
                          "--config", str(limits))
    assert code == 1 and "max_iterations" in err
    artifact(home, plan=PROSE, act=PROSE, final=PROSE)  # the source changes: the run keeps its copy
    limits.write_text("[limits]\nmax_iterations = 50\n")
    run = only_run(home)
    code, out, err = bantam(capsys, "resume", run.name, "--retry-blocked", "--config", str(limits))
    assert code == 0 and out == "I read every required file.\n", err
    assert all(r.body["messages"][2]["content"] in DEMOS.values() for r in small.chat_requests())

    (run / "prompt.json").write_text((run / "prompt.json").read_text().replace("x", "y"))
    code, _, err = bantam(capsys, "resume", run.name)
    assert code == 2 and "prompt.json changed since the run started" in err and "Traceback" not in err


@pytest.mark.parametrize("text, message", [
    ("{not json", "is not a bantam prompt artifact (Expecting property name"),
    ('{"strategy": "x", "demos": [{"purpose": "dance", "request": "r", "answer": "a"}]}',
     "is not a bantam prompt artifact (demos.0.purpose: Input should be"),
])
def test_a_bad_artifact_is_one_line_and_no_run(home, capsys, text, message):
    (home / "bad.json").write_text(text)
    code, _, err = bantam(capsys, "run", "x", "--prompt-artifact", str(home / "bad.json"),
                          "--scripted", script(home, FINAL_ANSWER))
    assert code == 2 and message in err and "Traceback" not in err
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())


FINAL_ANSWER = '{"final": "x"}'


def test_traces_are_the_accepted_answers_of_completed_runs(home, capsys):
    from bantam.runs.optimize import accepted, traces
    runs = scripted_runs(home, capsys)
    refused = script(home, "not json", json.dumps({"plan": [{"description": "r", "tool": "read_file",
                                                             "arguments": {"path": "a.txt"}}]}),
                     '{"tool": "read_file", "arguments": {"path": "a.txt"}}', FINAL_ANSWER)
    code, _, _ = bantam(capsys, "run", *task(home, "one"), "--scripted", refused)
    assert code == 0
    found = traces(sorted((home / "runs").iterdir()))
    by_run: dict[str, list[str]] = {}
    for t in found:
        by_run.setdefault(t.run, []).append(t.purpose)
    assert sorted(by_run.values()) == [["plan", "act", "act", "final"]] + [["plan", "act", "final"]] * 3  # "not json" is none
    act = next(t for t in found if t.purpose == "act" and "a.txt" in t.answer)
    assert act.request.endswith('for example {"tool": "read_file", "arguments": {"path": "a.txt"}}.')
    assert act.system.startswith("You work inside a controlled run")
    assert accepted(act, '```json\n{"tool": "read_file", "arguments": {"path": "a.txt"}}\n```')
    assert not accepted(act, '{"tool": "read_file", "arguments": {"path": "b.txt"}}')
    assert not accepted(act, PROSE)
    assert len({t.run for t in found}) == len(runs) + 1


def test_optimize_without_the_extra_says_how_to_install_it(home, capsys):
    try:
        import dspy  # noqa: F401
        pytest.skip("dspy is installed here")
    except ImportError:
        pass
    scripted_runs(home, capsys)
    code, _, err = bantam(capsys, "optimize", *[p.name for p in (home / "runs").iterdir()], "--output", "p.json")
    assert code == 2 and "bantam optimize needs the dspy extra: pip install -e '.[dspy]'" in err
    assert not (home / "p.json").exists()


@pytest.mark.slow
def test_bootstrap_few_shot_over_the_runs_traces_makes_the_small_model_finish(home, capsys, small):
    """The optimisation itself (dspy.BootstrapFewShot through bantam's provider), then its effect:
    the same task fails without the artifact and completes with it."""
    pytest.importorskip("dspy", reason="needs the dspy extra: pip install -e '.[dspy]'")
    runs = scripted_runs(home, capsys)
    code, out, err = bantam(capsys, "optimize", *[p.name for p in runs], "--output", "prompt.json")
    assert code == 0 and out == "", err
    assert "10 traces from 3 runs; 6 worked examples chosen; answers accepted on the traced requests: " \
           "0/10 without them, 10/10 with them" in err
    made = json.loads((home / "prompt.json").read_text())
    assert made["strategy"] == "bootstrap" and made["made_by"]["optimizer"] == "dspy.BootstrapFewShot"
    assert sorted({d["purpose"] for d in made["demos"]}) == ["act", "final", "plan"]
    assert all(d["request"].startswith("Goal:\n") for d in made["demos"])

    before = len(list((home / "runs").iterdir()))
    code, _, err = bantam(capsys, "run", *task(home, "two"))
    assert code == 1 and "max_parse_retries" in err  # unchanged without the artifact
    code, out, err = bantam(capsys, "run", *task(home, "two"), "--prompt-artifact", "prompt.json")
    assert code == 0 and out == "I read every required file.\n", err
    newest = max((home / "runs").iterdir(), key=lambda p: (p / "goal.md").stat().st_mtime_ns)
    assert len(list((home / "runs").iterdir())) == before + 2
    assert [o["path"] for o in (o["arguments"] for o in records(newest, "observations.jsonl"))] == ["b.txt", "c.txt"]
