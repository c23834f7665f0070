"""The README's commands: CI runs exactly its test command, both install commands build the pinned
llama-cpp-python the same way, and every other command it shows still runs (its subcommands and
flags exist, the main command leaves `bantam` on PATH in a fresh HOME, its links lead somewhere)."""
import functools
import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version

import pytest

from bantam.options import SUBCOMMANDS
from bantam.providers.llama_probe import PORTABLE_CMAKE_ARGS
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
# What the install builds beyond the portable CPU flags: llama-cpp-python 0.3.36 without its
# multimodal library (mtmd), which bantam never loads (docs/local-model.md, "The build").
BUILD_ARGS = f"{PORTABLE_CMAKE_ARGS} -DLLAVA_BUILD=OFF"


def shell_lines(text: str) -> list[str]:
    """The lines of the ```sh blocks."""
    return [line for block in re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.splitlines() if line.strip()]


def readme_main_command() -> str:
    (line,) = [line for line in shell_lines(README) if "pip install" in line and "'.[local]'" in line]
    return line


def readme_test_command() -> str:
    (line,) = [line for line in shell_lines(README) if "pytest" in line]
    return line


def pinned() -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {re.sub(r"\[.*\]", "", spec) for specs in extras.values() for spec in specs
            if spec.startswith("llama-cpp-python")}  # every extra that brings it: one tested version
    assert len(pins) == 1 and re.fullmatch(r"llama-cpp-python==[\d.]+", next(iter(pins))), pins
    return next(iter(pins)).split("==")[1]


def test_the_readme_is_short():
    assert len(README.splitlines()) < 250


def test_ci_runs_exactly_the_readmes_test_command():
    steps = [line for line in CI.splitlines() if line.strip() and not line.startswith("#")
             and line not in ("set -euo pipefail", 'cd "$(dirname "$0")/.."')]
    assert steps == [readme_test_command()]


def test_both_installs_build_the_pinned_llama_cpp_python_portable_and_without_what_bantam_never_loads():
    version_pinned = pinned()
    for line in (readme_main_command(), readme_test_command()):
        assert f'CMAKE_ARGS="{BUILD_ARGS}" .venv/bin/pip install --no-cache-dir -e ' in line, line
    # any version the README names for llama-cpp-python is the pinned one
    named = re.findall(r"llama-cpp-python(?:\[\w+\])?==([\d.]+)", README)
    assert named and set(named) == {version_pinned}


def test_the_installed_llama_cpp_python_is_the_pinned_one():
    try:
        installed = version("llama-cpp-python")
    except PackageNotFoundError:
        pytest.skip("llama-cpp-python is not installed")
    assert installed == pinned()


def test_the_main_command_leaves_bantam_on_path_in_a_fresh_home(tmp_path):
    # Everything after the install, as the README gives it, in an empty HOME whose PATH has no
    # ~/.local/bin; twice, since a user may run the command again.
    if not (ROOT / ".venv" / "bin" / "bantam").exists():
        pytest.skip("no .venv in the clone (the README's install puts it there)")
    steps = readme_main_command().split(" && ")
    first = next(i for i, step in enumerate(steps) if step.startswith("mkdir -p ~/.local/bin"))
    assert steps[-1].startswith("bantam -p ")  # the user's first prompt already uses the command on PATH
    script = " && ".join(steps[first:-1] + ["command -v bantam", "bantam --version"])
    for _ in range(2):
        r = subprocess.run(["env", "-i", f"HOME={tmp_path}", "PATH=/usr/bin:/bin", "bash", "-c", script], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        where, shown = r.stdout.splitlines()[:2]
        assert where == f"{tmp_path}/.local/bin/bantam" and "bantam" in shown, r.stdout
    assert (tmp_path / ".local" / "bin" / "bantam").resolve() == (ROOT / ".venv" / "bin" / "bantam").resolve()


def bantam_commands() -> list[list[str]]:
    """Every `bantam ...` the README shows: in its ```sh blocks and as code in its text and tables."""
    spans = shell_lines(README) + [span.replace("\\|", "|") for span in re.findall(r"`([^`\n]+)`", README)]
    found = []
    for span in spans:
        for piece in re.split(r" && |\|(?!\|)", span.split(" # ")[0]):
            try:
                words = shlex.split(piece.strip())
            except ValueError:
                continue
            words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]  # VAR=value before a command
            if words[:1] == ["bantam"] and len(words) > 1:
                found.append(words)
    return found


@functools.cache
def help_text(subcommand: str) -> str:
    argv = [sys.executable, "-m", "bantam", *([subcommand] if subcommand else []), "--help"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, (argv, r.stderr)
    return r.stdout


def test_every_bantam_command_in_the_readme_names_a_real_subcommand_and_real_flags():
    commands = bantam_commands()
    assert len(commands) >= 20
    for words in commands:
        subcommand = words[1] if words[1] in SUBCOMMANDS else ""
        text = help_text(subcommand)
        for word in words[1:]:
            flag = word.split("=")[0]
            if flag.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (words, flag)


def test_the_local_server_recipe_uses_the_servers_real_flags():
    if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs llama-cpp-python[server] (the test extra)")
    (line,) = [line for line in shell_lines(README) if "-m llama_cpp.server" in line]
    r = subprocess.run([sys.executable, "-m", "llama_cpp.server", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    flags = [word for word in shlex.split(line.rstrip("&")) if word.startswith("--")]
    assert "--chat_format" in flags
    for flag in flags:
        assert flag in r.stdout, flag


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))])
def test_every_link_leads_to_a_file_and_heading_that_exist(page):
    # The README is the first page and docs/ everything one link from it: no link may lead nowhere.
    source = ROOT / page
    for link in re.findall(r"\]\(([^)\s]+)\)", source.read_text()):
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        target = (source.parent / path) if path else source
        assert target.exists(), (page, link)
        if anchor:
            headings = [slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(), re.M)]
            assert anchor in headings, (page, link, headings)
