"""Work done: small real tasks, each checked by its result, bantam beside mini-swe-agent and llm on one model.

    .venv/bin/python bench/bench_tasks.py --model PATH.gguf --write     # from the repository root
    .venv/bin/python bench/bench_tasks.py --list                        # the tasks
    .venv/bin/python bench/bench_tasks.py --agents bantam --tasks count-py,fix-bug

Each task runs in a fresh folder this script makes, with the files it needs, and is checked by what
is there afterwards: a file's content (a question's answer is asked for in a file such as answer.txt,
compared after normalising case, quotes and a trailing dot, never searched for in the agent's words),
a script's exit code or output, a test that passes. The tasks are what a user asks a coding agent
for in a small project: find and read, count and list, run and report, write, append and edit,
fix a bug against a given test, add a function with its test, rename a symbol or files, answer a
question about a codebase, and a few that take several steps.

One model for every agent, served the same way: llama-cpp-python's OpenAI-compatible server
(`python -m llama_cpp.server`, one process started here and shared) on the GGUF given by --model,
with the chat template the GGUF carries, the same n_ctx, behind a small proxy in this process that
- counts every request's prompt and completion tokens from the server's `usage` (every agent is
  counted the same way, whether it streams or not: the proxy asks the server without streaming and
  streams the finished answer back to a client that asked for a stream);
- makes every request greedy and reproducible (temperature 0, --seed) with at most --max-tokens;
- speaks the model's own tool-call format: Qwen2.5's template asks for `<tool_call>{"name": ...,
  "arguments": ...}</tool_call>`, which llama_cpp.server returns as plain text (no chat_format of
  it parses that: `chatml-function-calling` drops tool results from the prompt and offers tools only
  when a request names tool_choice), so the proxy turns that text, or a bare or fenced JSON object
  naming an offered tool, or one inside the other tags llama.cpp's own server accepts for this
  family (`<tools>`, `<function_call>`, `<json>`, ...), or the same object in doubled braces (`{{"name": ...}}`, as Qwen2.5-Coder's template itself shows the format), into
  `tool_calls`;
  and it sends `content: ""` for an assistant message whose content is null (the server refuses
  null with a validation error, and every tool-calling client sends it); a request with
  `tool_choice: "required"` gets a grammar that holds the reply to one call of an offered tool,
  as llama.cpp's own server does (llama_cpp.server ignores "required");
- stops a run at --steps model requests (each agent's own limit is set to the same number too).
The agents, each in a temporary HOME, commands run bare (no sandbox) as the peers run theirs:
- bantam: `bantam -p TASK --yolo`, endpoint, model and limits in `~/.config/bantam/config`;
- bantam-aids: the same with `local_aids=qwen2.5-coder` there too, as a user serving this small
  model sets it: the aids a request can carry (the worked exchange, whole-file writes, "(no
  output)", `tool_choice: "required"` where the bundled runtime's grammar would force a call);
- mini-swe-agent: `mini -t TASK -y --exit-immediately` on its default tool-calling config (mini.yaml)
  through litellm, step_limit set; it stops when it runs `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`;
- llm: `llm --functions tools.py --chain-limit` with a shell tool and a write-file tool.
Per agent: tasks solved, tokens and seconds per solved task, and how unsolved runs ended (a loop:
the same call three times at the end; an error; a limit: steps or time). Transcripts (the model's
requests and answers, each agent's output) are kept under --logs for reading.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import BANTAM, PY, machine, write_results  # noqa: E402
from bench.bench_peers import LLM_TOOLS, PEERS, clean_env, ensure_peers, peer_version  # noqa: E402

BEGIN, END = "<!-- bench_tasks:begin -->", "<!-- bench_tasks:end -->"
MODELS = Path(os.environ.get("BANTAM_BENCH_MODELS", "/work/models"))
DEFAULT_MODEL = os.environ.get("BANTAM_BENCH_MODEL", str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
AGENTS = ("bantam", "bantam-aids", "mini", "llm")
AIDS_PROFILE = "qwen2.5-coder"  # bantam-aids' local_aids: the profile of the model family benched here
CACHE_BYTES = 48 << 20  # the server's prompt cache, as it counts it (see server_command)

# llm's tools: bench_peers' shell tool, and a write-file tool as bantam and mini-swe-agent's
# heredocs have one (a small model writes files far more reliably through an argument than
# through shell quoting).
LLM_WORK_TOOLS = LLM_TOOLS + '''

def write_file(path: str, content: str) -> str:
    "Write content to the file at path (relative to the current folder), replacing what it held."
    import os
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        f.write(content)
    return f"wrote {len(content)} characters to {path}"
'''


# --- the tasks ---------------------------------------------------------------------------------

Check = Callable[[Path], "tuple[bool, str]"]


@dataclass(frozen=True)
class Task:
    name: str
    kind: str
    prompt: str
    files: dict[str, str]
    check: Check
    executable: tuple[str, ...] = ()

    def setup(self, folder: Path) -> None:
        for rel, text in self.files.items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if rel in self.executable:
                path.chmod(0o755)


def normal(text: str) -> str:
    """An answer as written to a file, compared without case, surrounding quotes or backticks,
    a trailing dot, or a leading ./ on a path."""
    text = text.strip().strip("`'\"").strip().rstrip(".").strip()
    return text.removeprefix("./").lower()


def read(folder: Path, name: str) -> str | None:
    try:
        return (folder / name).read_text(errors="replace")
    except OSError:
        return None


def answer_is(name: str, *accepted: str, file: str = "answer.txt") -> Check:
    def check(folder: Path) -> tuple[bool, str]:
        text = read(folder, file)
        if text is None:
            return False, f"no {file}"
        got = normal(text)
        return got in {normal(a) for a in accepted}, f"{file}: {text.strip()[:80]!r}"
    check.__name__ = f"{name}_answer"
    return check


def file_is(file: str, expected: str, *, normalise: Callable[[str], str] = lambda s: s.strip()) -> Check:
    def check(folder: Path) -> tuple[bool, str]:
        text = read(folder, file)
        if text is None:
            return False, f"no {file}"
        return normalise(text) == normalise(expected), f"{file}: {text.strip()[:120]!r}"
    return check


def run(folder: Path, *cmd: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", "timed out")


def all_of(*checks: Check) -> Check:
    def check(folder: Path) -> tuple[bool, str]:
        for c in checks:
            ok, why = c(folder)
            if not ok:
                return False, why
        return True, "ok"
    return check


def unchanged(task_files: dict[str, str], *names: str) -> Check:
    """The given files are as the task wrote them (a test the agent must make pass, not edit)."""
    def check(folder: Path) -> tuple[bool, str]:
        for name in names:
            if read(folder, name) != task_files[name]:
                return False, f"{name} was changed"
        return True, "ok"
    return check


def passes(*cmd: str, output: str | None = None) -> Check:
    """`cmd` exits 0 in the folder (and prints `output`, stripped, when given)."""
    def check(folder: Path) -> tuple[bool, str]:
        p = run(folder, *cmd)
        if p.returncode != 0:
            return False, f"{' '.join(cmd)}: exit {p.returncode}: {(p.stdout + p.stderr).strip()[-160:]!r}"
        if output is not None and p.stdout.strip() != output:
            return False, f"{' '.join(cmd)} printed {p.stdout.strip()[:120]!r}"
        return True, "ok"
    return check


def python_says(code: str) -> Check:
    """A hidden check of the agent's code: `code` run by python3 in the folder exits 0."""
    return passes("python3", "-c", code)


