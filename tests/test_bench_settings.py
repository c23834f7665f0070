"""Each benchmark that runs bantam with settings of its own configures what it says it measures:
its folder built as the bench builds it, then `bantam config` there with the bench's own command
line, HOME and environment, and the effective values checked. A boundary setting
(config.BOUNDARY_KEYS: the sandbox, the tools, the budgets) written into a project file the user
has not trusted is ignored with one warning line, and the bench would measure bantam as the
defaults configure it (sandbox on, spawn_agent off) while saying otherwise.

bench_tokens.py runs bantam through bench_prefix.py's and bench_peers.py's set-ups, checked here."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

URL = "http://127.0.0.1:9/v1"  # never contacted: `bantam config` only shows the configuration


@pytest.fixture(autouse=True)
def someone_elses_settings(tmp_path, monkeypatch):
    """The person running the benches has a configuration of their own, which a bench must not
    pick up (its HOME is its own folder; XDG_CONFIG_HOME would still lead to theirs)."""
    mine = tmp_path / "xdg"
    (mine / "bantam").mkdir(parents=True)
    (mine / "bantam" / "config").write_text("model=someone-elses\nsandbox=read-only\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(mine))


def effective(command: list[str], work: Path | str, env: dict[str, str]) -> dict[str, str]:
    """`bantam config` run with the bench's command line: key -> the value in effect."""
    r = subprocess.run([*command, "config"], cwd=work, env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr  # no setting of the bench's ignored, no key withheld
    shown = {}
    for line in r.stdout.splitlines():
        key, sep, rest = line.partition(" = ")
        if sep:
            shown[key] = rest.split("  (")[0]
    assert shown["endpoint"] == URL and shown["model"] == "test-model", shown
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
