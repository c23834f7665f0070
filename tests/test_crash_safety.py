"""SIGKILL at random moments (seeded), then every file loads and resuming finishes the work."""
import os

import pytest

from tests.crash import crash_trials

SEED = int(os.environ.get("BANTAM_CRASH_SEED", "1234"))


def test_a_few_kills(tmp_path):
    survived, problems = crash_trials(10, SEED, tmp_path)
    assert not problems, problems
    assert survived == 10


@pytest.mark.slow
def test_two_hundred_kills(tmp_path):
    survived, problems = crash_trials(200, SEED + 1, tmp_path)
    assert not problems, f"replay with BANTAM_CRASH_SEED={SEED}: {problems}"
    assert survived == 200