def same_lines(file: str, expected: list[str], ordered: bool = True) -> Check:
    def check(folder: Path) -> tuple[bool, str]:
        text = read(folder, file)
        if text is None:
            return False, f"no {file}"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not ordered:
            lines = sorted(normal(Path(line).name) for line in lines)
            return lines == sorted(expected), f"{file}: {lines}"
        return lines == expected, f"{file}: {lines}"
    return check


def no_text(pattern: str, glob: str) -> Check:
    def check(folder: Path) -> tuple[bool, str]:
        hits = [str(p.relative_to(folder)) for p in folder.rglob(glob) if pattern in p.read_text(errors="replace")]
        return not hits, f"{pattern!r} still in {hits}"
    return check


def paths_are(expected: dict[str, str], gone: tuple[str, ...] = ()) -> Check:
    """Each expected path holds its text; each of `gone` is no longer there."""
    def check(folder: Path) -> tuple[bool, str]:
        for name, text in expected.items():
            if read(folder, name) != text:
                return False, f"{name} missing or changed"
        for name in gone:
            if (folder / name).exists():
                return False, f"{name} still there"
        return True, "ok"
    return check


def lines_of(n: int, word: str) -> str:
    return "".join(f"2026-11-{1 + i % 28:02d} {word} request {i}\n" for i in range(n))


CALC = {"calc.py": "def add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n",
        "test_calc.py": "from calc import add, multiply\n\nassert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
                        "assert multiply(3, 4) == 12\nprint(\"all tests passed\")\n"}
LISTS = {"lists.py": "def last(items):\n    \"\"\"The last item of a non-empty list.\"\"\"\n    return items[len(items)]\n",
         "test_lists.py": "from lists import last\n\nassert last([1, 2, 3]) == 3\nassert last([\"a\"]) == \"a\"\n"
                          "print(\"ok\")\n"}
MATH = {"mathutils.py": "def square(x):\n    return x * x\n",
        "test_mathutils.py": "from mathutils import square\n\nassert square(3) == 9\nprint(\"ok\")\n"}
SHOP = {"shop/__init__.py": "",
        "shop/prices.py": "def calc_total(prices):\n    return sum(prices)\n",
        "shop/cart.py": "from shop.prices import calc_total\n\n\ndef cart_total(items):\n"
                        "    return calc_total([price for _, price in items])\n",
        "main.py": "from shop.cart import cart_total\nfrom shop.prices import calc_total\n\n"
                   "print(calc_total([1, 2]), cart_total([(\"pen\", 3), (\"ink\", 4)]))\n"}
TEXTUTILS = {"textutils.py": "def shout(text):\n    return text.upper() + \"!\"\n\n\ndef is_palindrome(word):\n"
                             "    word = word.lower()\n    return word == word[::1]\n\n\ndef count_vowels(text):\n"
                             "    return sum(1 for c in text.lower() if c in \"aeiou\")\n",
             "test_textutils.py": "from textutils import count_vowels, is_palindrome, shout\n\n"
                                  "assert shout(\"hi\") == \"HI!\"\nassert is_palindrome(\"Level\")\n"
                                  "assert not is_palindrome(\"python\")\nassert count_vowels(\"banana\") == 3\n"
                                  "print(\"3 tests passed\")\n"}
GREET = {"app.py": "import json\n\nconfig = json.load(open(\"config.json\"))\nprint(\"Hello, \" + config[\"name\"] + \"!\")\n",
         "config.json": "{\"nmae\": \"Ada\", \"theme\": \"dark\"}\n"}
STORY = ("The colour of the sea changed at dusk.\nShe painted the door a bright colour.\n"
         "Nobody agreed on the colour of the old bridge.\n")
INI = "[server]\nhost = localhost\ntimeout = 30\nretries = 5\n"


def ini_lines(text: str) -> list[str]:
    return [re.sub(r"\s*=\s*", " = ", line.strip()) for line in text.splitlines() if line.strip()]


