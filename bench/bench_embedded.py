"""Work done on the embedded model: bench/bench_tasks.py's tasks through `bantam -p` with the model
run in bantam's own process (provider=local), for each candidate model, as a user with no server
and no key runs it.

    .venv/bin/python bench/bench_embedded.py --write                    # from the repository root
    .venv/bin/python bench/bench_embedded.py --models qwen-0.5b --tasks count-py,fix-bug

Each task runs in a fresh folder (bench_tasks' files and checks: a result, never the answer's
wording), greedy (temperature 0, seed 1), at most --steps model requests and --time seconds, with
a fresh HOME whose prompt-state cache is warmed once per model (as a user's second run finds it).
Per model: tasks solved (with the list), wall seconds and prompt + completion tokens per solved
task, and the peak RSS of a bantam process.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import BANTAM, machine, write_results  # noqa: E402
from bench.bench_tasks import TASKS, Task  # noqa: E402

BEGIN, END = "<!-- bench_embedded:begin -->", "<!-- bench_embedded:end -->"
MODELS = Path(os.environ.get("BANTAM_BENCH_MODELS", "/work/models"))
# name -> the settings a user would write for it ("" model_path: the embedded default)
CANDIDATES = {
    "smollm2-135m": {"model_path": "", "local_aids": "auto", "embedded": "SmolLM2-135M-Instruct"},
    "qwen-0.5b": {"model_path": str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"), "local_aids": "qwen2.5-coder",
                  "repeat_penalty": "1.0"},
    "qwen-0.5b-bare": {"model_path": str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")},
    "qwen-1.5b": {"model_path": str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), "local_aids": "qwen2.5-coder",
                  "repeat_penalty": "1.0"},
    "default": {},  # whatever the embedded default is
}


def write_settings(home: Path, name: str, steps: int) -> None:
    """The candidate's settings in the user's file under `home`, where a user keeps them (a
    project's file may not raise max_al_iterations, a boundary key, until the user trusts it)."""
    values = {"provider": "local", "temperature": "0", "seed": "1", "max_al_iterations": str(steps),
              **{k: v for k, v in CANDIDATES[name].items() if v and k != "embedded"}}
    config = home / ".config" / "bantam" / "config"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("".join(f"{k}={v}\n" for k, v in values.items()))


def environment(home: Path, name: str) -> dict[str, str]:
    """bantam's environment: HOME the bench's own and no XDG_CONFIG_HOME, so the user's file is the
    one write_settings wrote, and no endpoint or key of the person running the bench."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BANTAM_", "OPENAI_", "ANTHROPIC_", "LLM_")) and k != "XDG_CONFIG_HOME"}
    return {**env, "HOME": str(home), "NO_COLOR": "1", **embedded(name)}


def run_task(name: str, task: Task, home: Path, steps: int, limit: float, logs: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"emb-{task.name}-"))
    task.setup(work)
    env = environment(home, name)
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        proc = subprocess.run([BANTAM, "--yolo", "--json", "-p", task.prompt], cwd=work, env=env,
                              capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL)
        out, err, ended = proc.stdout, proc.stderr, f"exit {proc.returncode}"
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, ended = "", "time limit"
    wall = time.monotonic() - started
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    done = next((e for e in reversed(events) if e.get("type") == "done"), {})
    usage = done.get("usage") or {}
    calls = [e for e in events if e.get("type") == "tool_call"]
    ok, why = task.check(work)
    (logs / f"{name}-{task.name}.jsonl").write_text(out + "\n--- stderr\n" + err)
    shutil.rmtree(work, ignore_errors=True)
    return {"task": task.name, "solved": ok, "why": why, "wall": wall, "ended": ended, "calls": len(calls),
            "prompt": usage.get("prompt_tokens", 0), "completion": usage.get("completion_tokens", 0),
            "rss": max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)}


def embedded(name: str) -> dict[str, str]:
    """The environment that picks a candidate among the installed embedded models (bundled.py)."""
    chosen = CANDIDATES[name].get("embedded")
    return {"BANTAM_EMBEDDED": chosen} if chosen else {}


def warm(name: str, home: Path, steps: int) -> None:
    """One short run, so the model is assembled (if it is) and its prompt state saved."""
    write_settings(home, name, steps)
    work = Path(tempfile.mkdtemp(prefix="emb-warm-"))
    subprocess.run([BANTAM, "--yolo", "-p", "What is the capital of France?"], cwd=work,
                   env=environment(home, name), capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    shutil.rmtree(work, ignore_errors=True)


def table(results: dict[str, list[dict]]) -> str:
    rows = ["| model | solved | s per solved | tokens per solved (prompt + completion) | peak RSS MB | solved tasks |",
            "|---|---:|---:|---:|---:|---|"]
    for name, runs in results.items():
        won = [r for r in runs if r["solved"]]
        n = max(len(won), 1)
        tokens = sum(r["prompt"] + r["completion"] for r in won) / n
        rows.append(f"| {name} | {len(won)}/{len(runs)} | {sum(r['wall'] for r in won) / n:.1f} | "
                    f"{tokens:,.0f} | {max(r['rss'] for r in runs) / 1024:.0f} | "
                    f"{', '.join(r['task'] for r in won) or '-'} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2-135m,qwen-0.5b,qwen-1.5b")
    ap.add_argument("--tasks", default="")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--time", type=float, default=240.0)
    ap.add_argument("--logs", default="/tmp/bench-embedded-logs")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    wanted = set(filter(None, args.tasks.split(",")))
    tasks = [t for t in TASKS if not wanted or t.name in wanted]
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    results: dict[str, list[dict]] = {}
    for name in args.models.split(","):
        home = Path(tempfile.mkdtemp(prefix=f"emb-home-{name}-"))
        warm(name, home, args.steps)
        results[name] = []
        for task in tasks:
            r = run_task(name, task, home, args.steps, args.time, logs)
            results[name].append(r)
            print(f"{name:14} {task.name:16} {'SOLVED' if r['solved'] else 'failed':7} {r['wall']:6.1f}s "
                  f"{r['calls']:2} calls {r['ended']}  {r['why'][:60]}", flush=True)
    text = table(results)
    print(text)
    print(f"load average at start {load:.2f}, at end {os.getloadavg()[0]:.2f}")
    if args.write:
        body = (f"## Work done on the embedded model\n\nCommand: `.venv/bin/python bench/bench_embedded.py "
                f"--write`\n\nMachine: {machine()}; load average {load:.2f} at the start.\n\n{text}\n")
        write_results(body, BEGIN, END)


if __name__ == "__main__":
    main()
