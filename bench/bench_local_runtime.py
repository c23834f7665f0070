"""The local runtime from a user's seat: a one-shot run's first token, and the portable build's speed.

    .venv/bin/python bench/bench_local_runtime.py --write [--native-python /path/to/python]

1. Time to first token of a one-shot `bantam -p` on the bundled model, measured from process start
   to the first byte of the answer on stdout (the model's load included), in a fresh BANTAM_HOME:
   without a saved prompt state (the system prompt and tool list are evaluated) and with the state
   the previous run saved. The llama.cpp probe's answer is cached in both, as after any first run.
2. Generation speed of llama.cpp as installed (the portable build the README makes) against another
   build of the same version, e.g. one compiled with `-march=native`, given by `--native-python`
   (a virtualenv's interpreter where llama-cpp-python was built without CMAKE_ARGS). Both run the
   same prompt, greedy, the same number of new tokens, one after the other, interleaved.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import machine, ms, write_results  # noqa: E402

BEGIN, END = "<!-- bench_local_runtime:begin -->", "<!-- bench_local_runtime:end -->"
PROMPT = "What is the capital of France?"

SPEED = r"""
import sys, time, json
from llama_cpp import Llama
from bantam.providers.local import bundled_model
m = Llama(model_path=str(bundled_model()), n_ctx=2048, verbose=False)
tokens = m.tokenize(b"<|im_start|>user\nWrite a short story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n",
                    add_bos=False, special=True)
m.create_completion(tokens, max_tokens=8, temperature=0.0)  # warm up
m.reset()
t0 = time.perf_counter()
n = sum(1 for _ in m.create_completion(tokens, max_tokens=128, temperature=0.0, stream=True, stop=["\x00"]))
print(json.dumps({"tok_s": n / (time.perf_counter() - t0), "n": n}))
"""


def first_token(home: Path, work: Path, prompt: str = PROMPT, env: dict[str, str] | None = None) -> float:
    """Seconds from spawning `bantam -p PROMPT` in `work` to the first byte on its stdout."""
    env = env or {**os.environ, "HOME": str(home), "BANTAM_HOME": str(home / ".bantam")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", prompt], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.read(1)
    seconds = time.perf_counter() - t0
    proc.stdout.read()
    if proc.wait():
        raise SystemExit(f"bantam -p failed in {work} (PYTHONPATH={env.get('PYTHONPATH', '')})")
    return seconds


def ttft_table(reps: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        (work / ".bantam.cfg").write_text("provider=local\ntemperature=0\nmax_tokens=16\n")
        first_token(home, work)  # the probe runs once and is cached, as after any first run
        kv = home / ".bantam" / "cache" / "kv"
        cold, warm = [], []
        for _ in range(reps):
            shutil.rmtree(kv, ignore_errors=True)
            cold.append(first_token(home, work))   # evaluates the prefix (and saves it)
            warm.append(first_token(home, work))   # loads the saved state
        size = sum(p.stat().st_size for p in kv.glob("*.kv"))
    rows = [f"| {name} | {ms(min(t))} | {ms(statistics.median(t))} | {ms(max(t))} |"
            for name, t in (("no saved prompt state", cold), ("saved prompt state loaded", warm))]
    return "\n".join([f"### One-shot time to first token from process start (`bantam -p`, {reps} runs each)", "",
                      "| run | min ms | median ms | max ms |", "|---|---:|---:|---:|", *rows, "",
                      f"Saved state on disk: {size / 1e6:.1f} MB (system prompt and three tools). "
                      f"Median saved: **{ms(statistics.median(cold) - statistics.median(warm))} ms** per run."])


def speed(python: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([python, "-c", SPEED], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["tok_s"]


def speed_table(native: str | None, reps: int) -> str:
    builds = {"portable (as installed: " + os.environ.get("BENCH_PORTABLE_FLAGS", "GGML_NATIVE=OFF, AVX2, FMA, F16C")
              + ")": sys.executable}
    if native:
        builds["native (`-march=native`, no CMAKE_ARGS)"] = native
    rates: dict[str, list[float]] = {name: [] for name in builds}
    for _ in range(reps):
        for name, python in builds.items():
            rates[name].append(speed(python))
    rows = [f"| {name} | {min(r):.1f} | {statistics.median(r):.1f} | {max(r):.1f} |" for name, r in rates.items()]
    lines = [f"### Generation speed by build (128 new tokens, greedy, {reps} runs each, interleaved)", "",
             "| llama.cpp build | min tok/s | median tok/s | max tok/s |", "|---|---:|---:|---:|", *rows]
    if native:
        portable, fast = (statistics.median(r) for r in rates.values())
        lines += ["", f"portable / native: **{portable / fast:.2f}**"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--native-python", help="an interpreter whose llama-cpp-python is a native build")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    section = "\n".join(["## Local runtime (bundled SmolLM2-135M-Instruct Q4_1, CPU)", "",
                         "Command: `.venv/bin/python bench/bench_local_runtime.py --write"
                         + (" --native-python NATIVE_VENV/bin/python`" if args.native_python else "`"), "",
                         f"Machine: {machine()}", "", ttft_table(args.reps), "",
                         speed_table(args.native_python, args.reps)])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