TASKS: list[Task] = [
    # find and read
    Task("find-word", "find and read",
         "Which file in the notes folder mentions a pelican? Write just the file name into answer.txt.",
         {"notes/monday.txt": "Meeting with the design team.\nLunch at noon.\n",
          "notes/tuesday.txt": "Call the bank.\nA pelican landed on the pier.\n",
          "notes/wednesday.txt": "Dentist at 3pm.\nBuy stamps.\n"},
         answer_is("find-word", "tuesday.txt", "notes/tuesday.txt")),
    Task("package-version", "find and read",
         "What version is set in package.json? Write only the version number into answer.txt.",
         {"package.json": json.dumps({"name": "widget", "version": "3.14.2", "private": True,
                                      "dependencies": {"left-pad": "1.3.0"}}, indent=2) + "\n"},
         answer_is("package-version", "3.14.2", "v3.14.2")),
    Task("config-port", "find and read",
         "Which port does the server use according to config/settings.yaml? Write only the number into answer.txt.",
         {"config/settings.yaml": "server:\n  host: 0.0.0.0\n  port: 8042\ndatabase:\n  host: db\n  port: 5432\n"},
         answer_is("config-port", "8042")),
    # count and list over a tree
    Task("count-py", "count and list", "How many .py files are there in this folder, subfolders included? "
         "Write the number into answer.txt.",
         {"app/main.py": "print('main')\n", "app/util.py": "X = 1\n", "app/models/user.py": "class User: pass\n",
          "app/models/order.py": "class Order: pass\n", "tests/test_main.py": "assert True\n", "setup.py": "# setup\n",
          "README.md": "# app\n", "app/data.json": "{}\n", "docs/guide.txt": "read me\n"},
         answer_is("count-py", "6")),
    Task("largest-file", "count and list", "Which file in the data folder is the largest? Write its name into answer.txt.",
         {"data/jan.csv": "day,value\n" + "1,10\n" * 20, "data/feb.csv": "day,value\n" + "1,10\n" * 900,
          "data/mar.csv": "day,value\n" + "1,10\n" * 150, "data/notes.txt": "n" * 2000 + "\n"},
         answer_is("largest-file", "feb.csv", "data/feb.csv")),
    Task("count-lines", "count and list", "How many lines does server.log have? Write the number into answer.txt.",
         {"server.log": lines_of(37, "GET")}, answer_is("count-lines", "37")),
    Task("list-md", "count and list",
         "Write the names of the .md files in the docs folder into md_files.txt, one name per line.",
         {"docs/intro.md": "# Intro\n", "docs/setup.md": "# Setup\n", "docs/faq.md": "# FAQ\n", "docs/logo.png": "png",
          "docs/notes.txt": "notes\n", "README.md": "# top\n"},
         same_lines("md_files.txt", ["faq.md", "intro.md", "setup.md"], ordered=False)),
    # run a script and report
    Task("run-script", "run and report", "Run compute.py with python3 and write what it prints into output.txt.",
         {"compute.py": "total = sum(i * i for i in range(1, 11))\nprint(total)\n"},
         answer_is("run-script", "385", file="output.txt")),
    Task("exit-code", "run and report", "Run ./check.sh and write its exit code into answer.txt.",
         {"check.sh": "#!/bin/sh\necho checking the disk\nexit 3\n"}, answer_is("exit-code", "3"),
         executable=("check.sh",)),
    # write a file
    Task("write-greeting", "write", "Create a file greeting.txt that contains exactly this line: Hello, bantam!",
         {}, file_is("greeting.txt", "Hello, bantam!")),
    Task("write-json", "write", "Create settings.json containing a JSON object with \"debug\" set to true and "
         "\"retries\" set to 3.", {},
         python_says("import json; assert json.load(open('settings.json')) == {'debug': True, 'retries': 3}")),
    Task("write-script", "write", "Write a Python script hello.py that prints Hello from Python, then run it.", {},
         passes("python3", "hello.py", output="Hello from Python")),
    # append and edit without losing what is there
    Task("append-line", "append and edit", "Add the line 'pay rent' to the end of todo.txt, keeping the lines already there.",
         {"todo.txt": "buy bread\ncall mom\nwater plants\n"},
         same_lines("todo.txt", ["buy bread", "call mom", "water plants", "pay rent"])),
    Task("edit-value", "append and edit", "In settings.ini, change timeout from 30 to 60 and leave everything else as it is.",
         {"settings.ini": INI}, file_is("settings.ini", INI.replace("30", "60"), normalise=lambda s: "\n".join(ini_lines(s)))),
    Task("replace-word", "append and edit", "Replace every 'colour' with 'color' in story.txt.",
         {"story.txt": STORY}, file_is("story.txt", STORY.replace("colour", "color"))),
    # fix a bug so that a given test passes
    Task("fix-bug", "fix a bug", "python3 test_calc.py fails. Fix the bug in calc.py so that the test passes.",
         CALC, all_of(unchanged(CALC, "test_calc.py"), passes("python3", "test_calc.py"),
                      python_says("from calc import add, multiply; assert add(10, 5) == 15 and multiply(2, 5) == 10"))),
    Task("fix-index", "fix a bug", "Fix the bug in lists.py so that python3 test_lists.py passes.",
         LISTS, all_of(unchanged(LISTS, "test_lists.py"), passes("python3", "test_lists.py"),
                       python_says("from lists import last; assert last([4, 5]) == 5"))),
    # add a function with its test
    Task("add-function", "add a function", "Add a function cube(x) to mathutils.py that returns x to the power of 3, "
         "and add a test for it to test_mathutils.py.",
         MATH, all_of(python_says("from mathutils import cube, square; assert cube(2) == 8 and cube(-3) == -27 "
                                  "and square(4) == 16"),
                      python_says("t = open('test_mathutils.py').read(); assert 'cube' in t and 'square(3) == 9' in t"),
                      passes("python3", "test_mathutils.py"))),
    # rename a symbol across files
    Task("rename-symbol", "rename", "Rename the function calc_total to compute_total everywhere in this project.",
         SHOP, all_of(no_text("calc_total", "*.py"), python_says("from shop.prices import compute_total"),
                      passes("python3", "main.py", output="3 7"))),
    # answer a question about a small codebase
    Task("which-function", "codebase question", "Which function in this project reads the API_TOKEN environment "
         "variable? Write only the function name into answer.txt.",
         {"app/__init__.py": "",
          "app/config.py": "import os\n\n\ndef load_token():\n    return os.environ.get(\"API_TOKEN\")\n\n\n"
                           "def load_region():\n    return os.environ.get(\"REGION\", \"eu\")\n",
          "app/db.py": "import os\n\n\ndef connect():\n    url = os.environ[\"DATABASE_URL\"]\n    return url\n",
          "app/server.py": "from app.config import load_token\n\n\ndef start():\n    token = load_token()\n    return token\n"},
         answer_is("which-function", "load_token", "load_token()")),
    Task("which-file", "codebase question", "Which file defines the class Invoice? Write its path into answer.txt.",
         {"billing/__init__.py": "", "billing/models.py": "class Customer:\n    pass\n\n\nclass Invoice:\n"
                                                          "    def __init__(self, total):\n        self.total = total\n",
          "billing/views.py": "from billing.models import Invoice\n\n\ndef show(total):\n    return Invoice(total)\n"},
         answer_is("which-file", "billing/models.py")),
    # rename files
    Task("rename-files", "rename", "Rename the .jpeg files in the photos folder so that they end in .jpg instead.",
         {"photos/beach.jpeg": "beach pixels\n", "photos/city.jpeg": "city pixels\n", "photos/notes.txt": "keep me\n"},
         paths_are({"photos/beach.jpg": "beach pixels\n", "photos/city.jpg": "city pixels\n", "photos/notes.txt": "keep me\n"},
                   gone=("photos/beach.jpeg", "photos/city.jpeg"))),
    Task("move-file", "rename", "Move report.txt into a new folder named archive.",
         {"report.txt": "Q3 revenue: 12,400\n"}, paths_are({"archive/report.txt": "Q3 revenue: 12,400\n"}, gone=("report.txt",))),
    # several steps: run, read the failure, fix, run again
    Task("test-fix-rerun", "multi-step", "Run python3 test_textutils.py, find out why it fails, fix textutils.py "
         "(not the test), and run the test again to make sure it passes.",
         TEXTUTILS, all_of(unchanged(TEXTUTILS, "test_textutils.py"), passes("python3", "test_textutils.py"),
                           python_says("from textutils import is_palindrome as p, shout; "
                                       "assert p('Noon') and not p('ab') and shout('a') == 'A!'"))),
    Task("crash-fix", "multi-step", "python3 app.py crashes. Find out why and fix it so that it prints the greeting.",
         GREET, passes("python3", "app.py", output="Hello, Ada!")),
]
BY_NAME = {t.name: t for t in TASKS}

