"""The local runtime on any machine: the portable build, the SIGILL probe, the saved prompt state."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bantam.providers import kv_cache
from bantam.providers.llama_probe import PORTABLE_CMAKE_ARGS
from bantam.providers.local import available
from tests.conftest import ROOT, run_bantam, write_cfg

local_only = pytest.mark.skipif(not available(), reason="the local extra is not installed")

# A stand-in for a llama.cpp built for another CPU: importing it executes an illegal instruction.
ILLEGAL = r"""
#include <signal.h>
void ggml_cpu_init(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("ud2");
#else
    raise(SIGILL);
#endif
}
"""
FAKE_PACKAGE = """
import ctypes, pathlib
ctypes.CDLL(str(pathlib.Path(__file__).parent / "lib" / "libggml-cpu.so")).ggml_cpu_init()
"""


def test_install_commands_build_llama_cpp_portable_and_bypass_the_wheel_cache():
    # pip caches a built wheel by its link, not by CMAKE_ARGS: a native wheel built before would come back.
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    # (the portable flags first; what the build leaves out follows them: tests/test_readme.py)
    for text in (ci, readme):
        assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}' in text
    install_lines = [line for line in (ci + readme).splitlines() if "pip install" in line and "'.[local" in line]
    assert len(install_lines) >= 3
    assert all(f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}' in line and "--no-cache-dir" in line for line in install_lines)


@local_only
def test_installed_llama_cpp_has_no_avx512_or_amx_instructions():
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed")
    import importlib.util
    folder = Path(importlib.util.find_spec("llama_cpp").submodule_search_locations[0])
    libraries = [p for p in folder.rglob("libggml*.so*") if p.is_file()]
    assert libraries, f"no ggml library under {folder}"
    for library in libraries:
        listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(library)], capture_output=True,
                                 text=True, check=True).stdout
        assert "%zmm" not in listing and "tileloadd" not in listing and "tdpb" not in listing, library


@pytest.fixture
def sigill_llama(tmp_path):
    """A directory to put first on PYTHONPATH, holding a `llama_cpp` that dies with SIGILL."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    package = tmp_path / "fake" / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (tmp_path / "illegal.c").write_text(ILLEGAL)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(package / "lib" / "libggml-cpu.so"),
                    str(tmp_path / "illegal.c")], check=True)
    (package / "__init__.py").write_text(FAKE_PACKAGE)
    check = subprocess.run([sys.executable, "-c", "import llama_cpp"], env={**os.environ, "PYTHONPATH": str(package.parent)})
    assert check.returncode == -4  # the stand-in really dies as a foreign build does
    return package.parent


def test_a_library_that_dies_with_sigill_gives_one_line_and_exit_1(home, sigill_llama):
    gguf = home / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    write_cfg(home, provider="local", model_path=str(gguf))
    env = {"PYTHONPATH": os.pathsep.join([str(sigill_llama), str(ROOT / "src")])}
    r = run_bantam("-p", "hi", cwd=home, env=env)
    assert r.returncode == 1, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "SIGILL" in lines[0] and f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in lines[0]
    assert "pip install --force-reinstall --no-cache-dir" in lines[0]
    r = run_bantam("--json", "-p", "hi", cwd=home, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    last = json.loads(r.stdout.splitlines()[-1])
    assert last["type"] == "error" and last["fatal"] and "SIGILL" in last["message"]
    assert not (home.parent / "home" / ".bantam" / "cache" / "llama-probe.json").exists()  # a failure is not cached


@local_only
def test_probe_passes_once_and_is_remembered_per_build(home):
    write_cfg(home, provider="local", temperature="0", max_tokens="8")
    r = run_bantam("-p", "Say hi.", cwd=home, timeout=600)
    assert r.returncode in (0, 1) and r.stdout and "Traceback" not in r.stderr, r.stderr  # 1: cut at 8 tokens
    cache = home.parent / "home" / ".bantam" / "cache" / "llama-probe.json"
    assert list(json.loads(cache.read_text()).values()) == ["ok"]
    cache.write_text("{not json")  # an unreadable cache is probed again, not trusted or fatal
    r = run_bantam("-p", "Say hi.", cwd=home, timeout=600)
    assert r.returncode in (0, 1) and r.stdout and "Traceback" not in r.stderr, r.stderr
    assert list(json.loads(cache.read_text()).values()) == ["ok"]


def saved_states(home: Path) -> list[Path]:
    folder = home.parent / "home" / ".bantam" / "cache" / "kv"
    return sorted(folder.glob("*.kv")) if folder.is_dir() else []


def answer(home: Path, prompt: str) -> tuple[str, dict]:
    """The answer, however short: a text cut at the small max_tokens these tests set to stay fast
    ends with exit 1 (it was cut at the user's own limit), and still with its `done` event."""
    r = run_bantam("--json", "-p", prompt, cwd=home, timeout=600)
    assert r.returncode in (0, 1) and r.stdout, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    done = events[-1]
    assert done["type"] == "done"
    return done["text"], r.stderr


@local_only
def test_saved_prompt_state_gives_the_same_answer_as_evaluating_it(home):
    write_cfg(home, provider="local", temperature="0", max_tokens="24", tools="read_file")
    prompt = "Name three colours of the rainbow."
    first, _ = answer(home, prompt)                      # evaluates the prefix and saves it
    (state,) = saved_states(home)
    inode = state.stat().st_ino
    second, _ = answer(home, prompt)                     # loads it instead
    assert second == first and first
    assert state.stat().st_ino == inode                  # loaded, not written again
    assert state.stat().st_mode & 0o777 == 0o600
    # A damaged file is ignored with a notice, and replaced; the answer does not change.
    state.write_bytes(state.read_bytes()[:100])
    third, stderr = answer(home, prompt)
    assert third == first and "ignored the saved prompt state" in stderr
    state.write_bytes(b"garbage")
    fourth, stderr = answer(home, prompt)
    assert fourth == first and "ignored the saved prompt state" in stderr
    assert len(saved_states(home)) == 1


@local_only
def test_a_changed_prefix_gets_its_own_state_and_the_cache_stays_bounded(home, monkeypatch):
    # Questions about this machine: they are offered the tools (a greeting is not: aids.answers),
    # so each tool list is a prefix of its own.
    write_cfg(home, provider="local", temperature="0", max_tokens="4")
    answer(home, "What time is it?")
    write_cfg(home, provider="local", temperature="0", max_tokens="4", tools="write_file")  # another tool list
    answer(home, "What time is it?")
    assert len(saved_states(home)) == 2
    folder = saved_states(home)[0].parent
    for i in range(kv_cache.MAX_FILES + 5):
        (folder / f"old{i:02}.kv").write_bytes(b"x")
        os.utime(folder / f"old{i:02}.kv", (1000 + i, 1000 + i))
    answer(home, "What is the date today?")  # the same prefix: loaded, nothing written, nothing evicted
    write_cfg(home, provider="local", temperature="0", max_tokens="4", tools="shell_exec")
    answer(home, "What is the date today?")  # a new prefix: saved, then the oldest go
    assert len(saved_states(home)) == kv_cache.MAX_FILES
    assert not (folder / "old00.kv").exists()

