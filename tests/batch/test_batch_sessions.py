"""A batch's tasks as sessions of one process: each sees only its own folder, one task's flood of
output or failure leaves the others alone, and --json reports progress as data. Real `bantam batch`
processes against a real local model server, real shells and files."""
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.batch.test_batch import agents_alive, read_results, start_batch, write_tasks
from tests.conftest import base_cfg, run_bantam, wait_for, write_cfg
from tests.fakes.openai_server import Response, json_reply, text_reply, tool_reply
from tests.fakes.task_server import TaskServer


class LoudServer(TaskServer):
    """As TaskServer, but the task named `loud` runs a command that writes 64 MB to its output."""

    def next_response(self, body: Any = None) -> Response:
        messages = body["messages"]
        first = next(str(m["content"]) for m in messages if m["role"] == "user").split()[0]
        if first == "loud" and messages[-1]["role"] == "user":
            return tool_reply("shell_exec", {"command": "head -c 64000000 /dev/zero | tr '\\0' y; echo loud >> ran.txt"})
        return super().next_response(body)


class BarrierServer(TaskServer):
    """As TaskServer, but each task's command waits until all `count` tasks' commands have
    started: it ends only if every session runs its command at once."""

    def __init__(self, count: int):
        super().__init__()
        self.count = count

    def next_response(self, body: Any = None) -> Response:
        messages = body["messages"]
        name = next(str(m["content"]) for m in messages if m["role"] == "user").split()[0]
        if messages[-1]["role"] == "user":
            self.go.wait(120)
            return tool_reply("shell_exec", {"command": (
                f"touch at.{name}; n=0; while [ $(ls at.* | wc -l) -lt {self.count} ]; do "
                f"n=$((n+1)); [ $n -gt 2400 ] && exit 3; sleep 0.05; done; echo {name} >> ran.txt")})
        return super().next_response(body)


def test_sessions_wait_for_the_model_and_their_commands_without_a_slot(home):
    # 6 workers, 2 slots (slots.py): a session gives its slot up while it waits, so all six
    # requests are in flight at once (the server holds them until it has all six) and all six
    # commands run at once (each waits for the other five). A wait that kept its slot would let
    # two through and the rest would wait for ever.
    from bantam.batch.agent import SLOTS
    assert SLOTS < 6
    with BarrierServer(6) as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [f"t{i} go" for i in range(6)])
        server.stall()
        proc = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--workers", "6")
        assert wait_for(lambda: len(server.chat_requests()) == 6, timeout=60), len(server.chat_requests())
        server.release()
        _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert sorted((home / "ran.txt").read_text().split()) == [f"t{i}" for i in range(6)]


def test_a_slot_is_free_while_its_holder_is_idle_and_held_once_per_thread():
    from bantam.slots import Slots, idle
    slots = Slots(1)
    a_idle, b_in, a_back = threading.Event(), threading.Event(), threading.Event()
    order: list[str] = []

    def a() -> None:
        with slots.held():
            with slots.held():  # nested (a sub-agent's session): no second slot, no deadlock
                with idle():
                    a_idle.set()
                    assert b_in.wait(60)
                order.append("a back")  # only once b gave the slot back
            a_back.set()

    def b() -> None:
        assert a_idle.wait(60)
        with slots.held():
            b_in.set()
            order.append("b computes")
    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert a_back.is_set() and order == ["b computes", "a back"]
    with idle():  # no slot held: nothing happens
        pass
    with slots.held():  # and the one slot is free again
        pass


@pytest.mark.parametrize("spread", [(), ("--processes", "3")])
def test_tasks_in_two_folders_in_one_process_each_see_only_their_own(home, spread):
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        for name in ("a", "b"):
            (home / name).mkdir()
            (home / name / f"only-in-{name}.txt").write_text(name)
        write_tasks(home / "tasks.jsonl", [{"id": i, "task": f"t{name}{i} go", "cwd": name}
                                           for i, name in enumerate("abababab")])
        r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "8", *spread, cwd=home)
    assert r.returncode == 0, r.stderr
    results = read_results(home / "results.jsonl")
    assert sorted(x["id"] for x in results) == list(range(8)) and all(x["status"] == "success" for x in results)
    # each task's command ran in its own folder, whatever the other sessions of the process did
    assert sorted((home / "a/ran.txt").read_text().split()) == [f"ta{i}" for i in (0, 2, 4, 6)]
    assert sorted((home / "b/ran.txt").read_text().split()) == [f"tb{i}" for i in (1, 3, 5, 7)]
    assert not (home / "ran.txt").exists()