# A shell command that does each task, for --check-tasks: every check fails on the folder as the
# task leaves it and passes once the work is done.
SOLUTIONS = {
    "find-word": "echo tuesday.txt > answer.txt",
    "package-version": "python3 -c \"import json; print(json.load(open('package.json'))['version'])\" > answer.txt",
    "config-port": "echo 8042 > answer.txt",
    "count-py": "find . -name '*.py' | wc -l > answer.txt",
    "largest-file": "ls -S data | head -1 > answer.txt",
    "count-lines": "wc -l < server.log > answer.txt",
    "list-md": "ls docs | grep '\\.md$' > md_files.txt",
    "run-script": "python3 compute.py > output.txt",
    "exit-code": "./check.sh; echo $? > answer.txt",
    "write-greeting": "echo 'Hello, bantam!' > greeting.txt",
    "write-json": "echo '{\"debug\": true, \"retries\": 3}' > settings.json",
    "write-script": "echo 'print(\"Hello from Python\")' > hello.py",
    "append-line": "echo 'pay rent' >> todo.txt",
    "edit-value": "sed -i 's/timeout = 30/timeout=60/' settings.ini",
    "replace-word": "sed -i 's/colour/color/g' story.txt",
    "fix-bug": "sed -i 's/a - b/a + b/' calc.py",
    "fix-index": "sed -i 's/len(items)]/-1]/' lists.py",
    "add-function": "printf '\\ndef cube(x):\\n    return x ** 3\\n' >> mathutils.py && "
                    "sed -i 's/import square/import cube, square/; s/^print/assert cube(2) == 8\\nprint/' test_mathutils.py",
    "rename-symbol": "sed -i 's/calc_total/compute_total/g' main.py shop/*.py",
    "which-function": "echo load_token > answer.txt",
    "which-file": "echo billing/models.py > answer.txt",
    "rename-files": "cd photos && for f in *.jpeg; do mv \"$f\" \"${f%.jpeg}.jpg\"; done",
    "move-file": "mkdir archive && mv report.txt archive/",
    "test-fix-rerun": "sed -i 's/word\\[::1\\]/word[::-1]/' textutils.py",
    "crash-fix": "sed -i 's/nmae/name/' config.json",
}


def check_tasks() -> int:
    """Every task's check fails on its fresh folder and passes after its known solution."""
    bad = 0
    for task in TASKS:
        with tempfile.TemporaryDirectory() as d:
            folder = Path(d)
            task.setup(folder)
            before, why_before = task.check(folder)
            subprocess.run(["bash", "-c", SOLUTIONS[task.name]], cwd=folder, capture_output=True)
            after, why_after = task.check(folder)
        ok = not before and after
        bad += not ok
        print(f"{task.name:16} {'ok' if ok else 'BAD'}  before: {why_before[:60]!r}  after: {why_after[:60]!r}")
    return bad


# --- the server and the proxy ------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(model: Path, port: int, alias: str, n_ctx: int, threads: int, seed: int) -> list[str]:
    # No --chat_format: the GGUF's own chat template (Qwen2.5's, with its tools section and
    # <tool_response> turns) formats every request. --cache keeps the evaluated prompts of recent
    # requests, so each agent's system prompt and history are reused from one of its requests to
    # the next with the other agents' runs in between: without it every run after another agent's
    # paid its whole prompt again (a 330-token prompt: 9.4 s, 1.6 s with it). Its size counts only
    # llama.cpp's state (7 MB for 600 tokens of the 0.5B), not the logits array each entry also
    # copies (n_batch x vocabulary floats: 311 MB with Qwen's 152k tokens), so the default 2 GB
    # grew the server to 23 GB and the kernel killed it; CACHE_BYTES holds it to a few entries.
    return [PY, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias, "--n_ctx", str(n_ctx),
            "--cache", "True", "--cache_size", str(CACHE_BYTES),
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--seed", str(seed),
            "--host", "127.0.0.1", "--port", str(port), "--verbose", "False"]


def start_server(cmd: list[str], port: int, log: Path) -> subprocess.Popen:
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                         start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if p.poll() is not None:
            sys.exit(f"bench: the model server exited {p.returncode}:\n{log.read_text()[-3000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/v1/models")
            if conn.getresponse().status == 200:
                return p
        except OSError:
            time.sleep(0.5)
    p.kill()
    sys.exit("bench: the model server did not answer in 300 s")


# The tags llama.cpp's own server takes around a call of this family (its Hermes 2 Pro parser):
# small models drift from `<tool_call>` to the `<tools>` their prompt shows, and others.
CALL_TAG = re.compile(r"<(tool_call|function_call|tools?|response|json|xml|JSON)>\s*(.*?)\s*(?:</\1>|\Z)", re.S)
FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.S)


