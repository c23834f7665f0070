"""What a batch result's `success` stands on: the task's checks, reported met, or nothing (then
the result says so). A real `bantam batch` process against a real model server on 127.0.0.1."""
import json

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import FakeServer, text_reply


def run_batch(home, answers: list[str], tasks: list[dict], *args: str):
    with FakeServer([text_reply(a) for a in answers]) as server:
        write_cfg(home, **base_cfg(server))
        (home / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
        r = run_bantam("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "1", *args, cwd=home)
    results = {x["id"]: x for x in map(json.loads, (home / "results.jsonl").read_text().splitlines())}
    return r, results


def test_a_garbage_answer_to_a_task_without_checks_says_nothing_was_checked(home):
    r, results = run_batch(home, ["zx%% qq lorem", "ok\nSTATUS: success"],
                           [{"id": "plain", "task": "tidy the notes"},
                            {"id": "held", "task": "fix the build", "checks": ["make passes"]}])
    assert results["plain"]["status"] == "success" and results["plain"]["checked"] is False  # the format stays
    assert "plain success (nothing checked)" in r.stderr, r.stderr
    assert "of which nothing checked" in r.stdout and "1" in r.stdout
    assert results["held"]["status"] == "success" and results["held"]["checked"] is True
    assert results["held"]["unmet_checks"] == []


def test_a_garbage_answer_to_a_task_with_checks_is_not_a_success(home):
    r, results = run_batch(home, ["zx%% qq lorem"], [{"id": 1, "task": "fix it", "checks": ["pytest passes"]}],
                           "--json")
    assert results[1]["status"] == "partial" and results[1]["checked"] is True
    assert results[1]["unmet_checks"] == ["pytest passes"]
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["unchecked_successes"] == 0 and summary["statuses"] == {"partial": 1}
