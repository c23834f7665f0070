"""Controlled runs end to end: `bantam run / status / resume` with real files, real check
commands, scripted answers or a real local server, and real SIGKILLs."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bantam.cli import main
from bantam.runs.state import Call, PendingAnswer
from bantam.runs.store import RunDir
from tests.conftest import base_cfg, write_cfg
from tests.conftest import wait_for as wait_until  # this file has a wait_for of its own (for a process)
from tests.fakes.openai_server import text_reply

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
READ_GOAL = "Read example.txt and report twice the number in it."
READ_NUMBER = ["--workspace", str(EXAMPLES / "read_number" / "workspace"), "--require-read", "example.txt"]


def bantam(capsys, *args: str) -> tuple[int, str, str]:
    """bantam's real entry point, in this process (quicker than a subprocess)."""
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def script(directory: Path, *answers: str) -> str:
    path = directory / f"answers-{len(list(directory.glob('answers-*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return str(path)


def config(directory: Path, text: str, name: str = "run.toml") -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


def only_run(home: Path) -> Path:
    runs = sorted((home / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def state_of(run: Path) -> dict:
    return json.loads((run / "state.json").read_text())


def records(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


def workspace(home: Path, **files: str) -> str:
    folder = home / "ws"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(folder)


PLAN_READ = json.dumps({"plan": [{"description": "Read a.txt", "tool": "read_file", "arguments": {"path": "a.txt"}}]})
READ_A = '{"tool": "read_file", "arguments": {"path": "a.txt"}}'
FINAL = '{"final": "done"}'


HOLD = "import os, time\nopen('held', 'w').close()\nwhile not os.path.exists('go'):\n    time.sleep(0.05)\n"


def held_run(home: Path, reads: list[str]) -> str:
    """/run's arguments for a scripted run whose first step is a command that marks `held` in the
    run's workspace and holds until a file `go` appears there; then one model answer per read of
    `reads`, then the final answer. A test pauses it while it holds, then lets it go."""
    ws = workspace(home, **{name: f"{name} text\n" for name in reads}, **{"hold.py": HOLD})
    cfg = config(home, '[tools]\ncommand_timeout_seconds = 600.0\n[tools.commands]\n'
                       'hold = ["{python}", "hold.py"]\n', "hold.toml")  # run in the run's workspace
    hold = {"tool": "shell", "arguments": {"command": "hold"}}
    steps = [{"description": "hold", **hold}] + [
        {"description": f"read {name}", "tool": "read_file", "arguments": {"path": name}} for name in reads]
    answers = script(home, json.dumps({"plan": steps}), json.dumps(hold),
                     *[READ_A.replace("a.txt", name) for name in reads], FINAL)
    required = " ".join(f"--require-read {name}" for name in reads)
    return f"--workspace {ws} --config {cfg} --scripted {answers} {required} read them"


# --- the demos ---------------------------------------------------------------------------------


def test_read_number_demo_scripted(home, capsys):
    answers = str(EXAMPLES / "read_number" / "scripted.json")
    code, out, err = bantam(capsys, "run", READ_GOAL, *READ_NUMBER, "--scripted", answers)
    assert code == 0, err
    assert out == "example.txt contains 21, so twice the number is 42.\n"
    assert "SCRIPTED: model answers are replayed from" in err
    assert "parser: read the answer from a JSON code fence" in err
    run = only_run(home)
    assert sorted(p.name for p in run.iterdir()) == [".lock", "artifacts", "events.jsonl", "goal.md",
                                                    "observations.jsonl", "plan.md", "state.json", "workspace"]
    assert (run / "workspace" / "example.txt").read_text() == "21\n"
    assert (run / "goal.md").read_text() == READ_GOAL
    state = state_of(run)
    assert state["status"] == "completed" and state["model"] == {"scripted": answers}
    assert state["counters"]["parser_recoveries"] == 1 and state["counters"]["model_calls"] == 4
    assert list(state["reads"]) == ["example.txt"] and state["scripted_used"] == 4
    assert "- [x] 2. Read the number in example.txt" in (run / "plan.md").read_text()
    assert [o["tool"] for o in records(run, "observations.jsonl")] == ["list_files", "read_file"]

    code, out, _ = bantam(capsys, "status", run.name)
    assert code == 0
    for line in ("status: completed", f"model: SCRIPTED ({answers})", "plan: 2/2 steps done",
                 "iterations: 4/200   model calls: 4   tool calls: 2/160", "parser_recoveries: 1",
                 "evidence: read in full: example.txt", "completion: met",
                 "final answer: example.txt contains 21, so twice the number is 42."):
        assert line in out, out
    code, out, _ = bantam(capsys, "status", str(run), "--json")
    status = json.loads(out)
    assert status["complete"] and status["unmet"] == [] and status["scripted"] is True


def test_fibonacci_demo_scripted_fails_replans_and_passes(home, capsys):
    pytest.importorskip("flask")
    demo = EXAMPLES / "fibonacci_flask"
    code, out, err = bantam(capsys, "run", "--goal-file", str(demo / "goal.md"), "--config",
                            str(demo / "config.toml"), "--workspace", str(demo / "workspace"),
                            "--require-read", "spec.md", "--scripted", str(demo / "scripted.json"))
    assert code == 0, err
    assert "The twelve acceptance tests pass." in out
    run = only_run(home)
    checks = [o for o in records(run, "observations.jsonl") if o["tool"] == "shell"]
    assert [c["ok"] for c in checks] == [False, True]
    assert "8/12 passed" in checks[0]["output"] and "12/12 passed" in checks[1]["output"]
    assert checks[0]["facts"]["report"]["failed"] == 4
    kinds = [(e["type"], e.get("message")) for e in records(run, "events.jsonl") if e.get("message")]
    order = [m for _, m in kinds if m.startswith(("shell(", "repair plan", "write_file(", "best", "run completed"))]
    assert order == ["write_file(path='app.py'): ok", "write_file(path='requirements.txt'): ok",
                     "best tested attempt so far: 8/12", "shell(command='verify'): FAILED (exit 1)",
                     "repair plan 1 (rewrite): write_file(path='app.py'); shell(command='verify')",
                     "write_file(path='app.py'): ok", "best tested attempt so far: 12/12",
                     "shell(command='verify'): ok (exit 0)",
                     "run completed: every step done, reads and checks proven"]
    state = state_of(run)
    assert state["counters"]["replans"] == 1 and state["best"]["passed"] == 12
    assert "MAX_N = 1000" in (run / "workspace" / "app.py").read_text()
    assert (run / "workspace" / "requirements.txt").read_text() == "flask>=3\n"
    assert "Best tested attempt" not in (run / "artifacts" / "prompt-0003.txt").read_text()  # it is the current file
    assert "FAIL test_negative_is_400" in (run / "artifacts" / "prompt-0003.txt").read_text()
    assert sorted(p.name for p in (run / "workspace").iterdir()) == ["app.py", "requirements.txt", "spec.md"]


# --- parser, gates and budgets through a whole run ----------------------------------------------------


def test_unusable_answers_go_back_then_block_at_max_parse_retries(home, capsys):
    answers = script(home, "I would read the file.", '{"plan": [{"description": "x"}]}', *["no"] * 5)
    code, _, err = bantam(capsys, "run", "goal", "--scripted", answers)
    assert code == 1 and "blocked: max_parse_retries: 6 unusable answers in a row (5 retries allowed)" in err
    run = only_run(home)
    second = (run / "artifacts" / "prompt-0002.txt").read_text()
    assert "Your last answer could not be used: not valid JSON (Expecting value: line 1 column 1 (char 0))" in second
    assert "field plan.0.tool: Field required" in (run / "artifacts" / "prompt-0003.txt").read_text()
    state = state_of(run)
    assert state["status"] == "blocked" and state["gate"] == "max_parse_retries"
    assert state["counters"]["parse_failures"] == 6 and state["scripted_used"] == 6


def test_gate_rejections_go_back_to_the_model(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    bad_plan = json.dumps({"plan": [{"description": "escape", "tool": "read_file", "arguments": {"path": "../x"}}]})
    answers = script(home, bad_plan, PLAN_READ, FINAL, '{"tool": "shell", "arguments": {"command": "ls"}}',
                     READ_A, FINAL)
    code, out, err = bantam(capsys, "run", "read a", "--workspace", ws, "--require-read", "a.txt",
                            "--scripted", answers)
    assert code == 0 and out == "done\n", err
    assert "gate paths: plan step 1: ../x: '..' is not allowed" in err
    assert "gate completion: not complete: step 1 (Read a.txt) is not done; no file has been read" in err
    assert "gate tools: 'shell' is not an allowed tool; allowed: read_file, list_files" in err
    run = only_run(home)
    assert "the paths gate refused it" in (run / "artifacts" / "prompt-0002.txt").read_text()
    assert state_of(run)["counters"]["gate_rejections"] == 3


def test_json_shows_the_runs_tool_calls_results_and_refusals(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    answers = script(home, PLAN_READ, "not json", '{"tool": "shell", "arguments": {"command": "ls"}}', READ_A, FINAL)
    code, out, err = bantam(capsys, "run", "read a", "--workspace", ws, "--scripted", answers, "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    calls = [(e["name"], json.loads(e["arguments"])) for e in lines if e["type"] == "tool_call"]
    results = [(e["name"], e["is_error"], e["content"]) for e in lines if e["type"] == "tool_result"]
    assert [name for name, _ in calls] == ["plan", "unusable_answer", "shell", "read_file", "final"]
    assert calls[3][1] == {"path": "a.txt"} and calls[4][1] == {"answer": "done"}
    assert results[0] == ("plan", False, "plan accepted: 1 steps")
    assert results[1][:2] == ("unusable_answer", True) and "not valid JSON" in results[1][2]
    assert results[2][:2] == ("shell", True) and "the tools gate refused it" in results[2][2]
    assert results[3] == ("read_file", False, "alpha\n")
    assert lines[-1]["type"] == "done" and lines[-1]["text"] == "done"
    assert lines[-1]["usage"]["prompt_tokens"] == state_of(only_run(home))["counters"]["prompt_tokens"] > 0
    assert "run completed" in err  # progress stays on stderr


def test_plan_named_calls_are_recovered_in_a_whole_run(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    plan_call = json.dumps({"tool": "plan", "arguments": {"steps": json.loads(PLAN_READ)["plan"]}})
    act_call = json.dumps({"name": "plan", "arguments": {"tool": "read_file", "arguments": {"path": "a.txt"}}})
    answers = script(home, plan_call, act_call, FINAL)
    code, out, err = bantam(capsys, "run", "read a", "--workspace", ws, "--scripted", answers)
    assert code == 0 and out == "done\n", err
    assert err.count("parser: read the answer from a tool call named plan") == 2
    assert state_of(only_run(home))["counters"]["parser_recoveries"] == 2


def test_model_failure_then_retry_blocked(home, capsys, server):
    from tests.fakes.openai_server import json_reply
    write_cfg(home, **base_cfg(server, api_key="sk-secret-123"))
    ws = workspace(home, **{"a.txt": "alpha\n"})
    server.add(json_reply({"error": {"message": "invalid model"}}, status=400))
    code, _, err = bantam(capsys, "run", "read a", "--workspace", ws)
    assert code == 1 and "failed: model:" in err and "invalid model" in err
    run = only_run(home)
    assert state_of(run)["model"] == {"provider": "openai", "model": "test-model", "endpoint": server.url,
                                      "label": "test-model"}
    server.add(text_reply(PLAN_READ), text_reply(READ_A), text_reply(FINAL))
    code, out, err = bantam(capsys, "resume", run.name, "--retry-blocked")
    assert code == 0 and out == "done\n", err
    assert state_of(run)["counters"]["model_calls"] == 4
    assert server.chat_requests()[0].headers["authorization"] == "Bearer sk-secret-123"
    assert not [p for p in run.rglob("*") if p.is_file() and b"sk-secret-123" in p.read_bytes()]


def test_budget_then_resume_with_a_new_config_and_retry_blocked(home, capsys):
    tight = config(home, "[limits]\nmax_iterations = 2\nmax_tool_calls = 40\n")
    answers = str(EXAMPLES / "read_number" / "scripted.json")
    code, _, err = bantam(capsys, "run", READ_GOAL, *READ_NUMBER, "--config", tight, "--scripted", answers)
    assert code == 1 and "blocked: max_iterations: 2 of 2 iterations used" in err
    assert "continue with: bantam resume" in err
    run = only_run(home)
    assert state_of(run)["config"]["limits"]["max_iterations"] == 2  # the configuration is saved in the run
    used = state_of(run)["counters"]["tokens_used"]

    code, _, err = bantam(capsys, "resume", run.name)
    assert code == 1 and "resume it explicitly with --retry-blocked" in err
    code, _, err = bantam(capsys, "resume", run.name, "--retry-blocked")  # same limit: blocked again
    assert code == 1 and "max_iterations" in err

    wide = config(home, '[limits]\nmax_iterations = 10\n[runtime]\nfile_output_format = "json"\n', "wide.toml")
    code, out, err = bantam(capsys, "resume", str(run), "--config", wide, "--retry-blocked")
    assert code == 0 and "twice the number is 42" in out, err
    assert "configuration changed: limits.max_iterations 2 -> 10" in err
    state = state_of(run)
    assert state["config"]["limits"]["max_iterations"] == 10
    assert state["config"]["limits"]["max_tool_calls"] == 40  # a key the resume config does not name stays
    assert state["config"]["runtime"]["file_output_format"] == "fenced"  # a run keeps its format
    assert state["counters"]["tokens_used"] > used and state["counters"]["iterations"] == 4
    changed = [e for e in records(run, "events.jsonl") if e["type"] == "config_changed"]
    assert changed[0]["changes"]["limits.max_iterations"] == [2, 10]


def test_paths_are_normalised_and_nothing_runs_once_only_the_answer_is_left(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    plan = json.dumps({"plan": [{"description": "Read a", "tool": "read_file", "arguments": {"path": "./a.txt"}}]})
    answers = script(home, plan, '{"tool": "read_file", "arguments": {"path": "./a.txt"}}', READ_A, FINAL)
    code, out, err = bantam(capsys, "run", "read a", "--workspace", ws, "--require-read", "a.txt",
                            "--scripted", answers)
    assert code == 0 and out == "done\n", err
    assert "gate completion: everything the run needs is done; only the final answer may follow" in err
    run = only_run(home)
    assert list(state_of(run)["reads"]) == ["a.txt"]  # ./a.txt proves the required read of a.txt
    assert [o["arguments"]["path"] for o in records(run, "observations.jsonl")] == ["./a.txt"]


def test_a_write_the_plan_puts_later_cannot_be_made_early(home, capsys):
    cfg = config(home, '[tools]\nwrite_paths = ["out.txt"]\n')
    ws = workspace(home, **{"a.txt": "alpha\n"})
    plan = json.dumps({"plan": [{"description": "Read a", "tool": "read_file", "arguments": {"path": "a.txt"}},
                                {"description": "Write out", "tool": "write_file", "arguments": {"path": "out.txt"}}]})
    early = json.dumps({"tool": "write_file", "arguments": {"path": "out.txt", "content": "early"}})
    answers = script(home, plan, early, READ_A, "```\nhello\n```", FINAL)
    code, out, err = bantam(capsys, "run", "copy", "--workspace", ws, "--config", cfg, "--scripted", answers)
    assert code == 0 and out == "done\n", err
    assert "gate tools: 'write_file' is not an allowed tool" in err
    run = only_run(home)
    assert (run / "workspace" / "out.txt").read_text() == "hello\n"
    assert [o["tool"] for o in records(run, "observations.jsonl")] == ["read_file", "write_file"]


def test_resume_with_another_scripted_file_starts_at_its_first_answer(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    code, _, err = bantam(capsys, "run", "read a", "--workspace", ws, "--scripted", script(home, PLAN_READ))
    assert code == 1 and "scripted answers" in err and "used up" in err
    run = only_run(home)
    code, out, err = bantam(capsys, "resume", run.name, "--retry-blocked", "--scripted", script(home, READ_A, FINAL))
    assert code == 0 and out == "done\n", err
    assert state_of(run)["scripted_used"] == 2


def rewrite_config(home: Path, path: str, check: str, runtime: str = "") -> str:
    """Files planning, plan steps run directly, rewrite repairs: write `path`, then run `check`."""
    return config(home, f"""
[runtime]
planning_strategy = "files"
execute_plan = true
repair_strategy = "rewrite"
{runtime}
[tools]
write_paths = ["{path}"]
required_verifications = ["check"]
[tools.commands]
check = ["{{python}}", "-c", "{check}"]
""")


def test_a_model_failure_names_the_failure_that_was_still_open(home, capsys):
    cfg = rewrite_config(home, "app.py", "import sys; print('collecting'); sys.exit('No module named flask')")
    code, _, err = bantam(capsys, "run", "write app", "--config", cfg, "--scripted", script(home, "```\nx = 1\n```"))
    assert code == 1, err
    assert "used up (1 answers); the last failure before it: shell(command='check') (exit 1): " \
           "No module named flask" in err


def test_status_says_interrupted_when_no_process_holds_a_running_run(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    assert bantam(capsys, "run", "read a", "--workspace", ws, "--scripted", script(home, PLAN_READ, READ_A, FINAL))[0] == 0
    run = only_run(home)
    state = state_of(run)
    state["status"] = "running"  # as a SIGKILLed process leaves it
    (run / "state.json").write_text(json.dumps(state))
    assert "status: interrupted" in bantam(capsys, "status", run.name)[1]
    assert json.loads(bantam(capsys, "status", run.name, "--json")[1])["status"] == "interrupted"
    holder = RunDir(run)
    holder.lock()  # a live process working on it
    try:
        assert "status: running" in bantam(capsys, "status", run.name)[1]
    finally:
        holder.unlock()


CALC_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.mark.parametrize("edit,repair", [
    ("function", "The fix:\nfunction add\n```python\ndef add(a, b):\n    return a + b\n```"),
    ("lines", "lines 2-2\n```\n    return a + b\n```")])
def test_a_repair_replaces_one_function_or_named_lines(home, capsys, edit, repair):
    cfg = rewrite_config(home, "calc.py", "import calc, sys; sys.exit(calc.add(2, 3) != 5 or calc.sub(5, 3) != 2)",
                         f'repair_edit = "{edit}"')
    ws = workspace(home, **{"spec.txt": "add and sub\n"})
    answers = script(home, f"```python\n{CALC_BUGGY}```", repair, FINAL)
    code, out, err = bantam(capsys, "run", "calc", "--workspace", ws, "--require-read", "spec.txt",
                            "--config", cfg, "--scripted", answers)
    assert code == 0 and out == "done\n", err
    run = only_run(home)
    assert (run / "workspace" / "calc.py").read_text() == CALC_FIXED
    assert [(o["tool"], o["ok"]) for o in records(run, "observations.jsonl")] == [
        ("read_file", True), ("write_file", True), ("shell", False), ("write_file", True), ("shell", True)]
    prompt = (run / "artifacts" / "prompt-0002.txt").read_text()
    assert ("`lines A-B` (replace lines A to B" if edit == "lines" else "`function NAME`") in prompt
    assert ("   2     return a - b" in prompt) == (edit == "lines")  # numbered for a line repair


def test_output_generates_one_file_under_the_gates(home, capsys):
    answers = script(home, "```html\n<h1>Hello</h1>\n```", json.dumps({"final": "wrote hello.html"}))
    code, out, err = bantam(capsys, "run", "Write a greeting page.", "--output", "web/hello.html", "--scripted", answers)
    assert code == 0 and out == "wrote hello.html\n", err
    run = only_run(home)
    assert f"output: {(run / 'workspace' / 'web' / 'hello.html').resolve()}" in err
    assert (run / "workspace" / "web" / "hello.html").read_text() == "<h1>Hello</h1>\n"
    state = state_of(run)
    assert state["config"]["tools"]["write_paths"] == ["web/hello.html"] and state["require_read"] == ["goal.md"]
    assert [(s["tool"], s["arguments"]) for s in state["plan"]] == [
        ("read_file", {"path": "goal.md"}), ("write_file", {"path": "web/hello.html"})]
    assert state["counters"]["model_calls"] == 2  # the read needs no model call
    ws = workspace(home, **{"goal.md": "mine"})
    code, _, err = bantam(capsys, "run", "x", "--output", "a.txt", "--workspace", ws, "--scripted", answers)
    assert code == 2 and "already has a goal.md" in err
    code, _, err = bantam(capsys, "run", "x", "--output", "../a.txt", "--scripted", answers)
    assert code == 2 and "--output" in err and "relative path inside the workspace" in err


def check_config(home: Path, replans: str) -> str:
    return config(home, f"""
[limits]
max_replans = {replans}
[runtime]
planning_strategy = "files"
execute_plan = true
repair_strategy = "rewrite"
[tools]
write_paths = ["answer.txt"]
required_verifications = ["check"]
[tools.commands]
check = ["{{python}}", "-c", "import sys; sys.exit(open('answer.txt').read().strip() != 'yes')"]
""", f"check-{replans.strip(chr(34))}.toml")


def test_max_replans_blocks_and_unlimited_lets_it_repair(home, capsys):
    ws = workspace(home, **{"task.txt": "write yes"})
    answers = script(home, "```\nno\n```", "```\nyes\n```", FINAL)
    code, _, err = bantam(capsys, "run", "answer yes", "--workspace", ws, "--require-read", "task.txt",
                          "--config", check_config(home, "0"), "--scripted", answers)
    assert code == 1 and "blocked: max_replans: a step failed and all 0 repair plans are used" in err
    run = only_run(home)
    code, out, err = bantam(capsys, "resume", run.name, "--config", check_config(home, '"unlimited"'),
                            "--retry-blocked")
    assert code == 0 and out == "done\n", err
    assert "repair plan 1 (rewrite)" in err
    assert (run / "workspace" / "answer.txt").read_text() == "yes\n"


def test_overlong_prompt_is_refused_not_cut(home, capsys):
    small = config(home, "[model]\ncontext_window = 400\nmax_output_tokens = 100\n")
    answers = script(home, PLAN_READ)
    code, _, err = bantam(capsys, "run", "a long goal " * 100, "--config", small, "--scripted", answers)
    assert code == 1 and "blocked: context: the prompt needs about" in err
    assert "more than the model's context window of 400; refused rather than cut" in err
    state = state_of(only_run(home))
    assert state["counters"]["model_calls"] == 0 and state["scripted_used"] == 0


def test_token_budget_reserves_before_each_inference(home, capsys):
    tight = config(home, "[limits]\nmax_tokens = 1500\n[model]\nmax_output_tokens = 500\n")
    answers = str(EXAMPLES / "read_number" / "scripted.json")
    code, _, err = bantam(capsys, "run", READ_GOAL, *READ_NUMBER, "--config", tight, "--scripted", answers)
    assert code == 1 and "blocked: max_tokens:" in err and "the next inference reserves" in err
    state = state_of(only_run(home))
    assert state["counters"]["tokens_used"] <= 1500 and state["gate"] == "max_tokens"


def test_json_file_output_format(home, capsys):
    cfg = config(home, '[runtime]\nfile_output_format = "json"\nplanning_strategy = "files"\nexecute_plan = true\n'
                       '[tools]\nwrite_paths = ["notes/out.md"]\n')
    ws = workspace(home, **{"a.txt": "alpha\n"})
    answers = script(home, json.dumps({"content": "# Notes\n\n```sh\nls\n```\n"}), FINAL)
    code, out, err = bantam(capsys, "run", "notes", "--workspace", ws, "--require-read", "a.txt",
                            "--config", cfg, "--scripted", answers)
    assert code == 0, err
    assert (only_run(home) / "workspace" / "notes" / "out.md").read_text() == "# Notes\n\n```sh\nls\n```\n"


def test_scripted_answers_as_text_with_separators(home, capsys):
    ws = workspace(home, **{"a.txt": "alpha\n"})
    path = home / "answers.txt"
    path.write_text(f"{PLAN_READ}\n=====8<=====\n{READ_A}\n=====8<=====\n{FINAL}\n")
    code, out, err = bantam(capsys, "run", "read a", "--workspace", ws, "--scripted", str(path))
    assert code == 0 and out == "done\n", err


@pytest.mark.parametrize("args, message", [
    (["run"], "bantam run needs a GOAL"),
    (["run", "g", "--workspace", "/no/such/dir"], "--workspace: /no/such/dir is not a directory"),
    (["run", "g", "--config", "missing.toml"], "--config: missing.toml does not exist"),
    (["run", "g", "--require-read", "../x"], "must be a relative path inside the workspace"),
    (["run", "g", "--scripted", "missing.json"], "--scripted: cannot read missing.json"),
    (["status", "nope"], "no run 'nope'"),
    (["resume", "nope"], "no run 'nope'"),
])
def test_bad_usage_is_exit_2(home, capsys, args, message):
    code, _, err = bantam(capsys, *args)
    assert code == 2 and message in err, err


# --- resume: state, locks, logs ------------------------------------------------------------------------


def blocked_read_run(home: Path, capsys, *answers: str) -> Path:
    """A run blocked after its plan (max_iterations = 1), with a.txt in its workspace."""
    ws = workspace(home, **{"a.txt": "alpha\n"})
    code, _, _ = bantam(capsys, "run", "read a", "--workspace", ws, "--require-read", "a.txt",
                        "--config", config(home, "[limits]\nmax_iterations = 1\n"),
                        "--scripted", script(home, PLAN_READ, *answers))
    assert code == 1
    return only_run(home)


def craft(run: Path, change) -> None:
    """Leave the state as a process killed at that moment would have left it."""
    store = RunDir(run)
    state = store.load()
    state.status, state.gate, state.reason = "running", "", ""
    state.config.limits.max_iterations = 10
    change(state, store)
    from bantam.runs.planning import plan_md
    store.save(state, plan_md(state))


def test_a_saved_answer_is_used_without_asking_again(home, capsys):
    run = blocked_read_run(home, capsys, FINAL)
    craft(run, lambda state, store: setattr(state, "pending_answer", PendingAnswer(text=READ_A, purpose="act")))
    code, out, err = bantam(capsys, "resume", run.name)
    assert code == 0 and out == "done\n", err
    assert "an answer saved before the interruption is used (no new request)" in err
    assert state_of(run)["scripted_used"] == 2  # the plan and the final answer: nothing asked twice


def test_stopped_at_a_tool_call_the_answer_waits_for_resume(home, capsys):
    from bantam.events import ToolCall
    from bantam.runs import runtime
    ws = workspace(home, **{"a.txt": "alpha\n"})
    answers = script(home, PLAN_READ, READ_A, FINAL)

    def stop_at_the_read(event):
        if isinstance(event, ToolCall) and event.name == "read_file":
            raise KeyboardInterrupt  # what the browser's Stop does at this event (web/session.py)
    options = runtime.Options(workspace=ws, require_read=["a.txt"], scripted=answers)
    with pytest.raises(KeyboardInterrupt):
        runtime.start({}, "read a", options, stop_at_the_read)
    run = only_run(home)
    state = state_of(run)
    assert state["status"] == "paused" and state["reason"] == "resume continues from here"
    assert state["pending_answer"]["text"] == READ_A and state["scripted_used"] == 2
    assert state["pending_call"] is None and not (run / "observations.jsonl").exists()
    code, out, err = bantam(capsys, "resume", run.name)
    assert code == 0 and out == "done\n", err
    assert "an answer saved before the interruption is used (no new request)" in err
    assert state_of(run)["counters"]["model_calls"] == 3  # the saved answer was not asked for again


def test_a_saved_observation_is_taken_over_not_run_again(home, capsys):
    run = blocked_read_run(home, capsys, FINAL)

    def killed_after_the_observation(state, store):
        call = Call(tool="read_file", arguments={"path": "a.txt"}, call_id=state.new_call_id(), step=0)
        state.pending_call = call
        state.counters.tool_calls += 1
        from bantam.runs.state import Observation
        store.observe(Observation(call_id=call.call_id, tool="read_file", arguments={"path": "a.txt"}, ok=True,
                                  output="alpha\n", step=0, facts={"sha256": "f" * 64, "bytes": 6,
                                                                   "full_read": True, "files_hash": ""}))
    craft(run, killed_after_the_observation)
    code, out, err = bantam(capsys, "resume", run.name)
    assert code == 0 and out == "done\n", err
    assert "read_file(path='a.txt'): its saved result is taken over (not run again)" in err
    assert len(records(run, "observations.jsonl")) == 1
    assert state_of(run)["reads"] == {"a.txt": "f" * 64}


def test_an_interrupted_read_is_repeated(home, capsys):
    run = blocked_read_run(home, capsys, FINAL)

    def killed_during_the_read(state, store):
        state.pending_call = Call(tool="read_file", arguments={"path": "a.txt"}, call_id=state.new_call_id(), step=0)
    craft(run, killed_during_the_read)
    code, out, err = bantam(capsys, "resume", run.name)
    assert code == 0 and out == "done\n", err
    assert "interrupted without a result; run again (it only reads)" in err
    assert [o["tool"] for o in records(run, "observations.jsonl")] == ["read_file"]


def test_torn_log_lines_are_healed(home, capsys):
    run = blocked_read_run(home, capsys, READ_A, FINAL)
    with open(run / "events.jsonl", "ab") as f:
        f.write(b'{"type": "tool", "mess')
    with open(run / "observations.jsonl", "ab") as f:
        f.write(b'{"call_id": "c0009", "to')
    more = config(home, "[limits]\nmax_iterations = 10\n", "more.toml")
    code, out, err = bantam(capsys, "resume", run.name, "--config", more, "--retry-blocked")
    assert code == 0 and out == "done\n", err
    assert "events.jsonl: removed a torn last line (22 bytes)" in err
    assert "observations.jsonl: removed a torn last line (24 bytes)" in err
    assert all(records(run, name) for name in ("events.jsonl", "observations.jsonl"))  # every line parses


def test_one_writer_per_run_and_the_goal_is_fixed(home, capsys):
    run = blocked_read_run(home, capsys)
    holder = RunDir(run)
    holder.lock()
    try:
        code, _, err = bantam(capsys, "resume", run.name, "--retry-blocked")
        assert code == 2 and "is in use by another bantam process" in err
    finally:
        holder.unlock()
    (run / "goal.md").write_text("another goal")
    code, _, err = bantam(capsys, "resume", run.name)
    assert code == 2 and "differs from the goal in state.json" in err


# --- SIGKILL at each phase ----------------------------------------------------------------------------


def start_run(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bantam", "run", *args], cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(proc: subprocess.Popen, ready, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.stderr.read().decode()}")
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.05)


def count_events(home: Path, kind: str) -> int:
    runs = list((home / "runs").glob("*/events.jsonl"))
    return sum(line.count(f'"type": "{kind}"') for line in runs[0].read_text().splitlines()) if runs else 0


def test_killed_while_waiting_for_the_model_resumes_without_redoing_work(home, capsys, server):
    """Before the inference result: the reservation stays counted, the request is made again,
    and the write done before it is not done again."""
    write_cfg(home, **base_cfg(server))
    ws = workspace(home, **{"in.txt": "say hello\n"})
    cfg = config(home, '[runtime]\nplanning_strategy = "files"\nexecute_plan = true\n'
                       '[tools]\nwrite_paths = ["out.txt"]\n')
    slow = text_reply(FINAL)
    slow.delay = 30
    server.add(text_reply("```\nhello\n```"), slow)
    proc = start_run(home, "write hello", "--workspace", ws, "--require-read", "in.txt", "--config", cfg)
    wait_for(proc, lambda: len(server.chat_requests()) == 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run = only_run(home)
    state = state_of(run)
    assert state["inference"] is not None and state["counters"]["model_calls"] == 2
    reserved = state["inference"]["reserved"]

    server.add(text_reply('{"final": "wrote hello"}'))
    code, out, err = bantam(capsys, "resume", run.name)
    assert code == 0 and out == "wrote hello\n", err
    assert f"its reservation of {reserved} tokens stays counted" in err
    state = state_of(run)
    assert state["counters"]["lost_reservations"] == reserved and state["counters"]["tokens_used"] > reserved
    assert [o["tool"] for o in records(run, "observations.jsonl")] == ["read_file", "write_file"]
    assert (run / "workspace" / "out.txt").read_text() == "hello\n"
    requests = server.chat_requests()
    assert len(requests) == 3
    same = [[m["content"].split("Budget left")[0] for m in r.body["messages"]] for r in requests[1:]]
    assert same[0] == same[1]  # the same request again, from the saved state alone
    assert all(len(r.body["messages"]) == 2 for r in requests)  # a fresh compact context, no history


def test_killed_during_a_command_blocks_until_retried(home, capsys):
    """After the inference, during the command it asked for: resume does not ask the model again,
    and does not run the command again without --retry-blocked."""
    ws = workspace(home, **{"a.txt": "alpha\n"})
    write_cfg(home, sandbox="off")  # the test kills the command by its host pid
    (home / "slow.py").write_text("import os, time\nopen('pid', 'w').write(str(os.getpid()))\n"
                                  "open('marker', 'a').write('ran\\n')\nos.path.exists('fast') or time.sleep(60)\n")
    cfg = config(home, f'[tools.commands]\nslow = ["{sys.executable}", "{home / "slow.py"}"]\n')
    plan = json.dumps({"plan": [{"description": "read", "tool": "read_file", "arguments": {"path": "a.txt"}},
                                {"description": "slow check", "tool": "shell", "arguments": {"command": "slow"}}]})
    answers = script(home, plan, READ_A, '{"tool": "shell", "arguments": {"command": "slow"}}', FINAL)
    proc = start_run(home, "read and check", "--workspace", ws, "--config", cfg, "--scripted", answers)
    marker = lambda: next((home / "runs").glob("*/workspace/marker"), None)  # noqa: E731
    # its line, not only the file: open() makes the file before the write reaches it
    wait_for(proc, lambda: (home / "runs").is_dir() and (m := marker()) is not None and m.read_text() == "ran\n")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run = only_run(home)
    os.killpg(int((run / "workspace" / "pid").read_text()), signal.SIGKILL)  # the orphaned command
    state = state_of(run)
    assert state["pending_call"]["tool"] == "shell" and state["scripted_used"] == 3

    code, _, err = bantam(capsys, "resume", run.name)
    assert code == 1 and "shell(command='slow') was interrupted before its result was saved" in err
    assert state_of(run)["gate"] == "interrupted" and state_of(run)["scripted_used"] == 3
    code, out, _ = bantam(capsys, "status", run.name)
    assert "in flight: shell(command='slow') (no result saved)" in out

    (run / "workspace" / "fast").write_text("")
    code, out, err = bantam(capsys, "resume", run.name, "--retry-blocked")
    assert code == 0 and out == "done\n", err
    assert (run / "workspace" / "marker").read_text() == "ran\nran\n"  # once interrupted, once retried
    assert state_of(run)["scripted_used"] == 4
    assert [o["tool"] for o in records(run, "observations.jsonl")] == ["read_file", "shell"]


# --- the terminal and start-up ---------------------------------------------------------------------------


def test_repl_run_status_files_fix_resume(home, server):
    import io

    from bantam.repl import Repl
    write_cfg(home, **base_cfg(server))
    (home / "ws").mkdir()
    (home / "ws" / "b.txt").write_text("bravo\n")
    plan = PLAN_READ.replace("a.txt", "b.txt")
    read_b = READ_A.replace("a.txt", "b.txt")
    server.add(text_reply(plan), text_reply(read_b), text_reply('{"final": "b says bravo"}'),
               text_reply(plan), text_reply(read_b), text_reply('{"final": "B SAYS BRAVO"}'))
    lines = iter(["/run --workspace ws --require-read b.txt read b", "/status", "/files", "/pause",
                  "/fix the answer must be in capitals", "/resume", "/quit"])
    out, err = io.StringIO(), io.StringIO()

    def read(prompt: str) -> str:  # runs work in the background: the next line once this one is done
        wait_until(lambda: not repl.run_active.is_set(), "the run to end")
        return next(lines)
    repl = Repl({}, read=read, out=out, err=err)
    assert repl.run() == 0
    text, notes = out.getvalue(), err.getvalue()
    assert "b says bravo\n" in text and "status: completed" in text and "b.txt  (6 bytes)" in text
    assert "no run is working now" in notes
    assert text.count("B SAYS BRAVO\n") == 2  # the fix run, then /resume of that completed run
    first, fix = sorted((home / "runs").iterdir(), key=lambda run: "previous" in (run / "goal.md").read_text())
    goal = (fix / "goal.md").read_text()
    assert goal.startswith(f"read b\n\nA previous run ({first.name}) worked on this goal") and "capitals" in goal
    assert (fix / "workspace" / "b.txt").read_text() == "bravo\n"
    assert len(server.chat_requests()) == 6


def test_pydantic_is_loaded_only_for_runs(home, server):
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("ok"))
    code = ("import sys; from bantam.cli import main; main(['-p', 'x']); import bantam.repl, bantam.runs; "
            "print('pydantic' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=home, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.stdout.strip().endswith("False"), r.stdout + r.stderr


@pytest.mark.slow
def test_read_number_on_the_bundled_local_model(home, capsys):
    """The real thing, on SmolLM2-135M through llama.cpp: grammar-bound proposals always parse;
    whether the answer is right is the model's business (the gates prove the read, not the sum)."""
    from bantam.providers.local import available
    if not available():
        pytest.skip("the local extra is not installed")
    code, out, err = bantam(capsys, "run", READ_GOAL, *READ_NUMBER, "--provider", "local")
    run = only_run(home)
    state = state_of(run)
    assert state["model"]["provider"] == "local" and state["plan"], err
    assert state["counters"]["parse_failures"] == 0 and state["counters"]["model_calls"] >= 2
    assert (code, state["status"]) in ((0, "completed"), (1, "blocked")), err
    # the run's grammar names only the workspace's files: no proposal is refused for its path (the
    # chat aids' shaping once put the process folder's names in its place, and the run blocked)
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    assert [e for e in events if e.get("gate") == "paths"] == []
    if code == 0:
        assert "example.txt" in state["reads"] and out.strip()


def test_a_run_on_the_local_provider_uses_its_own_grammar_not_the_chat_aids(tmp_path):
    # the chat aids' command and path patterns would replace the run's stricter call schema
    from bantam.config import Config
    from bantam.providers.local import available
    from bantam.runs.model import ProviderModel
    from bantam.runs.settings import Model
    from bantam.tools.workspace import Workspace
    if not available():
        pytest.skip("the local extra is not installed")
    model = ProviderModel(Config(provider="local"), Model(), Workspace(tmp_path))
    assert model.grammar and model.provider.aids.profile is None  # no profile: the aids change nothing