def json_objects(text: str) -> list[dict]:
    """The JSON objects in `text`, one after another (whitespace between them), or [] if the text
    is anything more than that."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return out
        try:
            obj, i = decoder.raw_decode(text, i)
        except ValueError:
            return []
        if not isinstance(obj, dict):
            return []
        out.append(obj)


def undoubled(text: str) -> list[dict]:
    """The call in doubled braces, `{{"name": ..., "arguments": {...}}}`: Qwen2.5-Coder's own chat
    template shows the call format that way (its Jinja string keeps both braces), and the model
    sometimes copies it. [] unless what is left around the one object is braces alone."""
    s = text.strip()
    if not s.startswith("{{"):
        return []
    try:
        obj, end = json.JSONDecoder().raw_decode(s, 1)
    except ValueError:
        return []
    return [obj] if isinstance(obj, dict) and not s[end:].strip().strip("}") else []


def call_objects(text: str) -> list[dict]:
    return json_objects(text) or undoubled(text)


def parse_calls(text: str, names: set[str]) -> tuple[str, list[dict]]:
    """(content, tool calls) from a Qwen2.5 answer: `<tool_call>` blocks (the format its template
    asks for), else fenced or bare JSON objects that name an offered tool. Text that holds no call
    comes back whole, as content."""
    found: list[tuple[int, dict]] = []
    for m in CALL_TAG.finditer(text):
        found += [(m.start(), obj) for obj in call_objects(m.group(2))]
    if not found:
        for m in FENCE.finditer(text):
            found += [(m.start(), obj) for obj in call_objects(m.group(1))]
    if not found:
        found = [(0, obj) for obj in call_objects(text)]
    calls = []
    for _, obj in found:
        name = obj.get("name")
        args = obj.get("arguments", obj.get("parameters", {}))
        if name not in names:
            continue
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        calls.append({"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)})
    if not calls:
        return text, []
    return text[:min(at for at, _ in found)].strip(), calls


def normal_messages(messages: list) -> list:
    """What llama_cpp.server accepts: string content (it refuses null, and an assistant turn that
    only calls tools has null content in every client)."""
    out = []
    for m in messages:
        m = dict(m)
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list):
            m["content"] = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append(m)
    return out


@dataclass
class Record:
    """What the proxy saw of one run."""
    log: Path
    steps: int
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    refused: int = 0
    loop_stopped: bool = False
    errors: int = 0
    actions: list[str] = field(default_factory=list)
    last_wanted_tools: bool = False
    seen: dict[str, int] = field(default_factory=dict)  # per conversation (a sub-agent has its own): messages logged


class Proxy:
    """The counting, greedy, tool-call-parsing proxy in front of the model server (see the top)."""

    def __init__(self, upstream_port: int, seed: int, max_tokens: int, loop_stop: int):
        self.upstream, self.seed, self.max_tokens, self.loop_stop = upstream_port, seed, max_tokens, loop_stop
        self.record: Record | None = None
        self.busy = threading.Lock()  # one request at a time to the model, as the server runs them
        self.calls = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                status, body = proxy.forward("GET", self.path, None)
                self.reply(status, body)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.rstrip("/").endswith("chat/completions"):
                    status, body = proxy.forward("POST", self.path, raw)
                    return self.reply(status, body)
                try:
                    request = json.loads(raw)
                except ValueError:
                    return self.reply(400, b'{"error": {"message": "bad JSON"}}')
                status, answer = proxy.chat(request)
                if status != 200 or not request.get("stream"):
                    return self.reply(status, json.dumps(answer).encode())
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                chunks = stream_chunks(answer, bool((request.get("stream_options") or {}).get("include_usage")))
                try:
                    for chunk in chunks:
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except OSError:  # the client was stopped (the time limit) while the model answered
                    pass
                self.close_connection = True

            def reply(self, status: int, body: bytes):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, method: str, path: str, body: bytes | None, timeout: float = 900) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=timeout)
        try:
            conn.request(method, path if path.startswith("/v1") else "/v1" + path, body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read()
        except OSError as e:
            return 502, json.dumps({"error": {"message": f"bench proxy: {e}"}}).encode()
        finally:
            conn.close()

    def chat(self, request: dict) -> tuple[int, dict]:
        rec = self.record
        if rec is not None and rec.requests >= rec.steps:
            rec.refused += 1
            return 400, {"error": {"message": f"step limit: {rec.steps} model requests", "type": "invalid_request_error"}}
        if rec is not None and self.loop_stop and ran_in_loop(rec.actions, self.loop_stop):
            rec.loop_stopped = True
            return 400, {"error": {"message": f"stopped: the same call {self.loop_stop} times in a row",
                                   "type": "invalid_request_error"}}
        tools = request.get("tools") or []
        names = {t.get("function", {}).get("name") for t in tools}
        body = {k: v for k, v in request.items() if k not in ("stream", "stream_options", "temperature", "seed",
                                                                "max_tokens", "max_completion_tokens", "top_p")}
        if request.get("tool_choice") == "required" and tools:  # as llama.cpp's server honours it
            body.pop("tool_choice")
            body["grammar"] = call_grammar(tools)
        body.update(messages=normal_messages(request.get("messages") or []), stream=False, temperature=0,
                    seed=self.seed, max_tokens=min(int(request.get("max_tokens") or request.get("max_completion_tokens")
                                                       or self.max_tokens), self.max_tokens))
        t0 = time.monotonic()
        with self.busy:
            status, raw = self.forward("POST", "/v1/chat/completions", json.dumps(body).encode())
        seconds = time.monotonic() - t0
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = {"error": {"message": raw[:500].decode(errors="replace")}}
        if status != 200 or "choices" not in answer:
            if rec is not None:
                rec.errors += 1
                self.transcript(rec, {"error": answer, "status": status})
            return status if status != 200 else 502, answer
        choice = answer["choices"][0]
        text = choice["message"].get("content") or ""
        content, calls = parse_calls(text, names) if names else (text, [])
        self.calls += 1
        message: dict = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [{"id": f"call_{self.calls}_{i}", "type": "function", "function": c}
                                     for i, c in enumerate(calls)]
            choice["finish_reason"] = "tool_calls"
        choice["message"] = message
        usage = answer.get("usage") or {}
        if rec is not None:
            rec.requests += 1
            rec.prompt_tokens += usage.get("prompt_tokens", 0)
            rec.completion_tokens += usage.get("completion_tokens", 0)
            rec.actions.append(json.dumps(calls, sort_keys=True) if calls else "text:" + text.strip())
            rec.last_wanted_tools = bool(calls)
            messages = request.get("messages") or []
            key = json.dumps(messages[:2], sort_keys=True)
            seen = rec.seen.get(key, 0)
            self.transcript(rec, {"n": rec.requests, "seconds": round(seconds, 1), "usage": usage,
                                  **({"tools": tools} if not seen else {}),
                                  "new_messages": messages[seen:], "raw": text, "calls": calls})
            rec.seen[key] = len(messages) + 1  # the next request repeats this answer: not logged twice
        return 200, answer

    @staticmethod
    def transcript(rec: Record, entry: dict) -> None:
        with rec.log.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def idle(self) -> None:
        """Wait for a request still being answered (of a run that was stopped) to finish."""
        with self.busy:
            pass


def call_grammar(tools: list[dict]) -> str:
    """A GBNF grammar for one call of an offered tool in the model's format, `<tool_call>` and a
    JSON object of the tool's name and arguments held to its schema: what llama.cpp's own server
    (`llama-server --jinja`) constrains a reply to for `tool_choice: "required"`, which
    llama_cpp.server ignores (it forces only a named function). The arguments may also be a JSON
    string: llama_cpp.server prints an earlier call's arguments in the prompt as the string the
    client sent, so that is the form the model continues in, and held to an object instead it
    escaped its quotes into garbage (`"notes/*\"}"`)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    schema = {"oneOf": [{"type": "object", "required": ["name", "arguments"],
                         "properties": {"name": {"const": t["function"]["name"]},
                                        "arguments": {"anyOf": [t["function"].get("parameters") or {"type": "object"},
                                                                {"type": "string"}]}}}
                        for t in tools]}
    rules = json_schema_to_gbnf(json.dumps(schema)).replace("root ::=", "call ::=", 1)
    return rules + '\nroot ::= "<tool_call>\\n" call "\\n</tool_call>"\n'


