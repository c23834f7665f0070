"""Undo: the time and disk of recording turns in a 10,000- or 20,000-file repository.

    .venv/bin/python bench/bench_undo.py [--files 10000] [--reps 5]    # from the repository root
    .venv/bin/python bench/bench_undo.py --files 20000 --reps 3

A git repository of N small source-like files (1-8 KB, committed, one ignored build folder) is
scanned by bantam.undo's store as a turn scans it: the first scan ever (every file read, hashed
and stored, compressed), a scan with nothing changed (a stat per file: the stat cache), a scan
after a turn changed 10 files, and the guard at work in a turn that changes 10 files: its first
call (the scan before the turn, the record, the call's changes) and each further call (what a
tool call costs once the turn has begun).
Disk: the store after the first scan, and what each later snapshot adds (the new contents, the
folder's scan file rewritten in place, the turn record).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from bantam.tools import Outcome  # noqa: E402
from bantam.undo import UndoGuard  # noqa: E402
from bantam.undo.store import Store, git_ignored  # noqa: E402

WORDS = "def return self value import from class for while if else None True False list dict".split()


def make_repo(folder: Path, files: int) -> None:
    rng = random.Random(1)
    for i in range(files):
        path = folder / f"pkg{i % 100:02d}" / f"mod{i:05d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(" ".join(rng.choice(WORDS) for _ in range(rng.randint(150, 1200))) + "\n")
    (folder / "build").mkdir()
    for i in range(200):
        (folder / "build" / f"o{i}.o").write_bytes(os.urandom(2048))
    (folder / ".gitignore").write_text("build/\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"]):
        subprocess.run(["git", *cmd], cwd=folder, env=env, check=True)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(work) -> float:
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1000


def touch_ten(folder: Path, n: int) -> None:
    for i in range(10):
        path = folder / f"pkg{i:02d}" / f"mod{i:05d}.py"
        path.write_text(path.read_text() + f"# change {n}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder, store = Path(tmp, "repo"), Store(Path(tmp, "store"))
        folder.mkdir()
        make_repo(folder, args.files)
        size = sum(p.stat().st_size for p in folder.rglob("*.py"))
        first = timed(lambda: store.scan(folder))
        stored = du(store.path)
        time.sleep(2.1)  # out of the racy window, as files are between two turns
        git_ms = statistics.median(timed(lambda: git_ignored(folder)) for _ in range(args.reps))
        same = statistics.median(timed(lambda: store.scan(folder)) for _ in range(args.reps))
        turn_ms, call_ms, added = [], [], []
        for n in range(args.reps):
            before = du(store.path)
            guard = UndoGuard("thread-bench", folder, store=store)
            guard.before_request([{"role": "user", "content": "go"}])
            turn_ms.append(timed(lambda g=guard: g.before_call("shell_exec", "{}")))
            touch_ten(folder, n)
            turn_ms[-1] += timed(lambda g=guard: g.after_call("shell_exec", "{}", Outcome("ok")))
            for _ in range(3):
                call_ms.append(timed(lambda g=guard: g.before_call("shell_exec", "{}")))
                touch_ten(folder, n + 100)
                call_ms[-1] += timed(lambda g=guard: g.after_call("shell_exec", "{}", Outcome("ok")))
            added.append(du(store.path) - before)
        cache = du(store.path / "folders")
    print(f"{args.files} files, {size / 1e6:.1f} MB of source (+200 ignored build files), git repository\n")
    print("| measure | value |\n|---|---:|")
    print(f"| first scan ever (every file read, hashed, stored) | {first:.0f} ms |")
    print(f"| store after it (zlib level 1) | {stored / 1e6:.1f} MB |")
    print(f"| scan, nothing changed (stat cache) | {same:.0f} ms |")
    print(f"| of which `git ls-files --others --ignored` | {git_ms:.0f} ms |")
    print(f"| a turn's first call changing 10 files: scan before, record, changes | {statistics.median(turn_ms):.0f} ms |")
    print(f"| each further call changing 10 files (per tool call) | {statistics.median(call_ms):.0f} ms |")
    print(f"| disk added per such turn (new contents + record; scan file rewritten, {cache / 1e6:.1f} MB) "
          f"| {statistics.median(added) / 1e3:.1f} KB |")


if __name__ == "__main__":
    main()