def test_one_tasks_flood_of_output_and_another_failing_leave_the_rest_alone(home):
    with LoudServer() as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": "loud", "task": "loud go"}, {"id": "bad", "task": "fail now"},
                                           *({"id": i, "task": f"t{i} go"} for i in range(6))])
        r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "8", "--json", cwd=home)
    assert r.returncode == 1, r.stderr  # one task failed
    results = {x["id"]: x for x in read_results(home / "results.jsonl")}
    assert all(results[i]["status"] == "success" for i in range(6))
    assert results["loud"]["status"] == "success"  # its output was cut, not kept whole
    assert results["bad"]["status"] == "failure" and "always fails" in results["bad"]["error"]
    assert "loud" in (home / "ran.txt").read_text().split()
    # --json: one line per finished task with the counts, then the summary; nothing else on stdout
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    tasks, summary = lines[:-1], lines[-1]
    assert [x["event"] for x in tasks] == ["task"] * 8 and summary["event"] == "summary"
    assert [x["done"] for x in tasks] == list(range(1, 9)) and tasks[-1]["failed"] == 1
    assert {x["result"]["id"] for x in tasks} == set(results)
    assert all(x["total"] == 8 and x["running"] >= 0 for x in tasks)
    tokens = [x["tokens"] for x in tasks]
    assert tokens == sorted(tokens) and tokens[-1] > 0  # a running total
    assert summary["statuses"] == {"success": 7, "failure": 1} and summary["not_finished"] == 0


def test_isolate_process_runs_the_same_tasks_in_agent_processes(home):
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        (home / "sub").mkdir()
        write_tasks(home / "tasks.jsonl", [{"id": 1, "task": "t1 go"}, {"id": 2, "task": "t2 go", "cwd": "sub"}])
        r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--isolate", "process", cwd=home)
    assert r.returncode == 0, r.stderr
    assert {x["id"]: x["output"] for x in read_results(home / "results.jsonl")} == {1: "done t1", 2: "done t2"}
    assert (home / "ran.txt").read_text().split() == ["t1"] and (home / "sub/ran.txt").read_text().split() == ["t2"]
    logs = sorted(Path(home.parent / "home" / ".bantam").rglob("batch-*.log"))
    assert len(logs) == 2  # each task's traces in its thread's log


class RateLimited(TaskServer):
    """As TaskServer, but the first request of task t0 is refused with 429 and Retry-After; every
    other task's first reply is held until `release`. Records when each request arrived."""

    PAUSE = 4

    def __init__(self) -> None:
        super().__init__()
        self.refused_at: float | None = None
        self.others = threading.Event()
        self.arrivals: list[tuple[float, str]] = []

    def next_response(self, body: Any = None) -> Response:
        messages = body["messages"]
        name = next(str(m["content"]) for m in messages if m["role"] == "user").split()[0]
        with self.lock:
            self.arrivals.append((time.monotonic(), name))
            first_refusal = name == "t0" and self.refused_at is None
            if first_refusal:
                self.refused_at = time.monotonic()
        if first_refusal:
            return json_reply({"error": {"message": "slow down"}}, status=429,
                              headers={"Retry-After": str(self.PAUSE)})
        if name != "t0":
            self.others.wait(120)
        return super().next_response(body)


