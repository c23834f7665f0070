"""A batch run again: nothing to do is said as such (no rate over no time), the failed tasks can
be run again alone, the summary prices the tokens when the endpoint lists prices, --rpm spreads
the requests over the minute, and the documentation's example runs in a fresh folder.
bantam's real command line (cli.main, in this process) against a real local model server, real
shells and files."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.batch.test_batch import read_results, write_tasks
from tests.conftest import ROOT, base_cfg, bantam_here, write_cfg
from tests.fakes.openai_server import Response, json_reply
from tests.fakes.task_server import TaskServer

PRICES = {"prompt": "0.000001", "completion": "0.000002"}  # dollars a token, OpenRouter's form


class FlakyServer(TaskServer):
    """TaskServer, where a task named `flaky` fails while `broken`; each request's time is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = True
        self.times: list[float] = []

    def next_response(self, body: Any = None) -> Response:
        self.times.append(time.monotonic())
        first = next(str(m["content"]) for m in body["messages"] if m["role"] == "user").split()[0]
        if first == "flaky" and self.broken:
            return json_reply({"error": {"message": "fake server: flaky is broken today"}}, status=400)
        return super().next_response(body)


def summary_of(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_finished_batch_run_again_does_nothing_and_says_so(home):
    with FlakyServer() as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": "a", "task": "alpha"}, {"id": "f", "task": "flaky one"}])
        first = bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
        assert first.returncode == 1, first.stderr
        sent = len(server.requests)
        again = bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
        assert again.returncode == 1 and len(server.requests) == sent  # still a failure on record
        assert ("bantam batch: nothing to do: all 2 tasks have a result in results.jsonl; 1 did not "
                "succeed: --retry-failed runs them again") in again.stderr
        rate = re.search(r"tasks/s \(this run\)\s*│\s*(\S+)", again.stdout)
        assert rate and rate.group(1) == "-", again.stdout
        as_json = summary_of(bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", "--json", cwd=home).stdout)
        assert as_json["finished_now"] == 0 and as_json["tasks"] == 2


def test_retry_failed_runs_only_the_failed_tasks_in_fresh_threads(home):
    with FlakyServer() as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": "a", "task": "alpha"}, {"id": "f", "task": "flaky one"},
                                           {"id": "b", "task": "beta"}])
        assert bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home).returncode == 1
        failed = {r["id"]: r for r in read_results(home / "results.jsonl")}["f"]
        server.broken = False
        r = bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", "--retry-failed", "--json", cwd=home)
        assert r.returncode == 0, r.stderr
        lines = read_results(home / "results.jsonl")
        assert len(lines) == 4 and sorted(x["id"] for x in lines[:3]) == ["a", "b", "f"]  # appended
        assert lines[-1]["id"] == "f" and lines[-1]["status"] == "success" and lines[-1]["thread"] != failed["thread"]
        assert sorted((home / "ran.txt").read_text().split()) == ["alpha", "beta", "flaky"]  # a and b ran once
        assert summary_of(r.stdout)["statuses"] == {"success": 3} and summary_of(r.stdout)["finished_now"] == 1
        again = bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home)
        assert again.returncode == 0 and "nothing to do: all 3 tasks have a result" in again.stderr
        assert "did not succeed" not in again.stderr


def test_the_summary_prices_the_tokens_the_endpoint_lists_prices_for(home):
    with FlakyServer() as server:
        server.models = [{"id": "test-model", "object": "model", "pricing": PRICES}]
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": "a", "task": "alpha"}, {"id": "b", "task": "beta"}])
        r = bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", "--json", cwd=home)
        assert r.returncode == 0, r.stderr
        results = read_results(home / "results.jsonl")
        prompt = sum(x["usage"]["prompt_tokens"] for x in results)
        completion = sum(x["usage"]["completion_tokens"] for x in results)
        assert prompt and summary_of(r.stdout)["cost_usd"] == round(prompt * 1e-6 + completion * 2e-6, 6)
        table = bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", cwd=home).stdout
        assert re.search(r"cost\s*│\s*\$0\.0\d{3}", table), table
    with FlakyServer() as server:  # an endpoint that lists no prices: no cost claimed
        write_cfg(home, **base_cfg(server))
        r = bantam_here("batch", "tasks.jsonl", "-o", "unpriced.jsonl", "--json", cwd=home)
        assert r.returncode == 0 and summary_of(r.stdout)["cost_usd"] is None, r.stderr


@pytest.mark.parametrize("after_another", [False, True])
def test_rpm_spreads_the_requests_over_the_minute(home, after_another):
    """--rpm holds in every batch of a process: a batch that ended before (it releases its waits
    as it stops) used to leave the next one's requests unpaced."""
    if after_another:
        with FlakyServer() as server:
            write_cfg(home, **base_cfg(server))
            write_tasks(home / "first.jsonl", [{"id": 0, "task": "task0"}])
            assert bantam_here("batch", "first.jsonl", "-o", "first-results.jsonl", cwd=home).returncode == 0
    with FlakyServer() as server:
        write_cfg(home, **base_cfg(server))
        write_tasks(home / "tasks.jsonl", [{"id": n, "task": f"task{n}"} for n in range(3)])
        r = bantam_here("batch", "tasks.jsonl", "-o", "results.jsonl", "--workers", "3", "--rpm", "120",
                       cwd=home)
        assert r.returncode == 0, r.stderr
        gaps = [b - a for a, b in zip(server.times, server.times[1:], strict=False)]
        assert len(server.times) == 6 and min(gaps) >= 0.45, gaps  # one every 60/120 s, not three at once


def test_the_documented_example_runs_in_a_fresh_folder(home, tmp_path):
    """docs/batch.md's first example, as a user would paste it into an empty folder."""
    doc = (ROOT / "docs" / "batch.md").read_text()
    script = next(block for block in re.findall(r"```sh\n(.*?)```", doc, re.S) if "cat > tasks.jsonl" in block)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with TaskServer() as server:
        write_cfg(fresh, **base_cfg(server))
        bantam = f"{sys.executable} -m bantam"
        r = subprocess.run(["bash", "-euc", script.replace("bantam batch", f"{bantam} batch")], cwd=fresh,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        results = read_results(fresh / "results.jsonl")
        assert results and all(x["status"] == "success" for x in results), results
