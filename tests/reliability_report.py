"""Write docs/reliability.md: every fault and attack, where it was tried, how often, what happened.

    .venv/bin/python -m tests.reliability_report            # from the repository root
    .venv/bin/python -m tests.reliability_report --kills 200 --trials 3

It runs the same cases as the test suite (tests/reliability.py, tests/crash.py, the hostile and
fuzz tests) and records their outcomes, so the table is a measurement, not a claim.
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from tests.crash import crash_trials
from tests.fakes.faults import FAULTS, RECOVERS
from tests.reliability import MODES, WIRES, run_case

ROOT = Path(__file__).resolve().parent.parent
DESCRIPTIONS = {
    "refuse": "connection refused", "reset": "connection reset mid-stream", "stall": "stream stalls past the timeout",
    "truncated": "stream ends with no end marker", "invalid_json": "invalid JSON in a chunk",
    "429_retry_after": "429 with Retry-After", "429": "429 without Retry-After", "500": "500", "502": "502",
    "503": "503", "529": "529 overloaded", "html_502": "502 HTML error page", "html_200": "HTML page with 200",
    "empty_200": "empty 200", "endless": "stream of keep-alives that never ends"}


def fault_rows(trials: int) -> list[str]:
    rows = []
    for name in FAULTS:
        tried, failed = defaultdict(int), []
        for wire in WIRES:
            for mode in MODES:
                if name == "refuse" and mode == "subagent":
                    continue  # a closed port cannot fail the child alone; the parent's cases cover it
                for _ in range(trials):
                    with tempfile.TemporaryDirectory() as tmp:
                        problem = run_case(name, mode, wire, Path(tmp))
                    tried[mode] += 1
                    if problem:
                        failed.append(f"{mode}/{wire}: {problem[:120]}")
        outcome = ("retried, then answered" if RECOVERS[name] else
                   "one clear error, exit 1 (the daemon logs it and stays up)") + \
            ("; nothing partial on disk" if not failed else "")
        rows.append(f"| {DESCRIPTIONS[name]} | {', '.join(tried)} × {' and '.join(WIRES)} | "
                    f"{sum(tried.values())} | {'FAILED: ' + '; '.join(failed) if failed else 'ok: ' + outcome} |")
    return rows


def pytest_row(label: str, test: str, modes: str) -> str:
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=ROOT,
                       capture_output=True, text=True)
    summary = (r.stdout.strip().splitlines() or ["?"])[-1]
    return f"| {label} | {modes} | {summary.split(' in ')[0]} | {'ok' if r.returncode == 0 else 'FAILED'} |"


def TRUST_ROWS() -> list[str]:
    """Issue 13's attacks: credentials, key routing, piped commands, bounded reads, process lifetime,
    the browser view, controlled runs, bad input."""
    return [
        pytest_row("a model runs `env` (one-shot, --json, thread, handler, terminal, sub-agent, daemon BASH, run check) with "
                   "OPENAI_API_KEY, ATTOBOT_API_KEY, GITHUB_TOKEN, DB_PASSWORD and a URL password set; `cat` "
                   "of a config holding the api_key; an env key with no endpoint; `!cmd` piped in; nan/1e400/"
                   "ftp:// values, an unknown tool, a line break in /cfg; a named pipe in --workspace; "
                   "CRLF, emoji, ZWNJ and bidi content in write_file; writes through symlinks",
                   "tests/test_trust.py", "one-shot, json, thread, handler, terminal, sub-agent, daemon, run, config"),
        pytest_row("SIGTERM, SIGHUP, SIGKILL of bantam while a command (with a background child) runs; "
                   "SIGKILL of the daemon, of its supervisor, of a controlled run during its check; servers "
                   "sending an endless SSE line, an endless JSON body (stream true and false), an endless "
                   "model list and an endless page, peak RSS measured (limit 300 MB)",
                   "tests/test_lifetime.py", "one-shot, daemon, supervisor, run, models"),
        pytest_row("the browser view: a foreign Host (DNS rebinding), symlinks to model.cfg and .git, the "
                   "printed token reused from history, a short web_password, a model that cats model.cfg",
                   "tests/web/test_trust_web.py", "web"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1, help="trials of each fault in each mode and wire format")
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1235)
    args = ap.parse_args()
    rows = fault_rows(args.trials)
    with tempfile.TemporaryDirectory() as tmp:
        survived, problems = crash_trials(args.kills, args.seed, Path(tmp))
    rows.append(f"| SIGKILL at random moments (seed {args.seed}), then every file loaded and the work resumed | "
                f"one-shot thread runs, with durable sub-agents | {survived} kills | "
                f"{'FAILED: ' + '; '.join(problems[:3]) if problems else 'ok: all files loaded, every resume finished'} |")
    rows += [
        pytest_row("hostile tool use: many children, SIGTERM ignored, binary output, `cd`, bad write_file arguments, "
                   "thousands of tool calls, invisible-Unicode injection, wrong types, unknown tools, file modes, "
                   "a readable config holding a key", "tests/test_hostile.py", "tools, loop, one-shot"),
        pytest_row("gigabyte output, endless commands, process-group kill, clipping (tool tests)",
                   "tests/tools/test_tools.py", "shell_exec, write_file, sanitiser"),
        pytest_row("fuzzing (hypothesis): config file, SSE lines, OpenAI and Anthropic streams, tool arguments",
                   "tests/test_fuzz.py", "parsers"),
        *TRUST_ROWS(),
    ]
    text = "\n".join([
        "# Reliability", "",
        "Each row was run by `.venv/bin/python -m tests.reliability_report` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; the same cases run in the test suite "
        "(`tests/test_reliability.py`, `tests/test_crash_safety.py`, `tests/test_hostile.py`, `tests/test_fuzz.py`).",
        "A fault case passes when bantam either retries and answers, or stops with one `error:` line and exit 1, "
        "and the thread, session or sub-agent result it leaves is complete (never a partial message), and the API "
        "key appears in no file.", "",
        "| fault or attack | modes | trials | outcome |", "|---|---|---:|---|", *rows, ""])
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "reliability.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
