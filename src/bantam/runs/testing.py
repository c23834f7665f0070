"""A tiny test runner for check commands, with a report the runtime can read (for keep_best).

    from bantam.runs.testing import run_tests
    def test_health(): assert client.get("/health").status_code == 200
    raise SystemExit(run_tests([test_health, ...]))

It prints one line per test, then one machine-readable line

    BANTAM-TEST-REPORT {"passed": 11, "failed": 1, "total": 12, "failures": ["test_x: ..."]}

and returns the exit code (0 only when every test passed). Standard library only, so a check
command in any virtual environment can use it.
"""
from __future__ import annotations

import json
import traceback
from typing import Callable, Iterable

MARK = "BANTAM-TEST-REPORT "


def run_tests(tests: Iterable[Callable[[], object]], out: Callable[[str], None] = print) -> int:
    passed, failures = 0, []
    tests = list(tests)
    for test in tests:
        try:
            test()
        except Exception as e:  # any failure of the code under test is a failed test, not a crash
            reason = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if isinstance(e, AssertionError) and not str(e):
                reason = "assertion failed at " + _where(e)
            failures.append(f"{test.__name__}: {reason}"[:300])
            out(f"FAIL {test.__name__}: {reason}")
        else:
            passed += 1
            out(f"ok   {test.__name__}")
    report = {"passed": passed, "failed": len(failures), "total": len(tests), "failures": failures}
    out(f"{passed}/{len(tests)} passed")
    out(MARK + json.dumps(report))
    return 0 if not failures else 1


def _where(error: BaseException) -> str:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"line {frame.lineno}: {frame.line}"


def find_report(output: str) -> dict | None:
    """The last report line in a command's output, if any."""
    for line in reversed(output.splitlines()):
        if line.startswith(MARK):
            try:
                report = json.loads(line[len(MARK):])
            except ValueError:
                return None
            return report if isinstance(report, dict) and "passed" in report else None
    return None
