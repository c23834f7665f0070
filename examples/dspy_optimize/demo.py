"""One prompt optimisation on a small scripted task set, and what it changed.

    pip install -e '.[dspy]'          # dspy==3.4.1; nothing is downloaded when this runs
    python examples/dspy_optimize/demo.py [--endpoint URL --model NAME] [--dir DIR]

1. Three tasks ("read these files and say what they hold") are done right by scripted answers:
   three completed runs, whose accepted answers are the traces.
2. `bantam optimize` runs DSPy's BootstrapFewShot over those traces against the model.
3. A new task runs twice on the same model: without the artifact, and with it.

Without --endpoint the model is tests/fakes/small_model.py on 127.0.0.1: a deterministic stand-in
for a small model that answers in prose unless the prompt holds a worked example. With --endpoint
it is your model (any OpenAI-compatible server). Run it from the repository root.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = {"one": {"a.txt": "alpha\n"}, "two": {"b.txt": "bravo\n", "c.txt": "charlie\n"},
         "three": {"d.txt": "delta\n"}, "new": {"e.txt": "echo\n", "f.txt": "foxtrot\n"}}


def bantam(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "bantam", *args], cwd=work, capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL)


def task(work: Path, name: str) -> list[str]:
    files = TASKS[name]
    ws = work / "tasks" / name
    ws.mkdir(parents=True, exist_ok=True)
    for file, text in files.items():
        (ws / file).write_text(text)
    return [f"Read {', '.join(files)} and say what they hold.", "--workspace", str(ws),
            *[a for f in files for a in ("--require-read", f)]]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", help="an OpenAI-compatible server (default: the fake small model)")
    p.add_argument("--model", default="small")
    p.add_argument("--dir", help="where the runs go (default: a new temporary folder)")
    args = p.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bantam-dspy-"))
    work.mkdir(parents=True, exist_ok=True)
    for name in ("one", "two", "three"):
        files = TASKS[name]
        plan = {"plan": [{"description": f"Read {f}", "tool": "read_file", "arguments": {"path": f}} for f in files]}
        answers = [json.dumps(plan), *[json.dumps({"tool": "read_file", "arguments": {"path": f}}) for f in files],
                   json.dumps({"final": "read " + ", ".join(files)})]
        (work / f"{name}.json").write_text(json.dumps(answers))
        if bantam(work, "run", *task(work, name), "--scripted", str(work / f"{name}.json")).returncode != 0:
            sys.exit(f"the scripted run {name} did not complete")
    runs = sorted(p.name for p in (work / "runs").iterdir())
    server = None
    if args.endpoint is None:
        sys.path.insert(0, str(ROOT))
        from tests.fakes.small_model import SmallModel
        server = SmallModel().__enter__()
    endpoint = args.endpoint or server.url
    model = ["--endpoint", endpoint, "--model", args.model]
    try:
        made = bantam(work, "optimize", *runs, "--output", "prompt.json", *model)
        print(made.stderr.strip().splitlines()[-1])
        if made.returncode != 0:
            return made.returncode
        demos = json.loads((work / "prompt.json").read_text())["demos"]
        print(f"the artifact: {len(demos)} worked examples: " +
              ", ".join(f"{d['purpose']} -> {d['answer'][:60]}" for d in demos))
        for label, extra in (("without the artifact", []), ("with the artifact", ["--prompt-artifact", "prompt.json"])):
            run = bantam(work, "run", *task(work, "new"), *model, *extra)
            print(f"new task {label}: exit {run.returncode}; {run.stderr.strip().splitlines()[-1]}")
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    print(f"runs and prompt.json are in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