def stream_chunks(answer: dict, include_usage: bool) -> list[dict]:
    """A finished answer as the chunks of a stream: the text, or the whole tool calls, then the end."""
    base = {"id": answer.get("id", "chatcmpl-bench"), "object": "chat.completion.chunk",
            "created": answer.get("created", int(time.time())), "model": answer.get("model", "")}
    choice = answer["choices"][0]
    message = choice["message"]
    delta: dict = {"role": "assistant"}
    if message.get("content"):
        delta["content"] = message["content"]
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}]}]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": answer.get("usage")})
    return chunks


# --- the agents --------------------------------------------------------------------------------

def agent_command(agent: str, task: Task, url: str, model: str, home: Path, steps: int) -> list[str]:
    if agent in ("bantam", "bantam-aids"):
        # The user's own settings file, as a user keeps them; --yolo on the command line (no
        # sandbox, no approvals: the peers run their commands bare).
        config = home / ".config" / "bantam" / "config"
        config.parent.mkdir(parents=True, exist_ok=True)
        aids = f"local_aids={AIDS_PROFILE}\n" if agent == "bantam-aids" else ""
        config.write_text(f"endpoint={url}\nmodel={model}\ntemperature=0\nseed=1\nmax_al_iterations={steps}\n{aids}")
        return [PY, "-m", "bantam", "--yolo", "-p", task.prompt] if PINNED else [BANTAM, "--yolo", "-p", task.prompt]
    if agent == "mini":
        return [str(PEERS / "mini" / "bin" / "mini"), "-m", f"openai/{model}", "-t", task.prompt, "-y",
                "--exit-immediately", "-c", "mini.yaml", "-c", f"model.model_kwargs.api_base={url}",
                "-c", "model.model_kwargs.temperature=0", "-c", f"agent.step_limit={steps}", "-c", "agent.cost_limit=0",
                "-c", "model.cost_tracking=ignore_errors", "-o", str(home / "traj.json")]
    if agent == "llm":
        (home / "llm").mkdir(exist_ok=True)
        (home / "llm" / "extra-openai-models.yaml").write_text(
            f'- model_id: bench\n  model_name: {model}\n  api_base: "{url}"\n  supports_tools: true\n')
        (home / "tools.py").write_text(LLM_WORK_TOOLS)
        # --chain-limit counts the tool rounds after the first request
        return [str(PEERS / "llm" / "bin" / "llm"), "-m", "bench", "-o", "temperature", "0",
                "--functions", str(home / "tools.py"), "--chain-limit", str(steps - 1), task.prompt]
    raise ValueError(agent)


PINNED: dict[str, str] = {}  # --bantam-at: {"commit": ..., "src": the snapshot's src folder}


