"""Two sessions in one process, built from different configurations, each keep their own: the
variables their commands see, their sandbox, their approval, their tools and their model. Nothing
a configuration says lives in a module global, so whichever configuration loaded last decides
nothing for the others (ACP with several folders, a batch with one configuration per model).
Real shells, real bubblewrap; the scripted provider is the model."""
from pathlib import Path

import pytest

from bantam import session
from bantam.approval import Approvals, Request, Verdict
from tests.conftest import write_cfg
from tests.fakes.scripted import ScriptedProvider, text, tool, tool_results

SECRETS = {"GH_TOKEN": "ghp_passed0123456789", "AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789"}
PROBE = "echo GH=${GH_TOKEN:+set} AWS=${AWS_SECRET_ACCESS_KEY:+set}; touch ../outside-$(basename $PWD)"


def folder_with(root: Path, name: str, **values: str) -> tuple[Path, object]:
    """A project folder whose own (trusted) configuration says `values`, loaded as a front end
    loads it."""
    folder = root / name
    folder.mkdir()
    write_cfg(folder, **values)
    return folder, session.load_config({}, folder)


def turn(cfg, folder: Path, model: ScriptedProvider, asked: list[str]) -> str:
    """One turn of a session built from `cfg`, its approvals answered yes (and recorded)."""
    def ask(request: Request) -> Verdict:
        asked.append(folder.name)
        return Verdict(True, request.text)
    built = session.build(cfg, folder, session.FrontEnd(approvals=Approvals(ask=ask), with_mcp=False), model)
    result = built.run([{"role": "user", "content": "go"}])
    assert result.text == "done", result
    return tool_results(model)[0]


def test_two_sessions_in_one_process_keep_their_own_configuration(home, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    a, cfg_a = folder_with(home, "a", model="model-a", sandbox="off", approval="always",
                           env_passthrough="GH_TOKEN", tools="shell_exec")
    b, cfg_b = folder_with(home, "b", model="model-b", sandbox="workspace", approval="never",
                           tools="shell_exec,write_file")
    # Both configurations are loaded before either session runs a command: B's loaded last.
    model_a = ScriptedProvider(tool("shell_exec", {"command": PROBE}), text("done"))
    model_b = ScriptedProvider(tool("shell_exec", {"command": PROBE}), text("done"))
    asked: list[str] = []
    out_b = turn(cfg_b, b, model_b, asked)
    out_a = turn(cfg_a, a, model_a, asked)

    assert "GH=set AWS=\n" in out_a and (home / "outside-a").exists()   # A passes GH_TOKEN, no sandbox
    assert "GH= AWS=\n" in out_b and not (home / "outside-b").exists()  # B passes nothing, sandboxed
    assert SECRETS["GH_TOKEN"] not in out_a + out_b                 # passed to `gh`, never shown
    assert asked == ["a"]                                           # A asks before each command, B never
    assert model_a.requests[0].tool_names() == ["shell_exec"]
    assert set(model_b.requests[0].tool_names()) == {"shell_exec", "write_file"}
    assert (cfg_a.model, cfg_b.model) == ("model-a", "model-b")


def test_a_passed_variables_value_is_redacted_from_what_the_model_reads(home, monkeypatch):
    monkeypatch.setenv("GH_TOKEN", SECRETS["GH_TOKEN"])
    a, cfg = folder_with(home, "a", model="m", sandbox="off", env_passthrough="GH_TOKEN", tools="shell_exec")
    model = ScriptedProvider(tool("shell_exec", {"command": "echo token=$GH_TOKEN"}), text("done"))
    out = turn(cfg, a, model, [])
    assert "token=***" in out
