"""`bantam batch` run locally: isolated agents, one result per task, resumable after SIGKILL and
Ctrl+C; real bantam processes against a real local model server, real shells and files."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for, base_cfg, process_gone, run_bantam, write_cfg
from tests.fakes.task_server import TaskServer


@pytest.fixture
def tasks_server():
    with TaskServer() as s:
        yield s


def write_tasks(path: Path, lines: list) -> Path:
    """Objects as JSON; strings as they are (a raw line, or "" for a blank one)."""
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def read_results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # every line whole


def start_batch(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bantam", "batch", *args], cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)




def agents_alive(home: Path) -> list[int]:
    """Pids of batch agent processes started under this test's HOME."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes()
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"-m\0bantam.batch\0" in cmd and f"HOME={home.parent / 'home'}".encode() in env.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def test_each_task_runs_once_as_its_own_agent(home, tasks_server):
    write_cfg(home, **base_cfg(tasks_server))
    (home / "sub").mkdir()
    write_tasks(home / "tasks.jsonl", [
        {"id": "a", "task": "alpha: list the files"},
        '"beta as a plain string line"',
        {"id": 7, "task": "gamma in a subfolder", "cwd": "sub"},
        {"id": "d", "task": "delta with checks", "checks": ["the file exists"]},
        "",
        {"id": "e", "task": "fail always", "model": "other-model"},
    ])
    r = run_bantam("batch", "tasks.jsonl", "-o", "out/results.jsonl", "--workers", "3", cwd=home)
    assert r.returncode == 1, r.stderr  # one task failed with an error
    results = {x["id"]: x for x in read_results(home / "out/results.jsonl")}
    assert sorted(map(str, results)) == ["2", "7", "a", "d", "e"]
    for key, name in (("a", "alpha:"), (2, "beta"), (7, "gamma"), ("d", "delta")):
        assert results[key]["status"] == "success", results[key]
        assert results[key]["output"] == f"done {name}"
        assert results[key]["steps"] == 2 and results[key]["error"] is None
        assert results[key]["usage"]["prompt_tokens"] > 0
    assert results["e"]["status"] == "failure" and "always fails" in results["e"]["error"]
    assert sorted((home / "ran.txt").read_text().split()) == ["alpha:", "beta", "delta"]
    assert (home / "sub/ran.txt").read_text().split() == ["gamma"]  # its own working directory
    e_models = {req.body["model"] for req in tasks_server.chat_requests()
                if req.body["messages"][1]["content"].startswith("fail")}
    assert e_models == {"other-model"}
    # the checks reach the model, and the result names the thread holding the whole conversation
    assert any("the file exists" in req.body["messages"][1]["content"] for req in tasks_server.chat_requests())
    thread = home.parent / "home/.bantam/threads" / f"{results['a']['thread']}.jsonl"
    assert [m["role"] for m in map(json.loads, thread.read_text().splitlines())] == \
        ["user", "assistant", "tool", "assistant"]
    assert sum(line.startswith("[") for line in r.stderr.splitlines()) == 5  # one per finished task
    assert "batch summary" in r.stdout and "done (success)" in r.stdout

    before = len(tasks_server.chat_requests())
    again = run_bantam("batch", "tasks.jsonl", "-o", "out/results.jsonl", cwd=home)
    assert again.returncode == 1 and len(tasks_server.chat_requests()) == before  # nothing ran again
    assert len(read_results(home / "out/results.jsonl")) == 5


@pytest.mark.parametrize("line, message", [
    ('{"id": 1, "task": "x"', "tasks.jsonl:2: not valid JSON"),
    ('{"id": 1, "task": ""}', "tasks.jsonl:2: 'task' must be a non-empty string"),
    ('{"task": "y", "chekcs": []}', "tasks.jsonl:2: unknown key 'chekcs'"),
])
def test_a_bad_tasks_line_gets_a_failure_result_and_the_rest_runs(home, tasks_server, line, message):
    write_cfg(home, **base_cfg(tasks_server))
    (home / "tasks.jsonl").write_text('{"id": "one", "task": "x"}\n' + line + "\n")
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    results = {x["id"]: x for x in read_results(home / "results.jsonl")}
    assert results["one"]["status"] == "success"
    [bad] = [x for key, x in results.items() if key != "one"]
    assert bad["status"] == "failure" and bad["error"].startswith(message)


def test_a_tasks_file_with_an_id_twice_is_one_line_and_nothing_runs(home, tasks_server):
    write_cfg(home, **base_cfg(tasks_server))
    (home / "tasks.jsonl").write_text('{"id": 1, "task": "x"}\n{"id": 1, "task": "y"}\n')
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
    message = "tasks.jsonl:2: id '1' was already used on line 1"
    assert r.returncode == 2 and r.stderr.startswith(f"bantam: {message}") and r.stderr.count("\n") == 1
    assert not (home / "results.jsonl").exists() and not tasks_server.chat_requests()