def pin_bantam(commit: str) -> str:
    """Run bantam from `commit`'s sources (a snapshot under /tmp), not the working tree that others
    may be editing while the benchmark runs; returns the full commit id."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    folder = Path(tempfile.gettempdir(), f"bench-tasks-bantam-{full[:12]}")
    if not (folder / "src" / "bantam").is_dir():
        folder.mkdir(exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", full, "src"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    PINNED.update(commit=full, src=str(folder / "src"))
    return full


def agent_env(home: Path, agent: str = "") -> dict[str, str]:
    env = {k: v for k, v in clean_env(str(home)).items() if not k.startswith("XDG_")}
    if agent.startswith("bantam") and PINNED:
        env["PYTHONPATH"] = PINNED["src"]
    # litellm fetches its price list from GitHub at import unless told to use its bundled copy;
    # offline that is a timeout, not a result
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def ran_in_loop(actions: list[str], times: int = 3) -> bool:
    """The run ended with the same tool call(s) `times` times in a row."""
    tail = actions[-times:]
    return len(tail) == times and len(set(tail)) == 1 and not tail[0].startswith("text:")


def gave_up(agent: str, home: Path) -> bool:
    """mini-swe-agent exits 0 however it ends; its trajectory says how (Submitted: it finished;
    RepeatedFormatError: three answers in a row without a tool call it could run)."""
    if agent != "mini":
        return False
    try:
        status = json.loads((home / "traj.json").read_text())["info"]["exit_status"]
    except (OSError, ValueError, KeyError, TypeError):
        return True
    return status not in ("Submitted", "LimitsExceeded")


def run_task(agent: str, task: Task, proxy: Proxy, model: str, steps: int, time_limit: float, logs: Path) -> dict:
    # The same folder every run: its path reaches the model (a traceback, `pwd`), and with the
    # same text greedy decoding gives the same answers, so a rerun reproduces the table (one
    # bench at a time: it uses every core anyway).
    base = Path(tempfile.gettempdir()) / f"bench-tasks-{agent}"
    shutil.rmtree(base, ignore_errors=True)
    work, home = base / "work", base / "home"
    work.mkdir(parents=True)
    home.mkdir()
    task.setup(work)
    out = logs / agent / task.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rec = Record(log=out / "exchanges.jsonl", steps=steps)
    cmd = agent_command(agent, task, proxy.url, model, home, steps)
    (out / "command.txt").write_text(" ".join(cmd) + "\n")
    proxy.record = rec
    t0 = time.monotonic()
    with (out / "stdout.txt").open("wb") as so, (out / "stderr.txt").open("wb") as se:
        p = subprocess.Popen(cmd, cwd=work, env=agent_env(home, agent), stdin=subprocess.DEVNULL, stdout=so, stderr=se,
                             start_new_session=True)
        timed_out = False
        try:
            p.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        except BaseException:  # the benchmark itself is stopped: the agent goes with it
            os.killpg(p.pid, signal.SIGKILL)
            shutil.rmtree(base, ignore_errors=True)
            raise
    wall = time.monotonic() - t0
    proxy.idle()
    proxy.record = None
    try:
        os.killpg(p.pid, signal.SIGKILL)  # whatever the agent's commands left running
    except ProcessLookupError:
        pass
    solved, why = task.check(work)
    if agent == "mini" and (home / "traj.json").exists():
        shutil.copy(home / "traj.json", out / "traj.json")
    listing = sorted(str(q.relative_to(work)) for q in work.rglob("*") if "__pycache__" not in q.parts)
    (out / "files.txt").write_text("\n".join(listing) + "\n")
    stuck = rec.loop_stopped or ran_in_loop(rec.actions)
    limit = timed_out or rec.refused > 0 or (rec.requests >= steps and rec.last_wanted_tools)
    if stuck:
        ending = "loop"
    elif limit:
        ending = "time" if timed_out else "steps"
    elif p.returncode != 0 or rec.errors or gave_up(agent, home):
        ending = "error"
    else:
        ending = "done"
    shutil.rmtree(base, ignore_errors=True)
    result = {"agent": agent, "task": task.name, "kind": task.kind, "solved": solved, "why": why, "ending": ending,
              "exit": p.returncode, "wall": round(wall, 1), "requests": rec.requests,
              "prompt_tokens": rec.prompt_tokens, "completion_tokens": rec.completion_tokens,
              "at": round(time.time()), "load": round(os.getloadavg()[0], 1)}
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


# --- the report --------------------------------------------------------------------------------

def share(n: int, total: int) -> str:
    return f"{n}/{total}" if total else "—"


def summary(results: list[dict], agents: list[str], tasks: list[Task]) -> str:
    rows = []
    for agent in agents:
        rs = [r for r in results if r["agent"] == agent]
        won = [r for r in rs if r["solved"]]
        n, k = len(rs), len(won)
        prompt = sum(r["prompt_tokens"] for r in rs)
        completion = sum(r["completion_tokens"] for r in rs)
        wall = sum(r["wall"] for r in rs)
        per = (f"{prompt / k:,.0f} + {completion / k:,.0f} | {wall / k:.0f}" if k else "— | —")
        mean = (f"{sum(r['prompt_tokens'] + r['completion_tokens'] for r in won) / k:,.0f} | "
                f"{sum(r['wall'] for r in won) / k:.0f}" if k else "— | —")
        endings = {e: sum(r["ending"] == e for r in rs) for e in ("loop", "error", "steps", "time")}
        rows.append(f"| {agent} | **{k}/{n}** | {per} | {mean} | {share(endings['loop'], n)} | {share(endings['error'], n)} | "
                    f"{share(endings['steps'] + endings['time'], n)} ({endings['steps']} steps, {endings['time']} time) |")
    head = ["| agent | solved | tokens per solved task (prompt + completion, all runs) | s per solved task (all runs) | "
            "tokens of a solved run (mean) | s of a solved run (mean) | ended in a loop | ended in an error | "
            "ended at a limit |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    matrix = ["| task | kind | " + " | ".join(agents) + " |", "|---|---|" + "---|" * len(agents)]
    for task in tasks:
        cells = []
        for agent in agents:
            r = next((r for r in results if r["agent"] == agent and r["task"] == task.name), None)
            cells.append("" if r is None else f"{'**yes**' if r['solved'] else 'no'} ({r['ending']}, {r['requests']} req, "
                         f"{r['wall']:.0f} s)")
        matrix.append(f"| {task.name} | {task.kind} | " + " | ".join(cells) + " |")
    solved = {a: ", ".join(r["task"] for r in results if r["agent"] == a and r["solved"]) or "none" for a in agents}
    return "\n".join([*head, *rows, "", "Solved: " + "; ".join(f"{a}: {s}" for a, s in solved.items()) + ".", "",
                      *matrix])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def list_tasks() -> None:
    for t in TASKS:
        print(f"{t.name:16} {t.kind:18} {t.prompt}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="the GGUF file (default: $BANTAM_BENCH_MODEL or %(default)s)")
    ap.add_argument("--agents", default=",".join(AGENTS), help="comma list of bantam, bantam-aids, mini, llm")
    ap.add_argument("--tasks", default="", help="comma list of task names (default: all; --list shows them)")
    ap.add_argument("--list", action="store_true", help="print the tasks and exit")
    ap.add_argument("--check-tasks", action="store_true", help="prove each check with a known solution, and exit")
    ap.add_argument("--steps", type=int, default=15, help="model requests per task, for every agent")
    ap.add_argument("--time-limit", type=float, default=180, help="seconds per task, for every agent")
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=512, help="completion tokens per request at most")
    ap.add_argument("--loop-stop", type=int, default=5,
                    help="stop a run whose model made the same tool call this many times in a row (0: never)")
    ap.add_argument("--logs", default="", help="folder for transcripts (default: a new one under /tmp)")
    ap.add_argument("--bantam-at", metavar="COMMIT", default="",
                    help="run bantam from this commit's sources instead of the working tree (e.g. HEAD)")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --logs' results.jsonl")
    ap.add_argument("--report", action="store_true",
                    help="run nothing: the section from the runs in --logs' results.jsonl (a partial run's too)")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = ap.parse_args()
    if args.list:
        return list_tasks()
    if args.check_tasks:
        sys.exit(check_tasks())
    agents = [a for a in args.agents.split(",") if a]
    if unknown := set(agents) - set(AGENTS):
        sys.exit(f"bench: unknown agents {sorted(unknown)}; choose from {', '.join(AGENTS)}")
    names = [n for n in args.tasks.split(",") if n]
    if unknown := set(names) - set(BY_NAME):
        sys.exit(f"bench: unknown tasks {sorted(unknown)}; see --list")
    tasks = [BY_NAME[n] for n in names] if names else TASKS
    model = Path(args.model)
    if not model.is_file() or model.open("rb").read(4) != b"GGUF":
        sys.exit(f"bench: {model} is not a GGUF file (--model PATH or $BANTAM_BENCH_MODEL)")
    if args.report and not args.logs:
        sys.exit("bench: --report needs --logs DIR (the folder of a run's results.jsonl)")
    if {"mini", "llm"} & set(agents):
        ensure_peers()
    if args.bantam_at:
        pin_bantam(args.bantam_at)
    logs = Path(args.logs or tempfile.mkdtemp(prefix=f"bench-tasks-{model.stem}-"))
    logs.mkdir(parents=True, exist_ok=True)
    digest = sha256(model)
    print(f"bench: model {model} (sha256 {digest}); transcripts in {logs}", flush=True)
    results: list[dict] = []
    if (args.resume or args.report) and (logs / "results.jsonl").exists():
        wanted = {(a, t.name) for a in agents for t in tasks}
        results = [r for line in (logs / "results.jsonl").read_text().splitlines() if line.strip()
                   for r in [json.loads(line)] if (r["agent"], r["task"]) in wanted]
        print(f"bench: {len(results)} runs already in {logs / 'results.jsonl'}", flush=True)
    if not args.report:
        run_all(args, agents, tasks, model, logs, results)
    section = report(args, agents, tasks, model, digest, results, logs)
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


def run_all(args: argparse.Namespace, agents: list[str], tasks: list[Task], model: Path, logs: Path,
            results: list[dict]) -> None:
    """Every task for every agent not yet in `results`, on one server started here."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the server and the agent stop too
    alias = model.stem
    port = free_port()
    server = start_server(server_command(model, port, alias, args.n_ctx, args.threads, args.seed), port,
                          logs / "server.log")
    proxy = Proxy(port, args.seed, args.max_tokens, args.loop_stop)
    done = {(r["agent"], r["task"]) for r in results}
    try:
        for task in tasks:  # each task for every agent in turn: drift on the machine hits all alike
            for agent in agents:
                if (agent, task.name) in done:
                    continue
                r = run_task(agent, task, proxy, alias, args.steps, args.time_limit, logs)
                if server.poll() is not None:  # a run that lost its model is no measurement
                    sys.exit(f"bench: the model server died (exit {server.returncode}) during {agent} {task.name}; "
                             f"see {logs / 'server.log'}; rerun with --resume --logs {logs}")
                results.append(r)
                with (logs / "results.jsonl").open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{agent:7} {task.name:16} {'SOLVED' if r['solved'] else 'failed'} {r['ending']:6} "
                      f"{r['requests']:2} req {r['prompt_tokens']:6}+{r['completion_tokens']:<5} tok {r['wall']:6.1f} s  "
                      f"{'' if r['solved'] else r['why'][:90]}", flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:  # uvicorn waits for an answer still being generated
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        proxy.server.shutdown()