@pytest.mark.parametrize("spread", [(), ("--processes", "3"), ("--isolate", "process")])
def test_a_429_pauses_every_task_of_the_batch_not_only_the_one_refused(home, spread):
    # one shared backoff per endpoint: once t0's 429 is known to the batch, no other task sends a
    # request before its Retry-After has passed (independent retries would send them at once),
    # whichever of the batch's processes the tasks run in
    with RateLimited() as server:
        write_cfg(home, **{**base_cfg(server), "retry_delays": "0.1,0.1,0.1"})
        write_tasks(home / "tasks.jsonl", [{"id": i, "task": f"t{i} go"} for i in range(6)])
        batch = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--workers", "6", *spread)
        try:
            logs = home.parent / "home" / ".bantam"
            wait_for(lambda: any("429" in p.read_text() for p in logs.rglob("batch-*.log")),
                     "the refused task to see its 429")
            if spread:  # the tasks are spread over agent processes: 3, or one each
                assert len(agents_alive(home)) == (3 if "--processes" in spread else 6)
            released = time.monotonic()
            server.others.set()  # the other tasks get their tool calls now, and ask again after them
            out, err = batch.communicate(timeout=120)
        finally:
            if batch.poll() is None:
                batch.kill()
    assert batch.returncode == 0, err
    assert all(r["status"] == "success" for r in read_results(home / "results.jsonl"))
    later = [(t, name) for t, name in server.arrivals if t > released and name != "t0"]
    assert len(later) >= 5  # each other task's second request came after the release
    assert server.refused_at is not None
    early = [(round(t - server.refused_at, 2), name) for t, name in later if t < server.refused_at + server.PAUSE]
    assert not early, early


def test_rate_limits_are_shared_out_among_agent_processes_and_refused_when_they_cannot_be(home):
    from bantam.batch.agent import layout, share
    assert layout("session", 256, 1) == (0, 0)  # all in this process
    assert layout("session", 256, 2) == (128, 2) and layout("session", 5, 4) == (2, 3)
    assert layout("process", 4, 1) == (1, 4)
    for rate, agents in ((60, 4), (61, 4), (7, 3), (5, 5)):
        parts = [share(rate, agents, place) for place in range(agents)]
        assert sum(parts) == rate and max(parts) - min(parts) <= 1 and min(parts) >= 1
    assert share(0, 4, 2) == 0  # no limit stays none
    write_tasks(home / "tasks.jsonl", ["t0 go"])
    for args, message in ((("--isolate", "process", "--workers", "8", "--rpm", "5"), "--rpm 5 is shared among 8"),
                          (("--processes", "4", "--workers", "8", "--tpm", "3"), "--tpm 3 is shared among 4"),
                          (("--processes", "2", "--isolate", "process"), "use one or the other"),
                          (("--processes", "0",), "--processes must be at least 1")):
        r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", *args, cwd=home)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert not (home / "results.jsonl").exists()  # nothing ran, nothing was made


def test_a_batch_whose_process_computed_all_along_suggests_processes_and_others_do_not(home, server):
    from bantam.batch import pace_hint
    hint = pace_hint(cpu=27.0, wall=28.5, cores=2)
    assert "kept 95% of a core busy over the batch's 28 s" in hint and "--processes P" in hint and "2 cores" in hint
    assert pace_hint(cpu=27.0, wall=28.5, cores=1) == ""  # nowhere to spread to
    assert pace_hint(cpu=9.0, wall=28.5, cores=8) == ""   # the model set the pace
    assert pace_hint(cpu=4.9, wall=5.0, cores=8) == ""    # too short: its start is most of its CPU
    # an ordinary batch says nothing of it
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("done"), text_reply("done"))
    write_tasks(home / "tasks.jsonl", ["t0 go", "t1 go"])
    r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
    assert r.returncode == 0 and "--processes" not in r.stderr, r.stderr


def test_pace_counts_requests_and_tokens_per_minute_and_holds(tmp_path):
    from bantam.providers.pace import Pace
    now = [100.0]
    pace = Pace(clock=lambda: now[0])
    pace.limit(rpm=2, tpm=1000)
    pace.wait()
    assert pace._delay() == 30.0  # spread over the minute: one request every 60/2 s, not two at once
    now[0] += 30
    pace.wait()
    assert pace._delay() == 30.0  # at 130: a third request waits for the first to leave the minute
    now[0] += 20
    assert pace._delay() == 10.0
    pace.spent(1000)  # at 150: the minute's tokens are spent, until 210
    assert pace._delay() == 60.0
    now[0] += 50  # 200: both requests have left the minute, the tokens have not
    assert pace._delay() == 10.0
    pace.limit()
    assert pace._delay() <= 0
    pace.hold(5)
    assert pace._delay() == 5.0