def test_a_task_killed_mid_way_resumes_from_its_thread(home, tasks_server):
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", [{"id": 1, "task": "one step then stall"}])
    tasks_server.stall(answers_only=True)
    proc = start_batch(home, "tasks.jsonl", "-o", "results.jsonl")
    # the tool step is done (and saved); the second request waits in the server
    wait_for(lambda: len(tasks_server.chat_requests()) == 2, what="the second request")
    assert (home / "ran.txt").read_text() == "one\n"
    proc.kill()
    proc.wait()
    wait_for(lambda: not agents_alive(home), what="the orphaned agent to stop")  # it dies with the batch
    tasks_server.release()
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
    assert r.returncode == 0, r.stderr
    [result] = read_results(home / "results.jsonl")
    assert result["status"] == "success" and result["steps"] == 2
    assert (home / "ran.txt").read_text() == "one\n"  # the tool step was not run again
    assert tasks_server.chat_requests()[-1].body["messages"][-1]["role"] == "tool"


@pytest.mark.parametrize("signum, spread", [(signal.SIGINT, ()), (signal.SIGTERM, ()),
                                           (signal.SIGTERM, ("--processes", "2"))])
def test_ctrl_c_stops_cleanly_and_says_how_to_resume(home, tasks_server, signum, spread):
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", [f"task{i} go as plain text" for i in range(4)])
    tasks_server.stall()
    proc = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--workers", "2", *spread)
    wait_for(lambda: len(tasks_server.chat_requests()) == 2, what="two tasks in flight")
    if spread:
        assert len(agents_alive(home)) == 2  # one agent process each
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "run the same command again" in err
    assert " ".join(("bantam batch tasks.jsonl -o results.jsonl --workers 2", *spread)) in err
    assert "not finished" in out
    assert not (home / "results.jsonl").exists() or not (home / "results.jsonl").read_text()
    wait_for(lambda: not agents_alive(home), what="the agents to stop")
    tasks_server.release()
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "2", *spread, cwd=home)
    assert r.returncode == 0, r.stderr
    assert sorted(x["id"] for x in read_results(home / "results.jsonl")) == [1, 2, 3, 4]


@pytest.mark.slow
@pytest.mark.parametrize("spread", [(), ("--processes", "2")])
def test_fifty_tasks_killed_at_random_moments_get_exactly_one_result_each(home, tasks_server, spread):
    # 100 replies of 0.3 s over 4 workers: at least 7.5 s of work, so the first three kills (each
    # within 1.2 s of its start) always land before the end
    tasks_server.latency = 0.3
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", [{"id": i, "task": f"t{i} go"} for i in range(50)])
    rng = random.Random(22)
    kills, code = 0, None
    while code is None and kills < 40:
        proc = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--workers", "4", *spread)
        try:
            code = proc.wait(timeout=rng.uniform(0.3, 1.2))  # a random moment, not a wait for an event
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            kills += 1
        proc.stdout.close()
        proc.stderr.close()
    if code is None:  # the last word goes to a run left alone
        code = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "4", *spread, cwd=home,
                          timeout=300).returncode
    assert code == 0
    assert kills >= 3
    ids = [x["id"] for x in read_results(home / "results.jsonl")]
    assert sorted(ids) == list(range(50))  # exactly one each
    assert all(x["status"] == "success" for x in read_results(home / "results.jsonl"))
    wait_for(lambda: not agents_alive(home), what="every agent to stop")


def test_an_agent_process_killed_from_outside_costs_only_its_tasks_in_flight(home, tasks_server):
    # --processes 2: two agents of two sessions each; one is SIGKILLed with its two tasks waiting
    # for the model. Those two are not finished (no result: the rerun finishes them), the batch
    # goes on with a fresh agent in its place, and the rerun adds exactly the missing two.
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", [{"id": i, "task": f"t{i} go"} for i in range(10)])
    tasks_server.stall()
    proc = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--workers", "4", "--processes", "2")
    try:
        wait_for(lambda: len(tasks_server.chat_requests()) == 4, what="four tasks in flight")
        first, second = sorted(agents_alive(home))
        os.kill(first, signal.SIGKILL)
        assert process_gone(first), "the killed agent still runs"  # its /proc entry can go between two reads
        tasks_server.release()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err  # two tasks have no result
    done = sorted(x["id"] for x in read_results(home / "results.jsonl"))
    assert len(done) == 8 and all(x["status"] == "success" for x in read_results(home / "results.jsonl"))
    wait_for(lambda: not agents_alive(home), what="every agent to stop")
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "4", "--processes", "2", cwd=home)
    assert r.returncode == 0, r.stderr
    assert sorted(x["id"] for x in read_results(home / "results.jsonl")) == list(range(10))  # one each


def test_a_terminal_gets_a_progress_bar_and_failures_above_it(home, tasks_server):
    pexpect = pytest.importorskip("pexpect")
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", ["alpha go", "fail here", "gamma go"])
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "batch", "tasks.jsonl", "-o", "r.jsonl"],
                          cwd=str(home), env={**os.environ, "TERM": "xterm"}, encoding="utf-8",
                          dimensions=(30, 100), timeout=120)
    child.expect(pexpect.EOF)
    child.close()
    screen = child.before
    assert child.exitstatus == 1
    assert "3/3" in screen and "━" in screen  # rich's bar, complete
    assert "2 failure 0 steps" in screen and "[1/3]" not in screen  # no plain lines on a terminal
    assert "batch summary" in screen


