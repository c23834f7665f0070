"""Controlled runs, the first hour's gaps (issue 32): a workspace that holds the runs folder,
interrupted checks, off-plan checks that fail, required reads checked at start, an edited goal,
the `done` event's counts. Real files, real links, real check commands, scripted answers."""
import json
import signal
import sys
from pathlib import Path

from tests.runs.test_runs import (FINAL, PLAN_READ, READ_A, bantam, config, only_run, records, script, start_run,
                                  state_of, wait_for)


# --- the workspace copy never holds its own destination ---------------------------------------------


def test_a_workspace_holding_the_runs_folder_is_copied_without_it(home, capsys):
    (home / "a.txt").write_text("alpha\n")
    for _ in range(2):  # the second run must not copy the first one either
        answers = script(home, PLAN_READ, READ_A, FINAL)
        code, out, err = bantam(capsys, "run", "read a", "--workspace", ".", "--require-read", "a.txt",
                                "--scripted", answers)
        assert code == 0 and out == "done\n", err
    for run in (home / "runs").iterdir():
        assert sorted(p.name for p in (run / "workspace").iterdir() if not p.name.startswith("answers")) \
            == ["a.txt"]


def test_the_runs_folder_is_left_out_whatever_its_name_or_spelling(home, capsys):
    project = home / "project"
    project.mkdir()
    (project / "a.txt").write_text("alpha\n")
    (home / "alias").symlink_to(project)  # the runs folder reached through another name
    answers = script(home, PLAN_READ, READ_A, FINAL)
    code, out, err = bantam(capsys, "run", "read a", "--workspace", "project", "--runs-dir", "alias/output",
                            "--require-read", "a.txt", "--scripted", answers)
    assert code == 0 and out == "done\n", err
    [run] = list((project / "output").iterdir())
    assert sorted(p.name for p in (run / "workspace").iterdir()) == ["a.txt"]


def test_the_runs_folder_as_the_workspace_is_copied_without_the_new_run(home, capsys):
    (home / "runs").mkdir()
    (home / "runs" / "a.txt").write_text("alpha\n")
    answers = script(home, PLAN_READ, READ_A, FINAL)
    code, out, err = bantam(capsys, "run", "read a", "--workspace", "runs", "--require-read", "a.txt",
                            "--scripted", answers)
    assert code == 0 and out == "done\n", err
    [run] = [p for p in (home / "runs").iterdir() if p.is_dir()]
    assert sorted(p.name for p in (run / "workspace").iterdir()) == ["a.txt"]


# --- required reads are checked when the run starts --------------------------------------------------


def test_required_reads_that_can_never_be_read_are_refused_at_start(home, capsys):
    ws = home / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "folder").mkdir()
    (home / "secret.txt").write_text("outside\n")
    (ws / "out.txt").symlink_to(home / "secret.txt")  # a link out of the workspace
    answers = script(home, PLAN_READ, READ_A, FINAL)
    for path, why in (("missing.txt", "missing.txt"), ("out.txt", "out.txt"), ("folder", "folder"),
                      ("../a.txt", "../a.txt")):
        code, out, err = bantam(capsys, "run", "read", "--workspace", str(ws), "--require-read", "a.txt",
                                "--require-read", path, "--scripted", answers)
        assert code == 2 and out == "", err
        assert "--require-read" in err and why in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
        assert not (home / "runs").is_dir() or not list((home / "runs").iterdir())  # nothing half-made


def test_a_required_read_of_a_file_the_run_writes_may_not_exist_yet(home, capsys):
    ws = home / "ws"
    ws.mkdir()
    cfg = config(home, '[tools]\nwrite_paths = ["new.txt"]\n')
    answers = script(home, json.dumps({"plan": [
        {"description": "write", "tool": "write_file", "arguments": {"path": "new.txt"}},
        {"description": "read", "tool": "read_file", "arguments": {"path": "new.txt"}}]}),
        "```\nmade\n```", '{"tool": "read_file", "arguments": {"path": "new.txt"}}', FINAL)
    code, out, err = bantam(capsys, "run", "make and read", "--workspace", str(ws), "--config", cfg,
                            "--require-read", "new.txt", "--scripted", answers)
    assert code == 0 and out == "done\n", err


# --- Ctrl+C during a check command: plain resume runs it again --------------------------------------


def test_ctrl_c_during_a_check_then_plain_resume_runs_it_again(home, capsys):
    ws = home / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (home / "slow.py").write_text("import os, time\nopen('marker', 'a').write('ran\\n')\n"
                                  "while not os.path.exists('fast'):\n    time.sleep(0.05)\n")
    cfg = config(home, f'[tools.commands]\nslow = ["{sys.executable}", "{home / "slow.py"}"]\n')
    plan = json.dumps({"plan": [{"description": "read", "tool": "read_file", "arguments": {"path": "a.txt"}},
                                {"description": "slow check", "tool": "shell", "arguments": {"command": "slow"}}]})
    answers = script(home, plan, READ_A, '{"tool": "shell", "arguments": {"command": "slow"}}', FINAL)
    proc = start_run(home, "check", "--workspace", str(ws), "--config", cfg, "--scripted", answers)
    marker = lambda: next((home / "runs").glob("*/workspace/marker"), None)  # noqa: E731
    # the line, not only the file: open() makes the file before the write reaches it, and a stop in
    # between would leave it empty (CI saw exactly that once)
    wait_for(proc, lambda: (home / "runs").is_dir() and (m := marker()) is not None and m.read_text() == "ran\n")
    proc.send_signal(signal.SIGINT)  # what Ctrl+C sends
    assert proc.wait(timeout=60) == 130, proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    run = only_run(home)
    assert state_of(run)["pending_call"]["interrupted"] is True

    (run / "workspace" / "fast").write_text("")
    code, out, err = bantam(capsys, "resume", run.name)
    assert code == 0 and out == "done\n", err
    assert "shell(command='slow'): interrupted without a result; run again (stopped by the user)" in err
    assert (run / "workspace" / "marker").read_text() == "ran\nran\n"  # once interrupted, once again


