"""Start-up, paired: this tree beside an earlier one, and `bantam --version` beside `python -c pass`.

    git worktree add /tmp/before REV     # the tree to compare with (any checkout's src/ will do)
    .venv/bin/python bench/bench_start.py --before /tmp/before/src [--after SRC] --runs 11 [--write]

1. `bantam --version` as this venv's console script runs it, CPU (user + system, from wait4) and
   wall time, beside `python -c pass`; with --before, the same script on the earlier tree
   (PYTHONPATH). A console script made by pip before version 26 imports `re` itself (to trim
   ".exe" from argv[0]); the row "script without re" is the same script as uv and pip 26 write it.
2. Process start to the first model request (bench_peers' measure and command line), this tree
   and the earlier one, beside a floor: a script that only imports httpx, makes a client for a
   plain-HTTP endpoint as bantam does and sends one request.
Each round runs every case once, in turn, so load on the machine falls on all of them alike; a
ratio is taken round by round (paired) and its median reported, with the load average.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import BANTAM, PY, machine, write_results  # noqa: E402
from bench.bench_peers import ScriptServer, command, execute, interleave  # noqa: E402

BEGIN, END = "<!-- bench_start:begin -->", "<!-- bench_start:end -->"
NO_RE_SCRIPT = (f"#!{PY}\nimport sys\nfrom bantam.cli import main\nif __name__ == '__main__':\n"
                "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(main())\n")
FLOOR = """import json, ssl, sys
sys.modules["httpx._main"] = None  # as bantam loads it (providers/http.py load_httpx)
import httpx
client = httpx.Client(verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
body = {"model": "test-model", "messages": [{"role": "user", "content": "go"}], "stream": True}
client.post(sys.argv[1] + "/chat/completions", content=json.dumps(body)).read()
"""


def on(src: str | None) -> dict[str, str]:
    """The environment that runs bantam from `src` (None: the tree installed in this venv), with
    bytecode written and read as an installed bantam has it (the untimed first run writes it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "PYTHONPATH": src} if src else env


def cpu_wall(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run to its exit."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, cmd
    return usage.ru_utime + usage.ru_stime, time.monotonic() - t0


def first_request(src: str | None) -> float:
    """Seconds from the exec of bantam (or the floor, src "floor") to its first request's arrival."""
    with ScriptServer(0) as server, tempfile.TemporaryDirectory() as work:
        if src == "floor":
            Path(work, "floor.py").write_text(FLOOR)
            cmd = [PY, str(Path(work, "floor.py")), server.url]
        else:
            cmd = command("bantam", server.url, work)
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(on(None if src == "floor" else src))
        try:
            _, _, t0 = execute(cmd, work)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return server.arrivals[0] - t0


def row(name: str, values: list[float], base: list[float] | None) -> str:
    ratio = f"{statistics.median(a / b for a, b in zip(values, base, strict=True)):.2f}x" if base else "—"
    return (f"| {name} | {min(values) * 1e3:.1f} | {statistics.median(values) * 1e3:.1f} | "
            f"{max(values) * 1e3:.1f} | {ratio} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="src/ of the tree to compare with")
    ap.add_argument("--after", help="src/ of the tree measured (default: the one installed in this venv)")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--write", action="store_true", help="put the tables in bench/RESULTS.md")
    args = ap.parse_args()
    no_re = Path(tempfile.mkdtemp(), "bantam")
    no_re.write_text(NO_RE_SCRIPT)
    no_re.chmod(0o755)
    trees = {"this tree": args.after, **({"before": args.before} if args.before else {})}
    load = os.getloadavg()[0]
    cases = {"`python -c pass`": lambda: cpu_wall([PY, "-c", "pass"], on(None))}
    for name, src in trees.items():
        cases[f"`bantam --version`, {name}"] = lambda src=src: cpu_wall([BANTAM, "--version"], on(src))
    cases["`bantam --version`, this tree, script without re"] = lambda: cpu_wall([str(no_re), "--version"],
                                                                              on(args.after))
    version = interleave(args.runs, cases)
    floor = [cpu for cpu, _ in version["`python -c pass`"]]
    floor_wall = [wall for _, wall in version["`python -c pass`"]]
    head = "| command | min ms | median ms | max ms | {} |\n|---|---:|---:|---:|---:|"
    cpu_rows = [row(k, [c for c, _ in v], floor) for k, v in version.items()]
    wall_rows = [row(k, [w for _, w in v], floor_wall) for k, v in version.items()]
    first = interleave(args.runs, {**{name: (lambda src=src: first_request(src)) for name, src in trees.items()},
                               "floor: import httpx, one request": lambda: first_request("floor")})
    base = first.get("before")
    first_rows = [row(k, v, base if k != "before" else None) for k, v in first.items()]
    section = "\n".join([
        "## Start-up, paired: `--version` and the first model request", "",
        "Command: `.venv/bin/python bench/bench_start.py --before BEFORE/src --after AFTER/src --runs "
        f"{args.runs} --write` (BEFORE, AFTER: checkouts of the trees compared)", "",
        f"Machine: {machine()} Load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
        "", f"### `bantam --version`: CPU (user + system), {args.runs} rounds", "",
        head.format("over `python -c pass`, paired"), *cpu_rows, "",
        "### `bantam --version`: wall, the same runs", "", head.format("over `python -c pass`, paired"), *wall_rows,
        "", f"### Process start to the first model request, {args.runs} rounds", "",
        head.format("over before, paired" if base else "—"), *first_rows])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
