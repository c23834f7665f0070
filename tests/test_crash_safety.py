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
@pytest.mark.parametrize("part", range(4))
def test_two_hundred_kills(tmp_path, part):
    """200 kills in four runs of 50, each from a seed of its own: the same number of random
    moments, shared out among parallel test workers (`pytest -n 3`) rather than queued on one."""
    survived, problems = crash_trials(50, SEED + 1 + part, tmp_path)
    assert not problems, f"replay with BANTAM_CRASH_SEED={SEED} ({part=}): {problems}"
    assert survived == 50
