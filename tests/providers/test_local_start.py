"""The bundled model's start-up as a user meets it (issue 34): a terminal shows what is under way
(the model loading, the prompt read the first time); a pipe gets nothing but the answer; the saved
prompt state is small (an 8-bit KV cache) and reused by the next process."""
import json
import os
import struct
import sys
from pathlib import Path

import pexpect
import pytest

from bantam.providers.local import available
from tests.conftest import run_bantam, write_cfg

pytestmark = pytest.mark.skipif(not available(), reason="the local extra is not installed")

# SmolLM2-135M's KV cache per token: 30 layers x 3 KV heads x 64 values, for K and for V. In f16
# that is 23,040 bytes; with the keys in q8_0 (34 bytes per 32 values) 17,640. The bound sits
# between the two.
F16_BYTES_PER_TOKEN = 30 * 3 * 64 * 2 * 2
MAX_BYTES_PER_TOKEN = F16_BYTES_PER_TOKEN * 9 // 10


def saved_states(home: Path) -> list[Path]:
    folder = home.parent / "home" / ".bantam" / "cache" / "kv"
    return sorted(folder.glob("*.kv")) if folder.is_dir() else []


def on_a_terminal(cwd: Path, prompt: str) -> str:
    """Everything `bantam -p` writes to a real pseudo-terminal, escape sequences included."""
    env = {**os.environ, "TERM": "xterm", "NO_COLOR": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "-p", prompt], cwd=str(cwd), env=env,
                          encoding="utf-8", dimensions=(40, 120), timeout=600)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before


@pytest.mark.slow
def test_a_terminal_is_told_what_is_under_way_a_pipe_gets_the_answer_alone_and_the_state_is_reused(home):
    write_cfg(home, provider="local", temperature="0", max_tokens="64", tools="read_file")
    first = on_a_terminal(home, "Say hello.")  # a new prompt: the model loads, then reads it
    assert "...loading SmolLM2-135M-Instruct.Q4_1...\r\x1b[K" in first
    assert "...reading the prompt (" in first and "tokens, saved for next time)...\r\x1b[K" in first
    # read in this run, so nothing was cached: the prompt's fixed start was written for the next
    assert " prompt (0 cached, " in first and " written to cache, " in first
    (state,) = saved_states(home)
    data = state.read_bytes()
    prefix = struct.unpack("<I", data[4:8])[0]
    assert prefix >= 32 and len(data) < prefix * MAX_BYTES_PER_TOKEN  # the 8-bit keys, not f16's
    inode = state.stat().st_ino

    again = on_a_terminal(home, "Say hello.")  # the saved state is loaded: no reading to announce
    assert "...loading SmolLM2-135M-Instruct.Q4_1..." in again and "reading the prompt" not in again
    assert state.stat().st_ino == inode

    r = run_bantam("-p", "Say hello.", cwd=home, timeout=600)  # a pipe: no status, nothing erased
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "..." not in r.stdout + r.stderr and "\r" not in r.stdout + r.stderr
    r = run_bantam("--json", "-p", "Say hello.", cwd=home, timeout=600)
    assert r.returncode == 0, r.stderr
    usage = json.loads(r.stdout.splitlines()[-1])["usage"]
    assert usage["prompt_tokens"] - usage["cached_tokens"] < 32 < usage["cached_tokens"]  # the state was used
    assert usage["cache_write_tokens"] is None  # and not written again
    assert all(json.loads(line)["type"] != "request" for line in r.stdout.splitlines())
    assert state.stat().st_ino == inode and saved_states(home) == [state]
