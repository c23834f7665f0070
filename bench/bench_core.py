"""Core benchmarks: bantam's start-up time and per-step harness overhead, each beside a floor.

    .venv/bin/python bench/bench_core.py --write    # from the repository root; --runs N, --reps N

1. Start-up: `bantam --version` (console script and `python -m bantam`) against `python -c pass`
   (the interpreter floor) and `python -c "import httpx"` (what any httpx-based agent pays).
2. A 50-step conversation against the in-process fake server (tests/fakes), which answers at once:
   49 `shell_exec` calls of `true N`, then a text answer. `bantam -p go` against a floor peer, a
   bare script doing the same 50 streamed requests with httpx over one connection, the same SSE
   parsing and the same 49 `bash -c "true N"`. Overhead per step = (bantam - floor) / 50.
3. Start-up to the first interactive prompt on a pseudo-terminal: `bantam` against a bare
   prompt_toolkit `PromptSession().prompt()`, the floor for any REPL built on that editor.
Runs of the compared commands are interleaved so drift on the machine hits all of them alike.
Prints markdown tables; --write puts them in bench/RESULTS.md (between this script's markers).
Standard library and httpx only. No timing here is asserted anywhere.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply  # noqa: E402

PY = sys.executable
BANTAM = str(Path(PY).parent / "bantam")
STEPS = 50
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- bench_core:begin -->", "<!-- bench_core:end -->"

FLOOR_PEER = r'''
import json, subprocess, sys, httpx
url, messages = sys.argv[1] + "/chat/completions", [{"role": "user", "content": "go"}]
tools = [{"type": "function", "function": {"name": "shell_exec", "description": "run a command",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
with httpx.Client(timeout=30) as client:
    while True:
        calls, text = {}, []
        body = {"model": "test-model", "messages": messages, "tools": tools, "stream": True}
        with client.stream("POST", url, json=body) as r:
            for line in r.iter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                for choice in json.loads(line[5:]).get("choices") or []:
                    delta = choice["delta"]
                    text.append(delta.get("content") or "")
                    for tc in delta.get("tool_calls") or []:
                        c = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                        c["id"] = tc.get("id") or c["id"]
                        c["name"] += (tc.get("function") or {}).get("name") or ""
                        c["arguments"] += (tc.get("function") or {}).get("arguments") or ""
        if not calls:
            print("".join(text))
            break
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls.values()]})
        for c in calls.values():
            p = subprocess.run(["bash", "-c", json.loads(c["arguments"])["command"]],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            messages.append({"role": "tool", "tool_call_id": c["id"],
                             "content": f"{p.stdout.decode()}\n\nexit: {p.returncode}"})
'''


def as_installed(env: dict[str, str]) -> dict[str, str]:
    """`env` without PYTHONDONTWRITEBYTECODE, so a source tree's bytecode is written on its first
    (untimed) run and read after, as from an installed package: compiling bantam's sources at
    every start costs some 50 ms a user does not pay, and a tree compared without bytecode (a
    `git archive` copy) would lose to one that has it for that reason alone."""
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], **kw) -> float:
    """Seconds one run of `cmd` takes; a failing run stops the benchmark."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kw)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return elapsed


