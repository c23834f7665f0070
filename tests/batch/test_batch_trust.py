"""A hostile queue or tasks file cannot pick a task's folder or stop the workers (issue 28): a task's
`cwd` stays inside the worker's or batch's root, and a malformed message or line gets one `failure`
result and is acknowledged while the same worker goes on. Real redis-server, real worker and agent
processes, real bubblewrap, real folders and symlinks, a real fake model server."""
import json
import socket
from pathlib import Path

import pytest

from tests.batch.test_batch import read_results, write_tasks
from tests.batch.test_batch_redis import GROUP, TASKS, redis_server, redis_url, start_worker, stop  # noqa: F401
from tests.conftest import base_cfg, run_bantam, wait_for, write_cfg
from tests.fakes.task_server import TaskServer

DEEP = b"[" * 100_000 + b"]" * 100_000  # JSON nested far past Python's recursion limit


def asked(server: TaskServer) -> set[str]:
    """The tasks the model was asked about, by their first word."""
    return {next(m["content"] for m in r.body["messages"] if m["role"] == "user").split()[0]
            for r in server.chat_requests()}


@pytest.fixture
def outside(home):
    """A folder beside the root (the test's working folder), and a symlink inside the root to it."""
    folder = home.parent / "outside"
    folder.mkdir()
    (home / "link").symlink_to(folder)
    (home / "sub").mkdir()
    return folder


ESCAPES = {"slash": "/", "abs": None, "dotdot": "../outside", "link": "link", "linkdot": "link/."}


def escaping_tasks(outside: Path) -> list[dict]:
    return [{"id": name, "task": f"{name} go", "cwd": cwd or str(outside)} for name, cwd in ESCAPES.items()]


def assert_confined(results: dict, server: TaskServer, outside: Path) -> None:
    for name in ESCAPES:
        assert results[name]["status"] == "failure", results[name]
        assert "is outside" in results[name]["error"] and "the folder tasks may use" in results[name]["error"]
    assert not asked(server) & set(ESCAPES)  # nothing ran: the model was never asked
    assert not (outside / "ran.txt").exists()


def test_a_queued_task_cannot_leave_the_workers_root(home, redis_url, outside):  # noqa: F811 (a fixture)
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        worker = start_worker(home, redis_url)
        try:
            for task in escaping_tasks(outside) + [{"id": "inside", "task": "inside go", "cwd": "sub"}]:
                client.xadd(TASKS, {"task": json.dumps(task), "reply_to": "svc:replies"})
            wait_for(lambda: client.xlen("svc:replies") == len(ESCAPES) + 1, timeout=120, what="every reply")
        finally:
            stop([worker])
        results = {r["id"]: r for r in (json.loads(f["result"]) for _, f in client.xrange("svc:replies"))}
        assert_confined(results, server, outside)
        assert asked(server) == {"inside"}
    assert results["inside"]["status"] == "success", results["inside"]
    assert (home / "sub/ran.txt").read_text() == "inside\n"  # a folder inside the root works
    assert client.xpending(TASKS, GROUP)["pending"] == 0


def test_a_worker_answers_malformed_messages_and_goes_on(home, redis_url):  # noqa: F811 (a fixture)
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(redis_url)  # bytes: the messages are what a hostile sender writes
    bad = {
        "utf8": {b"task": b'{"id": "u", "task": "caf\xe9 \xff go"}', b"reply_to": b"svc:replies"},
        "other-field": {b"task": b"fine go", b"note": b"\xc3\x28", b"reply_to": b"svc:replies"},
        "deep": {b"task": DEEP, b"reply_to": b"svc:replies"},
        "big": {b"task": b"x" * (2 << 20), b"reply_to": b"svc:replies"},
        "not-a-task": {b"task": b"[1, 2]", b"reply_to": b"svc:replies"},
    }
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        worker = start_worker(home, redis_url)
        try:
            ids = {client.xadd(TASKS, fields).decode(): name for name, fields in bad.items()}
            client.xadd(TASKS, {"task": json.dumps({"id": "after", "task": "after go"}), "reply_to": "svc:replies"})
            wait_for(lambda: client.xlen("svc:replies") == len(bad) + 1, timeout=120, what="every reply")
            assert worker.poll() is None  # alive
        finally:
            [log] = stop([worker])
        assert asked(server) == {"after"}  # no malformed message reached the model
    results = {str(r["id"]): r for r in (json.loads(f[b"result"]) for _, f in client.xrange("svc:replies"))}
    errors = {ids[key]: r["error"] for key, r in results.items() if key in ids}
    assert all(results[key]["status"] == "failure" for key in ids)
    assert "not valid UTF-8" in errors["utf8"] and "field b'note' is not valid UTF-8" in errors["other-field"]
    assert "nested too deeply" in errors["deep"] and "over 1048576 bytes" in errors["big"]
    assert "a task is a JSON object or a string, got list" in errors["not-a-task"]
    # the task after them was done by the same worker process, and nothing is left to redeliver
    assert results["after"]["status"] == "success", results["after"]
    assert results["after"]["worker"] == f"{socket.gethostname()}-{worker.pid}-0"
    assert client.xpending(TASKS, GROUP)["pending"] == 0 and client.xlen(TASKS) == 0
    assert "Traceback" not in log


def test_a_tasks_file_keeps_its_tasks_in_its_folder_and_bad_lines_fail_alone(home, outside):
    with TaskServer() as server:
        write_cfg(home, **base_cfg(server))
        lines = [b'{"id": "u", "task": "caf\xe9 go"}', DEEP, *map(str.encode, map(json.dumps, escaping_tasks(outside))),
                 b'{"id": "good", "task": "good go"}']
        (home / "tasks.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home, timeout=120)
        assert r.returncode == 1, r.stderr  # some tasks failed
        assert "Traceback" not in r.stderr
        results = {r["id"]: r for r in read_results(home / "results.jsonl")}
        assert_confined(results, server, outside)
        assert results[1]["status"] == "failure" and "tasks.jsonl:1: not valid UTF-8" in results[1]["error"]
        assert results[2]["status"] == "failure" and "tasks.jsonl:2: JSON nested too deeply" in results[2]["error"]
        assert results["good"]["status"] == "success" and (home / "ran.txt").read_text() == "good\n"
        assert len(results) == len(lines)  # exactly one result per line
        assert asked(server) == {"good"}

        # the user may allow more with --root; the tasks file's folder is only the default
        write_tasks(home / "wider.jsonl", [{"id": "abs", "task": "wide go", "cwd": str(outside)}])
        r = run_bantam("batch", "wider.jsonl", "-o", "wider-results.jsonl", "--root", str(home.parent),
                       cwd=home, timeout=120)
        assert r.returncode == 0, r.stderr
        assert (outside / "ran.txt").read_text() == "wide\n"
