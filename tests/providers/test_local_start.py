"""The bundled model's start-up as a user meets it (issue 34): a terminal shows what is under way
(the model loading, the prompt read the first time); a pipe gets nothing but the answer; the saved
prompt state is small (an 8-bit KV cache) and reused by the next process; Ctrl+C during the load
ends bantam at once."""
import json
import os
import struct
import sys
from pathlib import Path

import pexpect
import pytest

from bantam.bundled import QWEN_CODER_15B, SMOLLM2, installed, model_file
from bantam.providers import llama_probe
from bantam.providers.local import available
from tests.conftest import run_bantam, wait_for, write_cfg

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


def mapped(pid: int, path: Path) -> bool:
    try:
        return str(path) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not installed(QWEN_CODER_15B), reason="the 1.5B embedded model is not installed")
def test_ctrl_c_while_the_model_loads_ends_bantam_at_once_without_a_traceback(home):
    """Loading is one llama.cpp call of seconds for the 1.5B model (SmolLM2's is too short to press
    a key in): Ctrl+C stops it at the next tensor and bantam ends, 130. The interrupt used to be
    raised in llama-cpp-python's log callback, printed as an ignored exception and lost: the load
    went on and the answer came."""
    model = model_file(QWEN_CODER_15B)  # joined into this HOME now, as a first run would
    llama_probe.ensure_runs(model_file(SMOLLM2))  # the probe's answer holds per build, whatever the model
    env = {**os.environ, "TERM": "xterm", "NO_COLOR": "1", "BANTAM_EMBEDDED": QWEN_CODER_15B.name}
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "-p", "Say hello."], cwd=str(home), env=env,
                          encoding="utf-8", dimensions=(40, 120), timeout=120)
    child.expect("loading")
    wait_for(lambda: mapped(child.pid, model), "llama.cpp to map the model", timeout=120)  # the load is under way
    child.sendintr()
    child.expect(pexpect.EOF, timeout=30)  # the load alone took 4-10 s on a busy 2-core machine
    child.close()
    assert child.exitstatus == 130, child.before
    assert "bantam: interrupted" in child.before
    assert "Traceback" not in child.before and "Exception" not in child.before and "prompt" not in child.before