def test_a_release_ends_the_waits_under_way_and_not_later_ones():
    """A batch that stops releases its tasks' rate-limit waits; a session or batch after it in
    the same process is paced again (a flag left set let every later request through)."""
    import threading

    from bantam.providers import pace
    from tests.conftest import wait_for
    waiting = pace.Pace()
    waiting.limit(rpm=1)
    waiting.wait()  # the minute's one request: the next waits 60 s
    thread = threading.Thread(target=waiting.wait, daemon=True)
    thread.start()
    wait_for(lambda: (pace.release_all(), not thread.is_alive())[1], "the wait to end on release")
    now = [100.0]
    later = pace.Pace(clock=lambda: now[0])
    later.limit(rpm=2)
    later.wait()
    assert later._delay() == 30.0  # counted and spread, not let through


def test_results_are_written_by_one_writer_in_group_commits_and_adding_one_never_waits_for_the_disk(
        tmp_path, monkeypatch):
    # 64 sessions whose requests end together all add a result at once. Each used to wait for its
    # fsync, in turn under one lock (0.7 s a task, the median, at 256 at once); now the writer
    # thread appends what arrived during one fsync in the next single append. The first fsync is
    # held until every add has returned, which could not happen if add waited for the disk; each
    # result is told (on_disk) only once it is in the file.
    import os as os_module

    from bantam import fsutil
    from bantam.batch.tasks import ResultsFile
    monkeypatch.setenv("BANTAM_HOME", str(tmp_path / "bantam-home"))
    results = ResultsFile(tmp_path / "results.jsonl")
    synced, real_fsync, returned = [], os_module.fsync, threading.Event()

    def fsync(fd: int) -> None:
        if not synced:
            assert returned.wait(60), "an add waited for the disk"
        synced.append(fd)
        real_fsync(fd)
    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    told: list[str] = []

    def on_disk(record: dict) -> None:
        assert f'"id": "{record["id"]}"' in (tmp_path / "results.jsonl").read_text()
        told.append(record["id"])
    written: list[bool] = []
    threads = [threading.Thread(target=lambda i=i: written.append(results.add({"id": str(i), "answer": "a"}, on_disk)))
               for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    returned.set()
    results.flush()
    assert written == [True] * 64 and 1 <= len(synced) <= 2, (written.count(True), len(synced))
    assert sorted(told, key=int) == [str(i) for i in range(64)]
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(int(r["id"]) for r in lines) == list(range(64))
    assert not results.add({"id": "7", "answer": "again"})  # a task's second result is not written
    results.flush()
    assert sorted(ResultsFile(tmp_path / "results.jsonl").done) == sorted(str(i) for i in range(64))


def test_a_task_whose_log_a_leftover_agent_holds_waits_for_it_and_runs_once(home):
    # a killed batch's agent may still be stopping when the rerun starts the same task: the task
    # holds its log locked while it runs, so the rerun's session waits instead of writing beside it
    import fcntl
    import os

    from bantam.batch.agent import Sessions, thread_file, thread_id
    from bantam.batch.tasks import parse_task
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        task = parse_task("t1 go", 1, "tasks.jsonl")
        runner = Sessions(str(home), {}, home)
        log = thread_file(thread_id("batch-ns", task.key), ".log")
        log.parent.mkdir(parents=True, exist_ok=True)
        leftover = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        fcntl.flock(leftover, fcntl.LOCK_EX)
        records: list = []
        worker = threading.Thread(target=lambda: records.append(runner.run(task, "batch-ns")))
        worker.start()
        try:
            worker.join(2)  # ample time to send its first request, were it not waiting
            assert worker.is_alive() and not server.chat_requests()
        finally:
            os.close(leftover)  # the leftover agent ends: its lock goes with it
        worker.join(60)
    assert not worker.is_alive() and records[0]["status"] == "success" and records[0]["output"] == "done t1"
    assert (home / "ran.txt").read_text().split() == ["t1"]
    assert len(server.chat_requests()) == 2  # its two steps, once