def report(args: argparse.Namespace, agents: list[str], tasks: list[Task], model: Path, digest: str,
           results: list[dict], logs: Path) -> str:
    total = sum(r["wall"] for r in results)
    ends = [r.get("at") or (logs / r["agent"] / r["task"] / "result.json").stat().st_mtime for r in results]
    loads = [r["load"] for r in results if "load" in r]
    load = (f"1-minute load average {min(loads):.1f} to {max(loads):.1f} at the runs' ends" if loads else
            f"load average {os.getloadavg()[0]:.1f} when this was written (these runs did not record theirs)")
    utc = datetime.UTC
    span = (f"{datetime.datetime.fromtimestamp(min(ends) - results[ends.index(min(ends))]['wall'], utc):%Y-%m-%d %H:%M}-"
            f"{datetime.datetime.fromtimestamp(max(ends), utc):%H:%M} UTC" if results else "no runs")
    where = (f"at commit {PINNED['commit'][:12]}" if PINNED else "from the working tree at "
             + subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                              text=True).stdout.strip())
    versions = ", ".join([f"bantam {where}",
                          *([f"mini-swe-agent {peer_version('mini')}"] if "mini" in agents else []),
                          *([f"llm {peer_version('llm')}"] if "llm" in agents else [])])
    import llama_cpp
    shown, skip = [], False
    for a in sys.argv[1:]:  # the command that gives this section: without where its transcripts went
        if skip or a in ("--write", "--resume", "--logs", "--report"):
            skip = a == "--logs"
            continue
        shown.append(PINNED["commit"][:12] if shown and shown[-1] == "--bantam-at" else a)
    command = f"`.venv/bin/python bench/bench_tasks.py {shlex.join(shown)} --write`"
    planned = len(agents) * len(tasks)
    partial = ([f"**A partial run: {len(results)} of the {planned} runs** (the empty cells below were not run; "
                f"`--resume --logs DIR` goes on where it stopped).", ""] if len(results) < planned else [])
    return "\n".join([
        f"## Work done: {len(tasks)} small real tasks, {', '.join(agents)} on one model", "",
        f"Command: {command}", "", *partial,
        f"Machine: {machine()} Runs {span}, {total / 60:.0f} min in all; {load} (the machine is shared: timings "
        f"are of this machine then).", "",
        f"Model: `{model.name}` ({model.stat().st_size:,} bytes, SHA-256 `{digest}`), served by llama-cpp-python "
        f"{llama_cpp.__version__}'s `llama_cpp.server` with the GGUF's chat template (no --chat_format), "
        f"n_ctx {args.n_ctx}, {args.threads} threads, behind this script's proxy: greedy (temperature 0, seed {args.seed}), "
        f"at most {args.max_tokens} completion tokens a request, Qwen2.5's `<tool_call>` text turned into `tool_calls`, "
        f"tokens counted from the server's usage (see the script's docstring). Agents: {versions}; bantam with `--yolo` "
        f"(no sandbox, as the peers run commands) and its settings in the user's `~/.config/bantam/config`. "
        f"Limits, the same for every agent: {args.steps} model requests and {args.time_limit:.0f} s per task; "
        f"a run whose model makes the same tool call {args.loop_stop} times in a row is stopped there (a looping "
        f"small model does not recover; this keeps the run's time for the tasks).", "",
        "Each task is checked by its result (files, exit codes, tests that pass), never by the agent's words. "
        "'Per solved task' divides everything every run spent by the tasks solved; 'a solved run' averages the "
        "solved runs alone. A loop: the run's last three model answers were the same tool call.", "",
        summary(results, agents, tasks)])


if __name__ == "__main__":
    main()
