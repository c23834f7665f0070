"""How much of the bundled model's window the prompt takes before the user's first word.

    .venv/bin/python bench/bench_local_prompt.py [FOLDER ...]    # from the repository root

For each folder (default: the repository root, a small generated project, an empty folder) one
request of a one-line question goes through bantam's LocalProvider with the system prompt and
tools a session there gets, and one token of output: the prompt tokens it reports are what the
terminal shows as `context: N/8192`, counted by llama.cpp on the bundled GGUF.
"""
from __future__ import annotations

import inspect
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bantam.config import Config  # noqa: E402
from bantam.prompt import system_prompt  # noqa: E402
from bantam.providers.local import LocalProvider  # noqa: E402
from bantam.tools import ToolContext, make_toolbox  # noqa: E402

QUESTION = "What does this project do?"
SMALL_PROJECT = {  # a small Python project: a package, its tests, its metadata and rules
    "README.md": "# tally\n\nCounts words in text files.\n",
    "AGENTS.md": "Run the tests with `pytest -q` before you finish. Keep functions short.\n",
    "pyproject.toml": "[project]\nname = \"tally\"\nversion = \"0.1.0\"\n",
    "tally/__init__.py": "",
    "tally/cli.py": "def main():\n    pass\n",
    "tally/count.py": "def count(text):\n    return len(text.split())\n",
    "tally/files.py": "def read(path):\n    return open(path).read()\n",
    "tests/test_count.py": "from tally.count import count\n\ndef test_count():\n    assert count('a b') == 2\n",
    "tests/test_cli.py": "",
    "docs/usage.md": "tally FILE...\n",
    "Makefile": "test:\n\tpytest -q\n",
    "LICENSE": "MIT\n",
}


def prompt_tokens(folder: Path) -> int:
    """The prompt tokens of the first request of a session in `folder`."""
    here = os.getcwd()
    os.chdir(folder)  # bantam before issue 29 read the folder's names from the process's folder
    try:
        cfg = Config(provider="local", temperature=0.0, forward={"max_tokens": 1, "seed": 1})
        provider = LocalProvider(cfg)
        system = system_prompt(cfg, folder)
        schemas = make_toolbox(cfg.tools, ToolContext(cfg, provider, system)).schemas()
        messages = [{"role": "system", "content": system}, {"role": "user", "content": QUESTION}]
        if "options" in inspect.signature(provider.complete).parameters:
            from bantam.providers import RequestOptions
            reply = provider.complete(messages, schemas, lambda e: None, RequestOptions(folder=folder))
        else:
            reply = provider.complete(messages, schemas, lambda e: None)
        assert reply.usage is not None
        return reply.usage.prompt_tokens
    finally:
        os.chdir(here)


def main() -> None:
    with tempfile.TemporaryDirectory() as small, tempfile.TemporaryDirectory() as empty:
        for name, content in SMALL_PROJECT.items():
            (Path(small) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(small) / name).write_text(content)
        folders = [("repository root", ROOT), ("small project", Path(small)), ("empty folder", Path(empty))]
        if sys.argv[1:]:
            folders = [(arg, Path(arg).resolve()) for arg in sys.argv[1:]]
        print("| folder | prompt tokens | of the 8,192-token window |\n|---|---:|---:|")
        for label, folder in folders:
            n = prompt_tokens(folder)
            print(f"| {label} | {n} | {n / 8192:.0%} |", flush=True)


if __name__ == "__main__":
    main()