def test_a_deleted_results_file_starts_the_batch_afresh(home, tasks_server):
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", ["solo go"])
    for run in (1, 2):
        r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
        assert r.returncode == 0, r.stderr
        [result] = read_results(home / "results.jsonl")
        assert result["steps"] == 2  # a fresh thread, not the first run's continued
        (home / "results.jsonl").unlink()
    assert (home / "ran.txt").read_text() == "solo\nsolo\n" and tasks_server.answered["solo"] == 2


def two_tasks_done(home, tasks_server) -> tuple[list[str], Path, dict]:
    """A batch of two finished tasks: its result lines, the threads' folder, the second result."""
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", ["one go", "two go"])
    assert run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home).returncode == 0
    lines = (home / "results.jsonl").read_text().splitlines(keepends=True)
    threads = home.parent / "home/.bantam/threads"
    assert not list(threads.glob("*.result.json"))  # dropped once each result was on record
    return lines, threads, json.loads(lines[1])


def test_a_torn_last_result_line_is_healed_and_its_task_finished(home, tasks_server):
    lines, threads, cut = two_tasks_done(home, tasks_server)
    # the state a kill in the middle of the second append leaves: half a line, the agent's copy kept
    (threads / f"{cut['thread']}.result.json").write_text(lines[1])
    (home / "results.jsonl").write_text(lines[0] + lines[1][:25])
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
    assert r.returncode == 0, r.stderr
    assert sorted(x["id"] for x in read_results(home / "results.jsonl")) == [1, 2]
    # the cut-off task's saved result was reported again; nothing ran a second time
    assert sorted(tasks_server.answered.items()) == [("one", 1), ("two", 1)]


def test_a_torn_saved_result_counts_as_none_and_the_thread_gives_the_answer(home, tasks_server):
    # the saved copy is a plain write (no fsync, no rename): a kill mid-write leaves half of it
    lines, threads, cut = two_tasks_done(home, tasks_server)
    (threads / f"{cut['thread']}.result.json").write_text(lines[1][:40])  # torn
    (home / "results.jsonl").write_text(lines[0])
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
    assert r.returncode == 0, r.stderr
    again = {x["id"]: x for x in read_results(home / "results.jsonl")}
    redone = again[cut["id"]]
    assert sorted(again) == [1, 2] and redone["status"] == cut["status"]
    assert redone["output"] == cut["output"] and redone["steps"] == cut["steps"]
    # the answer came from the thread's last message: no model request, no command ran again
    assert sorted(tasks_server.answered.items()) == [("one", 1), ("two", 1)]
    assert not list(threads.glob("*.result.json"))


def test_a_results_file_that_cannot_be_written_stops_the_batch_in_one_line_and_the_rerun_asks_nothing_again(
        home, tasks_server):
    # Results are written by a thread of their own (the tasks do not wait for the disk). When the
    # file cannot take them (here a folder stands in its place), the batch stops with one line
    # (exit 2); each finished task's result is still saved beside its thread, so the rerun, the
    # file back, reports them without a model request or a command run again.
    write_cfg(home, **base_cfg(tasks_server))
    write_tasks(home / "tasks.jsonl", ["one go", "two go"])
    tasks_server.stall(answers_only=True)
    proc = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--workers", "2")
    wait_for(lambda: tasks_server.waiting == {"one", "two"}, what="both final answers held")
    (home / "results.jsonl").unlink()
    (home / "results.jsonl").mkdir()
    tasks_server.release()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "results.jsonl: cannot write" in err and "Traceback" not in err, err
    (home / "results.jsonl").rmdir()
    (home / "results.jsonl").touch()  # the same file again: the same batch, its threads resumed
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
    assert r.returncode == 0, r.stderr
    assert sorted(x["id"] for x in read_results(home / "results.jsonl")) == [1, 2]
    assert sorted(tasks_server.answered.items()) == [("one", 1), ("two", 1)]
    assert (home / "ran.txt").read_text().count("\n") == 2


def test_one_agent_process_after_another_task_keeps_nothing_of_it(home, tasks_server):
    write_cfg(home, **base_cfg(tasks_server))
    (home / "sub").mkdir()
    write_tasks(home / "tasks.jsonl", [{"id": "g", "task": "gamma elsewhere", "cwd": "sub"},
                                       {"id": "h", "task": "here go"}, {"id": "i", "task": "ice go"}])
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "1", cwd=home)
    assert r.returncode == 0, r.stderr
    assert (home / "sub/ran.txt").read_text() == "gamma\n"
    assert (home / "ran.txt").read_text() == "here\nice\n"  # back in the batch's directory
    threads = home.parent / "home/.bantam/threads"
    for result in read_results(home / "results.jsonl"):
        log = (threads / f"{result['thread']}.log").read_text()
        names = [name for name in ("gamma", "here", "ice") if f"echo {name}" in log]
        assert names == [result["output"].split()[1]]  # each task's traces in its own log only
