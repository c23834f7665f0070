"""Can the installed llama.cpp run on this CPU? Asked once, in a child process.

A llama.cpp library compiled for another CPU (`-march=native` on a machine with AMX or AVX-512, a
wheel copied from elsewhere, a container image built on a newer host) dies with SIGILL on its first
matrix multiply, and takes the process with it: exit 132, no message, a lost conversation. So
before bantam loads a model in its own process, a child imports llama_cpp, loads the model and
evaluates a few tokens. The answer is cached per library build and CPU (file names, sizes and
mtimes of the shared libraries, and the CPU's feature flags), so the probe costs about half a
second once per install, not per run.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..errors import ProviderError
from ..fsutil import atomic_write, bantam_home, private_dir

# What a portable build sets: the instructions of every x86-64 CPU of the last ten years, nothing
# newer (no AVX-512, no AMX) and no -march=native. Keep in step with the README and .ci/run.
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
PROBE_TIMEOUT = 120  # seconds; loading a large GGUF from a cold disk can take a while

# Runs in the child: import, load, evaluate a short batch (the batched matmul kernels) and one more
# token (the single-token path), which is where an unsupported instruction is hit.
_PROBE = """
import sys
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=64, n_batch=64, n_threads=1, verbose=False)
m.eval(m.tokenize(b"The capital of France is Paris. The capital of Italy is"))
m.eval([m.token_eos()])
"""


def reinstall_command() -> str:
    """The exact command that replaces the installed llama-cpp-python with a portable build."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        pin = f"=={version('llama-cpp-python')}"
    except PackageNotFoundError:
        pin = ""
    return (f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" {sys.executable} -m pip install --force-reinstall '
            f"--no-cache-dir --no-deps 'llama-cpp-python{pin}'")


def ensure_runs(model: Path) -> None:
    """Return if llama.cpp can run here; otherwise raise a one-line ProviderError naming the cause
    and the reinstall command. Never crashes the calling process."""
    key = _build_key()
    cache = bantam_home() / "cache" / "llama-probe.json"
    try:
        if json.loads(cache.read_text()).get(key) == "ok":
            return
    except (OSError, ValueError, AttributeError):
        pass  # no cache yet, or an unreadable one: probe again
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        child = subprocess.run([sys.executable, "-c", _PROBE, str(model)], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, errors="replace", timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ProviderError(f"llama.cpp did not load {model} within {PROBE_TIMEOUT} s in a test process",
                            retryable=False) from None
    if child.returncode == -signal.SIGILL:
        raise ProviderError("llama-cpp-python was built for another CPU (it dies with SIGILL, an illegal "
                            f"instruction, on this one); rebuild it portable: {reinstall_command()}",
                            retryable=False)
    if child.returncode < 0:
        raise ProviderError(f"llama.cpp crashed loading {model} ({signal.Signals(-child.returncode).name}) "
                            "in a test process", retryable=False)
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["no message"])[-1]
        raise ProviderError(f"llama.cpp cannot load {model}: {last}", retryable=False)
    _remember(cache, key)


def _remember(cache: Path, key: str) -> None:
    try:
        private_dir(cache.parent)
        try:
            known = json.loads(cache.read_text())
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError):
            known = {}
        known = {k: v for k, v in list(known.items())[-15:]}  # a few builds at most: bounded
        known[key] = "ok"
        atomic_write(cache, json.dumps(known).encode(), mode=0o600)
    except OSError:
        pass  # an unwritable cache only means the probe runs again next time


def _build_key() -> str:
    """The installed llama_cpp's shared libraries (name, size, mtime) and this CPU's flags."""
    spec = importlib.util.find_spec("llama_cpp")
    parts: list[str] = [sys.executable]
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(folder).rglob("*.so*")) + sorted(Path(folder).rglob("*.dylib")):
            st = path.stat()
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    parts.append(_cpu_flags())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()