def interleaved(cases: dict[str, object], n: int) -> dict[str, list[float]]:
    """Call each case's function n times, round-robin after one untimed warm-up each; seconds."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(n):
        for name, fn in cases.items():
            times[name].append(fn())
    return times


def conversation(runner) -> float:
    """Serve the 50-step script on a fresh fake server, run `runner(url, workdir)`, return seconds."""
    script = [tool_reply("shell_exec", {"command": f"true {i}"}, call_id=f"call_{i}")
              for i in range(1, STEPS)] + [text_reply("done")]
    server = FakeServer(script)
    with server, tempfile.TemporaryDirectory() as work:
        seconds = runner(server.url, work)
        if len(server.chat_requests()) != STEPS or server.script:
            sys.exit(f"bench: expected {STEPS} chat requests, got {len(server.chat_requests())}")
    return seconds


def bantam_setup(url: str, work: str) -> tuple[list[str], dict[str, str]]:
    """The folder configured for the server, and bantam's command and environment (HOME is the
    folder, no configuration of the person running the bench). --yolo: the floor runs its
    commands bare, so bantam runs them without the sandbox (whose cost is bench_sandbox.py's
    table), switched off as a user does it: a project file's sandbox=off is ignored until the
    user trusts the folder."""
    Path(work, ".bantam.cfg").write_text(f"endpoint={url}\nmodel=test-model\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "BANTAM_", "AGENT_")) and k != "XDG_CONFIG_HOME"}
    return [BANTAM, "--yolo"], {**env, "HOME": work}


def run_bantam(url: str, work: str) -> float:
    command, env = bantam_setup(url, work)
    return timed([*command, "-p", "go"], cwd=work, env=env)


def run_floor(url: str, work: str) -> float:
    script = Path(work, "floor.py")
    script.write_text(FLOOR_PEER)
    return timed([PY, str(script), url], cwd=work)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def startup_table(n: int) -> str:
    cases = {"`python -c pass` (floor)": [PY, "-c", "pass"],
             "`python -c \"import httpx\"` (peer)": [PY, "-c", "import httpx"],
             "`bantam --version`": [BANTAM, "--version"],
             "`python -m bantam --version`": [PY, "-m", "bantam", "--version"]}
    times = interleaved({k: (lambda c=c: timed(c)) for k, c in cases.items()}, n)
    floor = statistics.median(next(iter(times.values())))
    rows = [f"| {name} | {ms(min(t))} | {ms(statistics.median(t))} | {ms(max(t))} | "
            f"{'—' if i == 0 else '+' + ms(statistics.median(t) - floor)} |"
            for i, (name, t) in enumerate(times.items())]
    return "\n".join([f"### Start-up ({n} runs each)", "",
                      "| command | min ms | median ms | max ms | median over floor ms |",
                      "|---|---:|---:|---:|---:|", *rows])


def loop_table(reps: int) -> str:
    times = interleaved({"floor: httpx + subprocess, no harness": lambda: conversation(run_floor),
                         "`bantam -p go`": lambda: conversation(run_bantam)}, reps)
    rows = [f"| {name} | {ms(min(t))} | {ms(statistics.median(t))} | {ms(max(t))} | "
            f"{ms(statistics.median(t) / STEPS)} |" for name, t in times.items()]
    floor, bantam = times.values()
    per_step = {f: (f(bantam) - f(floor)) / STEPS for f in (min, statistics.median)}
    return "\n".join([f"### {STEPS}-step tool-calling conversation ({reps} repetitions each)", "",
                      "| run | min ms | median ms | max ms | median per step ms |",
                      "|---|---:|---:|---:|---:|", *rows, "",
                      f"Harness overhead per step, (bantam - floor) / {STEPS}: "
                      f"**{ms(per_step[statistics.median])} ms** on medians, "
                      f"{ms(per_step[min])} ms on minimums."])


PROMPT_READY = b"\x1b[?2004h"  # prompt_toolkit turns on bracketed paste when a prompt starts
PEER_PROMPT = "from prompt_toolkit import PromptSession; PromptSession().prompt('> ')"


def to_prompt(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    """Seconds from spawning `cmd` on a pseudo-terminal to its first prompt; then it is killed."""
    import pty
    import select
    leader, follower = pty.openpty()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env,
                         start_new_session=True)
    os.close(follower)
    seen = b""
    try:
        while PROMPT_READY not in seen:
            if time.perf_counter() - t0 > 30 or not select.select([leader], [], [], 30)[0]:
                sys.exit(f"bench: no prompt from {cmd}: {seen[-500:]!r}")
            seen += os.read(leader, 65536)
        return time.perf_counter() - t0
    finally:
        p.kill()
        p.wait()
        os.close(leader)


def prompt_table(n: int) -> str:
    """Start-up to the first interactive prompt: bantam against a bare prompt_toolkit prompt."""
    with FakeServer() as server, tempfile.TemporaryDirectory() as work:
        Path(work, ".bantam.cfg").write_text(f"endpoint={server.url}\nmodel=test-model\n")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "BANTAM_", "AGENT_"))},
               "HOME": work, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
        cases = {"bare `PromptSession().prompt()` (peer)": [PY, "-c", PEER_PROMPT], "`bantam`": [BANTAM]}
        times = interleaved({k: (lambda c=c: to_prompt(c, work, env)) for k, c in cases.items()}, n)
    rows = [f"| {name} | {ms(min(t))} | {ms(statistics.median(t))} | {ms(max(t))} |"
            for name, t in times.items()]
    return "\n".join([f"### Start-up to the first interactive prompt ({n} runs each, on a pseudo-terminal)", "",
                      "| command | min ms | median ms | max ms |", "|---|---:|---:|---:|", *rows])


def machine() -> str:
    version = subprocess.run([BANTAM, "--version"], capture_output=True, text=True).stdout.strip()
    import httpx
    return (f"Python {platform.python_version()} ({PY}), httpx {httpx.__version__}, {version}; "
            f"{platform.system()} {platform.release()} {platform.machine()}, "
            f"nproc {len(os.sched_getaffinity(0))}; "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.")


def write_results(section: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace this script's section of bench/RESULTS.md (between its markers), or add it."""
    block = f"{begin}\n{section}\n{end}"
    text = RESULTS.read_text() if RESULTS.exists() else (
        "# Benchmark results\n\nMeasured by the scripts in `bench/`; each section says the command "
        "that produced it. Numbers are wall-clock times on the machine named; compare rows within "
        "one section, not across machines.\n\n")
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="start-up runs per command (default 20)")
    ap.add_argument("--reps", type=int, default=5, help="conversation repetitions (default 5)")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = ap.parse_args()
    section = "\n".join([
        "## Core: start-up and harness overhead per loop step", "",
        "`bantam` beside a floor doing the same work with no harness, in one run; the fake server "
        "(tests/fakes/openai_server.py) answers at once, so only client-side cost "
        "is measured. bantam also makes one `GET /models` at the end (the context window for its "
        "footer); the floor does not.", "",
        "Command: `.venv/bin/python bench/bench_core.py --write`", "",
        f"Machine: {machine()}", "", startup_table(args.runs), "", prompt_table(args.runs), "",
        loop_table(args.reps)])
    print(section)
    if args.write:
        write_results(section)


if __name__ == "__main__":
    main()
