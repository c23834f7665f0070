"""The suite's own set-up: tests that share a server run on one pytest-xdist worker.

tests/conftest.py puts the tests of one module- or session-wide fixture (llama.cpp's server, a
browser) in one `xdist_group`, added by a collection hook, so the fixture starts once. With pytest
9.2 and pytest-xdist 3.8 the groups silently did nothing (a test's id no longer follows the field
xdist renames to carry the group) and every worker started every shared server. This runs a
suite of two grouped tests the same way, on the installed pytest and pytest-xdist, and checks.
"""
import re
import subprocess
import sys

CONFTEST = '''
import pytest


@pytest.hookimpl(tryfirst=True)  # as tests/conftest.py adds its groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group("shared"))
'''
TESTS = "".join(f"def test_{i}():\n    pass\n\n\n" for i in range(6))


def test_grouped_tests_run_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_grouped.py").write_text(TESTS)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup",
                        "-v", "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    passed = re.findall(r"\[(gw\d)\] .*?PASSED test_grouped\.py::test_\d", r.stdout)
    assert len(passed) == 6 and len(set(passed)) == 1, r.stdout[-2000:]
