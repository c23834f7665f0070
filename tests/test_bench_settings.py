"""Each benchmark that runs bantam with settings of its own configures what it says it measures:
its folder built as the bench builds it, then `bantam config` there with the bench's own command
line, HOME and environment, and the effective values checked. A boundary setting
(config.BOUNDARY_KEYS: the sandbox, the tools, the budgets) written into a project file the user
has not trusted is ignored with one warning line, and the bench would measure bantam as the
defaults configure it (sandbox on, spawn_agent off) while saying otherwise.

bench_tokens.py runs bantam through bench_prefix.py's and bench_peers.py's set-ups, checked here.
Every other bench is read (its syntax tree) for the two ways a setting goes astray: a boundary key
written into a project file, and a user's file written under the bench's HOME while the
environment would still lead bantam to the runner's own (XDG_CONFIG_HOME)."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from bantam import config

BENCH = Path(__file__).resolve().parent.parent / "bench"
PROJECT_FILES = (".bantam.cfg", "model.cfg")
CHECKED_WHEN_RUN = {"bench_prefix.py"}  # builds its project file at run time: checked by a test below

URL = "http://127.0.0.1:9/v1"  # never contacted: `bantam config` only shows the configuration


@pytest.fixture(autouse=True)
def someone_elses_settings(tmp_path, monkeypatch):
    """The person running the benches has a configuration of their own, which a bench must not
    pick up (its HOME is its own folder; XDG_CONFIG_HOME would still lead to theirs)."""
    mine = tmp_path / "xdg"
    (mine / "bantam").mkdir(parents=True)
    (mine / "bantam" / "config").write_text("model=someone-elses\nsandbox=read-only\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(mine))


def effective(command: list[str], work: Path | str, env: dict[str, str], served: bool = True) -> dict[str, str]:
    """`bantam config` run with the bench's command line: key -> the value in effect (with
    `served`, the endpoint and model must be the bench's server's)."""
    r = subprocess.run([*command, "config"], cwd=work, env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr  # no setting of the bench's ignored, no key withheld
    shown = {}
    for line in r.stdout.splitlines():
        key, sep, rest = line.partition(" = ")
        if sep:
            shown[key] = rest.split("  (")[0]
    assert not served or (shown["endpoint"], shown["model"]) == (URL, "test-model"), shown
    return shown


def test_bench_core_runs_commands_without_the_sandbox_as_its_floor_does(tmp_path):
    from bench import bench_core
    work = tmp_path / "work"
    work.mkdir()
    command, env = bench_core.bantam_setup(URL, str(work))
    shown = effective(command, work, env)
    assert (shown["sandbox"], shown["approval"]) == ("off", "never")


def test_bench_agents_offers_spawn_agent(tmp_path):
    from bench import bench_agents
    work = tmp_path / "work"
    work.mkdir()
    command, env = bench_agents.setup(URL, str(work))
    assert "spawn_agent" in effective(command, work, env)["tools"].split(",")


def test_bench_peers_runs_bantam_bare_with_one_tool_and_room_for_its_steps(tmp_path):
    from bench import bench_peers
    work = tmp_path / "work"
    work.mkdir()
    command = bench_peers.command("bantam", URL, str(work))
    assert command[-2:] == ["-p", "go"]
    shown = effective(command[:-2], work, bench_peers.clean_env(str(work)))
    assert (shown["sandbox"], shown["approval"], shown["tools"]) == ("off", "never", "shell_exec")
    assert int(shown["tool_budget"]) >= 100 and int(shown["max_al_iterations"]) >= 100  # 100 steps


@pytest.mark.parametrize("tools", ["shell_exec,write_file", "shell_exec,write_file,spawn_agent"])
def test_bench_prefix_sessions_run_without_the_sandbox_with_their_tools_and_budgets(tmp_path, tools):
    from bench import bench_prefix
    work = tmp_path / "work"
    work.mkdir()
    bench_prefix.config(str(work), URL, tools=tools)
    shown = effective([bench_prefix.BANTAM], work, bench_prefix.clean_env(str(work)))
    assert (shown["sandbox"], shown["tools"]) == ("off", tools)
    assert (shown["tool_budget"], shown["max_al_iterations"]) == ("1000", "1000")


@pytest.mark.parametrize("agent, aids", [("bantam", "auto"), ("bantam-aids", "qwen2.5-coder")])
def test_bench_tasks_runs_bantam_bare_with_its_steps_from_the_users_file(tmp_path, agent, aids):
    from bench import bench_tasks
    home = tmp_path / "home"
    home.mkdir()
    command = bench_tasks.agent_command(agent, bench_tasks.TASKS[0], URL, "test-model", home, steps=30)
    assert command[-2] == "-p"
    shown = effective(command[:-2], home, bench_tasks.agent_env(home, agent))
    assert (shown["sandbox"], shown["approval"], shown["max_al_iterations"]) == ("off", "never", "30")
    assert shown["local_aids"] == aids


def test_bench_embedded_runs_the_local_model_bare_with_its_steps(tmp_path):
    from bench import bench_embedded
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    bench_embedded.write_settings(home, "qwen-0.5b", 12)
    shown = effective([bench_embedded.BANTAM, "--yolo"], work, bench_embedded.environment(home, "qwen-0.5b"),
                      served=False)
    assert (shown["provider"], shown["max_al_iterations"], shown["local_aids"]) == ("local", "12", "qwen2.5-coder")
    assert (shown["sandbox"], shown["approval"]) == ("off", "never")


def project_file_writes(tree: ast.AST) -> list[tuple[int, str | None]]:
    """(line, the text written, None when it is built at run time) of each `.write_text` whose
    path names a project's configuration file."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "write_text" \
                and any(name in ast.unparse(node.func.value) for name in PROJECT_FILES):
            text = node.args[0]
            if isinstance(text, ast.Constant) and isinstance(text.value, str):
                found.append((node.lineno, text.value))
            elif isinstance(text, ast.JoinedStr):  # an f-string: its literal parts, each value as {}
                found.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}"
                                                   for v in text.values)))
            else:
                found.append((node.lineno, None))
    return found


def constants(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.parametrize("bench", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_no_bench_sets_a_boundary_key_in_a_project_file_or_reads_the_runners_settings(bench):
    tree = ast.parse(bench.read_text(), str(bench))
    for line, text in project_file_writes(tree):
        where = f"bench/{bench.name}:{line}"
        if text is None:
            assert bench.name in CHECKED_WHEN_RUN, f"{where}: a project file built at run time: check it with bantam config"
            continue
        keys = {config.ALIASES.get(k, k) for k in re.findall(r"(?m)^\s*([\w.]+)\s*=", text)}
        assert not keys & set(config.BOUNDARY_KEYS), (
            f"{where}: {sorted(keys & set(config.BOUNDARY_KEYS))} in a project file is ignored until the user "
            f"trusts it: set it as a user does (a flag, --yolo, or ~/.config/bantam/config under the bench's HOME)")
    if ".config" in constants(tree):  # writes the user's files under its own HOME
        assert constants(tree) & {"XDG_CONFIG_HOME", "XDG_"}, (
            f"bench/{bench.name} writes the user's files under its HOME but leaves XDG_CONFIG_HOME, which "
            f"leads bantam to the runner's own files instead")
