"""`bantam batch --queue` and `bantam worker` over a real redis-server (Debian's), with real worker
processes, one of them SIGKILLed mid-task."""
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import base_cfg, children_of, run_bantam, write_cfg
from tests.fakes.task_server import TaskServer
from tests.batch.test_batch import read_results, start_batch, wait_for, write_tasks

redis = pytest.importorskip("redis")
TASKS, GROUP = "bantam:tasks", "bantam-workers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """Debian's redis-server on a free port in a temp dir, without persistence; restartable."""

    def __init__(self, folder: Path):
        self.folder, self.proc, self.port = folder, None, 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, port: int = 0) -> None:
        for _ in range(5):  # another process may take a free port between the probe and the start
            self.port = port or free_port()
            self.proc = subprocess.Popen([shutil.which("redis-server"), "--port", str(self.port), "--bind",
                                          "127.0.0.1", "--dir", str(self.folder), "--save", "",
                                          "--appendonly", "no"], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            client = redis.Redis(port=self.port, socket_connect_timeout=1)
            deadline = time.monotonic() + 30
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    time.sleep(0.05)
            self.stop()
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def redis_server(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server):
    return redis_server.url


def start_worker(home: Path, url: str, *options: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bantam", "worker", url, *options], cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def stop(procs) -> list[str]:
    """Terminate the processes; their stderr."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    return [p.communicate(timeout=60)[1] for p in procs]


@pytest.mark.parametrize("isolate", [("--isolate", "session"), ("--isolate", "process"),
                                     ("--concurrency", "2", "--processes", "2")])
def test_three_workers_one_killed_mid_task_every_task_one_result(home, redis_url, isolate):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with TaskServer(latency=0.5) as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": i, "task": f"t{i} go"} for i in range(12)])
        server.stall(answers_only=True)  # every task waits at its last step until the kill
        workers = [start_worker(home, redis_url, "--idle-timeout", "3", *isolate) for _ in range(3)]
        batch = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--queue", redis_url)
        try:
            victim = workers[0]
            name = f"{socket.gethostname()}-{victim.pid}-0"

            def victim_busy():
                try:
                    pending = client.xpending_range(TASKS, GROUP, "-", "+", 100)
                except redis.ResponseError:  # no group yet: nobody has started
                    return None
                for entry in pending:
                    if entry["consumer"] == name:
                        return entry["message_id"]
            message_id = wait_for(victim_busy, what="the first worker to take a task")
            [(_, fields)] = client.xrange(TASKS, message_id, message_id)
            lost = json.loads(fields["task"])["id"]
            # its command's step is on disk once its request for the final answer is held
            wait_for(lambda: f"t{lost}" in server.waiting, what="the first worker's task at its last step")
            agents = children_of(victim.pid)  # agent processes with --isolate process or --processes
            spawned = [pid for pid in agents if b"bantam.batch" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            assert len(spawned) == (0 if "session" in isolate else 1 if "process" in isolate else 2)
            victim.kill()
            wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in agents),
                     what="the dead worker's agents to stop")  # they die with it
            server.release()
            out, err = batch.communicate(timeout=240)
            assert batch.returncode == 0, err
        finally:
            stop([w for w in workers if w is not victim] + [victim])
            if batch.poll() is None:
                batch.kill()
    results = read_results(home / "results.jsonl")
    assert sorted(r["id"] for r in results) == list(range(12))  # exactly one each
    assert all(r["status"] == "success" for r in results)
    [rerun] = [r for r in results if r["id"] == lost]
    assert rerun["worker"].startswith(socket.gethostname()) and rerun["worker"] != name  # taken over
    assert (home / "ran.txt").read_text().split().count(f"t{lost}") == 1  # resumed from its thread
    assert not client.exists(TASKS) or client.xlen(TASKS) == 0  # acknowledged and deleted
    assert not [k for k in client.keys("bantam:results:*") if not k.endswith(":done")]


def test_a_running_task_stays_with_its_worker_past_the_idle_timeout(home, redis_url):
    # the worker claims its running tasks again every third of --idle-timeout: a second worker,
    # which takes over any task idle that long, must not take a task that is only slow
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": i, "task": f"t{i} go"} for i in range(2)])
        server.stall(answers_only=True)  # both tasks wait at their last step
        first = start_worker(home, redis_url, "--concurrency", "2", "--idle-timeout", "1.5")
        batch = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--queue", redis_url)
        second = None
        try:
            wait_for(lambda: server.waiting >= {"t0", "t1"}, what="both tasks at their last step")
            second = start_worker(home, redis_url, "--idle-timeout", "1.5")
            # a negative needs a window: four idle timeouts, in which the second worker scans the
            # pending list many times (a slow machine only makes the check weaker, never false)
            end = time.monotonic() + 6
            while time.monotonic() < end:
                entries = client.xpending_range(TASKS, GROUP, "-", "+", 10)
                assert len(entries) == 2 and all(e["times_delivered"] == 1 for e in entries), entries
                time.sleep(0.2)
            server.release()
            out, err = batch.communicate(timeout=120)
            assert batch.returncode == 0, err
        finally:
            stop([first] + ([second] if second else []))
            if batch.poll() is None:
                batch.kill()
    results = read_results(home / "results.jsonl")
    assert sorted(r["id"] for r in results) == [0, 1]
    assert {r["worker"].rsplit("-", 1)[0] for r in results} == {f"{socket.gethostname()}-{first.pid}"}
    assert (home / "ran.txt").read_text().split().count("t0") == 1


def test_a_worker_serves_single_requests_and_records_a_task_once(home, redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        worker = start_worker(home, redis_url, "--workers", "2")
        try:
            client.xadd(TASKS, {"task": "hello from a service", "reply_to": "svc:replies"})
            # the same task id sent twice (a retried send): both deliveries finish, one reply counts
            for _ in range(2):
                client.xadd(TASKS, {"task": json.dumps({"id": "x1", "task": "twice please"}),
                                    "reply_to": "svc:replies"})
            client.xadd(TASKS, {"task": json.dumps({"id": "bad", "task": 5}), "reply_to": "svc:replies"})
            wait_for(lambda: client.xlen(TASKS) == 0, timeout=120, what="every task acknowledged")
        finally:
            stop([worker])
    replies = [json.loads(f["result"]) for _, f in client.xrange("svc:replies")]
    by_id = {}
    for r in replies:
        by_id.setdefault(str(r["id"]), []).append(r)
    assert len(by_id["x1"]) == 1 and by_id["x1"][0]["output"] == "done twice"
    assert by_id["bad"][0]["status"] == "failure" and "'task' must be a non-empty string" in by_id["bad"][0]["error"]
    [single] = [r for r in replies if r["output"] == "done hello"]
    assert single["status"] == "success"
    assert len(replies) == 3


def test_a_worker_above_the_clients_default_pool_answers_every_task_at_once(home, redis_url):
    # redis-py's pool holds 100 connections by default; 120 consumers blocked in XREADGROUP,
    # and their leases, need more: short of them, a finished task's answer failed and the task
    # waited out the idle timeout (600 s here, so a lost answer fails this test by its deadline)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        worker = start_worker(home, redis_url, "--concurrency", "120", "--idle-timeout", "600")
        try:
            # every consumer on a connection of its own, blocked in XREADGROUP (and this client)
            wait_for(lambda: client.info("clients")["connected_clients"] >= 121, timeout=120,
                     what="all 120 consumers reading")
            for i in range(150):
                client.xadd(TASKS, {"task": json.dumps({"id": f"t{i}", "task": f"t{i} go"}), "reply_to": "svc:many"})
            wait_for(lambda: client.xlen("svc:many") == 150, timeout=300, what="every task answered")
        finally:
            [err] = stop([worker])
    assert "Too many connections" not in err and "again in" not in err
    assert client.xlen(TASKS) == 0


def test_bad_queue_url_and_unreachable_redis_are_one_line(home):
    r = run_bantam("worker", "http://127.0.0.1:1/0", cwd=home)
    assert r.returncode == 2 and r.stderr.startswith("bantam: queue URL") and "Traceback" not in r.stderr
    r = run_bantam("worker", f"redis://127.0.0.1:{free_port()}/0", cwd=home)
    assert r.returncode == 1 and r.stderr.startswith("bantam: cannot use Redis at") and "Traceback" not in r.stderr


def test_a_worker_outlives_a_redis_restart(home, redis_server):
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        worker = start_worker(home, redis_server.url)
        log = ""
        try:
            client = redis.Redis.from_url(redis_server.url, decode_responses=True)
            wait_for(lambda: client.exists(TASKS), what="the worker's group")
            redis_server.stop()  # no persistence: the stream and the group are gone
            redis_server.start(redis_server.port)
            wait_for(lambda: client.exists(TASKS), timeout=60, what="the worker to recreate its group")
            client.xadd(TASKS, {"task": "after the restart", "reply_to": "svc:replies"})
            wait_for(lambda: client.exists("svc:replies"), timeout=60, what="the reply")
        finally:
            [log] = stop([worker])
    [(_, fields)] = client.xrange("svc:replies")
    assert json.loads(fields["result"])["output"] == "done after"
    assert "Redis: " in log and "; again in 1 s" in log  # it said so, and waited


def test_a_task_that_keeps_killing_workers_is_failed_not_retried(home, redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.xgroup_create(TASKS, GROUP, id="0", mkstream=True)
    message_id = client.xadd(TASKS, {"task": json.dumps({"id": "poison", "task": "never runs"}),
                                     "reply_to": "svc:replies"})
    client.xreadgroup(GROUP, "ghost", {TASKS: ">"})  # taken by a worker that then died ...
    client.xclaim(TASKS, GROUP, "ghost", 0, [message_id], retrycount=5, justid=True)  # ... five times
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        worker = start_worker(home, redis_url, "--idle-timeout", "1")
        try:
            wait_for(lambda: client.exists("svc:replies"), timeout=60, what="the reply")
        finally:
            stop([worker])
        assert not server.chat_requests()
    [(_, fields)] = client.xrange("svc:replies")
    result = json.loads(fields["result"])
    assert result["id"] == "poison" and result["status"] == "failure"
    assert result["error"].startswith("given up after 5 deliveries")
    assert client.xpending(TASKS, GROUP)["pending"] == 0


def test_a_batch_rides_through_a_redis_restart_and_every_task_gets_one_result(home, redis_server):
    """Redis restarts empty (no persistence) while a task runs and the others wait in the queue:
    the batch waits for it, enqueues again what was lost, and finishes; the worker goes on."""
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": i, "task": f"t{i} go"} for i in range(3)])
        server.stall(answers_only=True)  # the first task waits at its last step
        worker = start_worker(home, redis_server.url)
        batch = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--queue", redis_server.url)
        try:
            wait_for(lambda: server.waiting, what="a task at its last step")
            redis_server.stop()
            redis_server.start(redis_server.port)
            server.release()
            out, err = batch.communicate(timeout=240)
            assert batch.returncode == 0, err
        finally:
            [log] = stop([worker])
            if batch.poll() is None:
                batch.kill()
    results = read_results(home / "results.jsonl")
    assert sorted(r["id"] for r in results) == [0, 1, 2]  # exactly one each
    assert all(r["status"] == "success" for r in results), results
    assert f"bantam batch: Redis at {redis_server.url} is back" in err, err
    assert "Traceback" not in err + log


def test_redis_away_past_the_reconnect_timeout_is_one_line_and_a_rerun_goes_on(home, redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", ["one go", "two go"])
        batch = start_batch(home, "tasks.jsonl", "-o", "results.jsonl", "--queue", redis_server.url,
                            "--reconnect-timeout", "2")
        wait_for(lambda: client.exists(TASKS) and client.xlen(TASKS) == 2, what="the tasks enqueued")
        redis_server.stop()  # no worker yet: the batch is waiting for results
        out, err = batch.communicate(timeout=60)
        assert batch.returncode == 1 and "Traceback" not in err
        [waiting, last] = err.splitlines()  # one line when Redis went, one when the batch gave up
        assert waiting.startswith(f"bantam batch: Redis at {redis_server.url}: ")
        assert waiting.endswith("; waiting up to 2 s for it to come back")
        assert last.startswith(f"bantam: Redis at {redis_server.url} has been away for over 2 s (")
        assert last.endswith("the same command collects the rest once Redis is back")
        redis_server.start(redis_server.port)  # empty: the queue is gone, so the rerun enqueues again
        worker = start_worker(home, redis_server.url)
        try:
            r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--queue", redis_server.url,
                           cwd=home, timeout=120)
        finally:
            stop([worker])
    assert r.returncode == 0, r.stderr
    assert sorted(x["id"] for x in read_results(home / "results.jsonl")) == [1, 2]
    r = run_bantam("batch", "tasks.jsonl", "-o", "x.jsonl", "--queue", redis_server.url,
                   "--reconnect-timeout", "0", cwd=home)
    assert r.returncode == 2 and r.stderr == "bantam: --reconnect-timeout must be above 0, got 0\n"
