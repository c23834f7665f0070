"""Work done on the embedded model: a sample of bench/bench_tasks.py's tasks, run by bantam as a user
runs it (`bantam --yolo -p TASK`, nothing configured, so the bundled local model answers), each in a
fresh folder and checked by its result with the benchmark's own check, never by the answer's words.
A change to the prompt, the tools or the local model's aids that stops this work fails here."""
import os
import subprocess
import sys

import pytest

from bantam.bundled import available
from bench.bench_tasks import BY_NAME

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="the local extra is not installed")]

# Kinds of work a user asks first, each solved by the embedded default, Qwen2.5-Coder-1.5B-Instruct
# (bench/RESULTS.md, "Work done on the embedded model"): read a value from a file and write it where
# asked, count over a tree, write a file with given content; and two that only its aids get done:
# find-word (the worked exchange: write just the name, not the whole grep line) and run-script
# (a command that printed nothing says so: the model had taken "exit: 0" for what a script printed
# into the file and written that over it). Greedy, so the same every run.
SAMPLE = ["package-version", "count-py", "write-greeting", "find-word", "run-script"]


@pytest.fixture(scope="module")
def user_home(tmp_path_factory):
    """One HOME for the sample: the default model is joined into ~/.bantam/models once (1.1 GB)."""
    return tmp_path_factory.mktemp("work-done") / "home"


@pytest.mark.parametrize("name", SAMPLE)
def test_the_embedded_model_gets_the_task_done(name, home, user_home):
    work, task = home, BY_NAME[name]  # `home` is the test's working folder
    task.setup(work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "BANTAM_", "AGENT_", "OPENAI_", "ANTHROPIC_"))}
    # --yolo: as the benchmark runs it (no sandbox), so the same check means the same thing; no
    # BANTAM_EMBEDDED: the default a user gets
    p = subprocess.run([sys.executable, "-m", "bantam", "--yolo", "-p", task.prompt], cwd=work,
                       env={**env, "HOME": str(user_home)}, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=900)
    solved, why = task.check(work)
    assert solved, (why, p.returncode, p.stdout[-1500:], p.stderr[-3000:])
