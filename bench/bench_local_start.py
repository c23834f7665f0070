"""The bundled model's first answer byte from a user's seat: `bantam -p "Say hello."` with the saved
prompt state present, in the repository root (where the README's quick start asks) and in an empty
folder (issue 34).

    .venv/bin/python bench/bench_local_start.py [--runs N] [--tree NAME=SRC_DIR ...]

Each run is a fresh process, timed from spawn to the first byte of the answer on stdout, in a private
HOME with nothing configured (so the bundled model answers, as in the quick start). One untimed run
per folder first evaluates the prompt's fixed prefix and saves its state (and caches llama.cpp's
probe), as after any first run; the timed runs then load that state. Per folder: the median and range
of N runs, the prompt's tokens, how many of them were evaluated rather than loaded, and the saved
state's size on disk. Into a pipe bantam writes an answer only once it is whole (a reader must
never take a cut answer for a whole one), so the first byte comes after the last token: the
answer's length (its tokens are a column) is part of the time. With `--terminal`, stdout is a
pseudo-terminal instead, where the answer streams: the time is to its first visible byte.

`--tree NAME=SRC_DIR` (repeatable) compares source trees, e.g. a `git archive HEAD` copy beside the
working tree: each runs with PYTHONPATH=SRC_DIR and its own HOME, interleaved run by run so the
machine's drift hits every tree alike. Without it, the working tree's src/ alone.
Prints a markdown table; no timing here is asserted anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import as_installed  # noqa: E402
from bench.bench_local_runtime import first_token  # noqa: E402

PROMPT = "Say hello."
prompt = PROMPT   # --prompt
terminal = False  # --terminal


def _env(home: Path, src: Path) -> dict[str, str]:
    env = {k: v for k, v in as_installed(dict(os.environ)).items()
           if not k.startswith(("BANTAM_", "LLM_", "OPENAI_", "ANTHROPIC_"))}
    return {**env, "HOME": str(home), "PYTHONPATH": str(src), "NO_COLOR": "1"}


def first_byte(home: Path, src: Path, work: Path) -> float:
    """Seconds from spawning `bantam -p` (the sources in `src`) to the first byte on its stdout."""
    if terminal:
        return first_on_terminal(home, src, work)
    return first_token(home, work, prompt, _env(home, src))


def first_on_terminal(home: Path, src: Path, work: Path) -> float:
    """Seconds to the first visible byte on stdout when stdout is a pseudo-terminal."""
    import pty
    main_fd, child_fd = pty.openpty()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bantam", "-p", prompt], cwd=work, env=_env(home, src),
                            stdout=child_fd, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    os.close(child_fd)
    first = None
    try:
        while True:
            try:
                data = os.read(main_fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            if first is None and data.strip():
                first = time.perf_counter() - t0
    finally:
        os.close(main_fd)
    if proc.wait() or first is None:
        raise SystemExit(f"bantam -p failed or wrote nothing in {work} (PYTHONPATH={src})")
    return first


def usage(home: Path, src: Path, work: Path) -> dict:
    """The run's token counts, from `--json`'s last event."""
    out = subprocess.run([sys.executable, "-m", "bantam", "--json", "-p", prompt], cwd=work, env=_env(home, src),
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, check=True).stdout
    return json.loads(out.splitlines()[-1])["usage"]


def state_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in (home / ".bantam" / "cache" / "kv").glob("*.kv"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=SRC_DIR")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--terminal", action="store_true", help="stdout a pseudo-terminal (the answer streams)")
    args = ap.parse_args()
    global prompt, terminal
    prompt, terminal = args.prompt, args.terminal
    load_before = os.getloadavg()[0]
    trees = dict(t.split("=", 1) for t in args.tree) or {"working tree": str(ROOT / "src")}
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp, "empty")
        empty.mkdir()
        folders = {"repository root": ROOT, "empty folder": empty}
        cases = [(tree, Path(src).resolve(), folder, work) for tree, src in trees.items()
                 for folder, work in folders.items()]
        homes = {}
        facts = {}
        for tree, src, folder, work in cases:
            home = homes.setdefault(tree, Path(tmp, f"home-{len(homes)}"))
            home.mkdir(exist_ok=True)
            before = state_bytes(home)
            first_byte(home, src, work)                 # evaluates the prefix and saves its state
            size = state_bytes(home) - before
            facts[tree, folder] = (usage(home, src, work), size)
        times: dict[tuple[str, str], list[float]] = {(t, f): [] for t, _, f, _ in cases}
        for _ in range(args.runs):
            for tree, src, folder, work in cases:   # interleaved: drift hits every case alike
                times[tree, folder].append(first_byte(homes[tree], src, work))
    load = os.getloadavg()[0]
    rows = []
    for (tree, folder), t in times.items():
        use, size = facts[tree, folder]
        evaluated = use["prompt_tokens"] - (use.get("cached_tokens") or 0)
        rows.append(f"| {tree} | {folder} | {statistics.median(t) * 1000:.0f} | {min(t) * 1000:.0f}-"
                    f"{max(t) * 1000:.0f} | {use['prompt_tokens']} | {evaluated} | {use['completion_tokens']} | "
                    f"{size / 1e6:.1f} |")
    print("\n".join([f"### `bantam -p \"{prompt}\"` on the bundled model: process start to first answer byte "
                     f"({'on a terminal' if terminal else 'into a pipe'}), "
                     f"saved prompt state present ({args.runs} runs each, interleaved; load average "
                     f"{load_before:.1f} at the start, {load:.1f} at the end)", "",
                     "| source | folder | median ms | range ms | prompt tokens | evaluated (not loaded) | "
                     "answer tokens | saved state MB |", "|---|---|---:|---:|---:|---:|---:|---:|", *rows]))


if __name__ == "__main__":
    main()