# --- the done event counts what the run used --------------------------------------------------------


def test_the_json_done_event_counts_the_runs_requests_and_context(home, capsys):
    ws = home / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    answers = script(home, PLAN_READ, READ_A, FINAL)
    code, out, err = bantam(capsys, "run", "read a", "--workspace", str(ws), "--scripted", answers, "--json")
    assert code == 0, err
    done = json.loads(out.splitlines()[-1])
    assert done["type"] == "done"
    run = only_run(home)
    answered = [e for e in records(run, "events.jsonl") if e["type"] == "llm_answer"]
    assert done["usage"]["requests"] == len(answered) == 3
    assert done["usage"]["context_tokens"] == answered[-1]["prompt_tokens"] > 0


# --- status shows a run whose goal.md was edited ----------------------------------------------------


def test_status_shows_a_run_whose_goal_was_edited_and_says_so(home, capsys):
    ws = home / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    code, _, err = bantam(capsys, "run", "read a", "--workspace", str(ws), "--scripted",
                          script(home, PLAN_READ, READ_A, FINAL))
    assert code == 0, err
    run = only_run(home)
    (run / "goal.md").write_text("something else entirely\n")
    code, out, err = bantam(capsys, "status", run.name)
    assert code == 0, err
    assert "goal: read a" in out and "status: completed" in out
    assert "goal changed: " in out and "goal.md was edited after the run started" in out
    code, out, err = bantam(capsys, "status", run.name, "--json")
    assert code == 0 and json.loads(out)["goal_changed"] is True, err
    code, _, err = bantam(capsys, "resume", run.name)
    assert code == 2 and "a run keeps its goal" in err  # working on it still refuses


# --- a check that fails off the plan, after every step is done, leads to a repair plan -------------


def dead_end(home: Path) -> tuple[str, str]:
    """A workspace and config: app.py must say `fixed`, as the required check `verify` tests."""
    ws = home / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (home / "verify.py").write_text("import sys\nsys.exit(0 if open('app.py').read() == 'fixed\\n' else 1)\n")
    cfg = config(home, '[tools]\nwrite_paths = ["app.py"]\nrequired_verifications = ["verify"]\n'
                       f'[tools.commands]\nverify = ["{sys.executable}", "{home / "verify.py"}"]\n')
    return str(ws), cfg


PLAN_READ_WRITE = json.dumps({"plan": [
    {"description": "read", "tool": "read_file", "arguments": {"path": "a.txt"}},
    {"description": "write", "tool": "write_file", "arguments": {"path": "app.py"}}]})
VERIFY = '{"tool": "shell", "arguments": {"command": "verify"}}'


def test_an_off_plan_check_failing_after_the_plan_asks_for_a_repair_plan(home, capsys):
    ws, cfg = dead_end(home)
    repair = json.dumps({"plan": [
        {"description": "rewrite", "tool": "write_file", "arguments": {"path": "app.py"}},
        {"description": "check", "tool": "shell", "arguments": {"command": "verify"}}]})
    answers = script(home, PLAN_READ_WRITE, READ_A, "```\nbroken\n```", VERIFY,  # every step done; the check fails
                     repair, "```\nfixed\n```", VERIFY, FINAL)
    code, out, err = bantam(capsys, "run", "make app", "--workspace", ws, "--config", cfg, "--scripted", answers)
    assert code == 0 and out == "done\n", err
    assert "asking the model for repair plan 1" in err
    run = only_run(home)
    assert (run / "workspace" / "app.py").read_text() == "fixed\n"
    assert state_of(run)["counters"]["replans"] == 1


def test_an_off_plan_check_that_keeps_failing_blocks_on_the_replan_budget(home, capsys):
    ws, cfg = dead_end(home)
    limits = config(home, Path(cfg).read_text() + "[limits]\nmax_replans = 1\n", "tight.toml")
    answers = script(home, PLAN_READ_WRITE, READ_A, "```\nbroken\n```", VERIFY,
                     json.dumps({"plan": [{"description": "check", "tool": "shell",
                                           "arguments": {"command": "verify"}}]}), VERIFY, FINAL, FINAL)
    code, _, err = bantam(capsys, "run", "make app", "--workspace", ws, "--config", limits, "--scripted", answers)
    assert code == 1, err
    state = state_of(only_run(home))
    assert (state["status"], state["gate"]) == ("blocked", "max_replans")
    assert state["scripted_used"] < 8  # it stopped on the budget, not on running out of answers
