"""What a start of bantam imports: each path loads what it needs, when it needs it.

Start-up is mostly imports, so these tests pin them, not times (bench/RESULTS.md has the times):
a real interpreter runs the real entry point, `bantam.cli.main` on the process's own arguments
as the installed `bantam` script and `python -m bantam` run it, and reports which modules it imported
beyond the interpreter's own start.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


# The console script's body, and last on stderr the modules it added to the interpreter's own.
ENTRY = """
import json, sys
before = set(sys.modules)
try:
    from bantam.cli import main
    sys.exit(main())
finally:
    sys.stdout.flush()
    print(json.dumps(sorted(set(sys.modules) - before)), file=sys.stderr)
"""


def imported(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `bantam ARGS...` as the console script does; (the process, the modules it imported)."""
    r = subprocess.run([sys.executable, "-c", ENTRY, *args], cwd=cwd, capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    *_, report = r.stderr.splitlines() or [""]
    return r, set(json.loads(report))


def test_version_imports_nothing_but_the_entry_point(home):
    """`bantam --version` is what shells, scripts and installers run: it answers before argparse,
    the subcommand table, the configuration or the error tree are loaded."""
    r, modules = imported("--version", cwd=home)
    assert r.returncode == 0 and r.stdout.startswith("bantam "), r.stderr
    assert modules <= {"bantam", "bantam.cli", "__future__"}, sorted(modules)


def test_the_installed_command_imports_nothing_else_for_version(home):
    """The `bantam` file the install puts beside the interpreter: a plain script, so `--version`
    costs the interpreter's start and bantam.cli alone (pip's generated console script imports
    and compiles a regular expression on every start: 1.72x `python -c pass` in instructions
    against 1.06x, bench/RESULTS.md)."""
    script = Path(sys.executable).parent / "bantam"
    assert script.is_file(), f"{script}: not installed (pip install -e .)"

    def modules(*args: str) -> set[str]:
        r = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=home, capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, timeout=120)
        assert r.returncode == 0, r.stderr
        return {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    added = modules(str(script), "--version") - modules("-c", "pass")
    assert added <= {"bantam", "bantam.cli", "__future__"}, sorted(added)


def test_version_among_other_words_is_still_argparse(home):
    """Only the bare `--version` is answered early; with anything else argparse decides, as before."""
    r, modules = imported("--model", "m", "--version", cwd=home)
    assert r.returncode == 0 and r.stdout.startswith("bantam "), r.stderr
    assert "argparse" in modules
    r, _ = imported("-p", "--version", cwd=home)
    assert r.returncode == 2 and "expected one argument" in r.stderr


# Modules a one-shot answer must not load, each with the path that does need it.
NOT_FOR_AN_ANSWER = {
    "bantam.undo": "--thread (its turns are recorded for bantam undo) and bantam undo",
    "difflib": "a mistyped subcommand, option or configuration key",
    "platform": "nothing: os.uname() says the machine",
    "pydantic": "controlled runs",
    "rich": "the terminal",
    "prompt_toolkit": "the terminal",
    "bantam.repl": "the terminal",
    "llama_cpp": "the embedded model",
    "mcp": "MCP servers, when a configuration names one",
}


def test_a_one_shot_answer_imports_only_what_it_needs(home, server):
    """`bantam -p TEXT` answered by a real local server: what only a rarer path needs stays unloaded."""
    from tests.conftest import base_cfg, write_cfg
    from tests.fakes.openai_server import text_reply
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("ok"))
    r, modules = imported("-p", "say ok", cwd=home)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    loaded = {m: why for m, why in NOT_FOR_AN_ANSWER.items() if m in modules or any(
        name.startswith(m + ".") for name in modules)}
    assert not loaded, f"a one-shot answer imported what only these need: {loaded}"
