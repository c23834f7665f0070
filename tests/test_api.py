"""The public API: what `from bantam import ...` offers is pinned here, so a change to it is a
decision in a diff, not an accident (as httpx does)."""
import subprocess
import sys

import bantam

PUBLIC = [
    "__version__",
    "run", "Limits", "Turn", "Guard",
    "Provider", "Reply", "make_provider",
    "Tool", "ToolContext", "Toolbox", "Outcome", "make_toolbox",
    "Config", "load_config", "Session", "build_session", "FrontEnd",
    "Event", "OnEvent", "Usage", "RequestStarted", "Text", "Reasoning", "ToolCall", "ToolResult",
    "UsageReport", "Retry", "Notice", "Error", "Done",
    "BantamError", "ConfigError", "ProviderError", "LimitReached", "ToolError",
]


def test_public_api_is_pinned():
    assert bantam.__all__ == PUBLIC
    assert set(bantam._PUBLIC) == set(PUBLIC[1:])  # every public name has a module to come from


def test_every_public_name_resolves_to_its_definition():
    from bantam import config, errors, events, loop, providers, session, tools
    for name in PUBLIC[1:]:
        value = getattr(bantam, name)
        assert value is not None
    assert bantam.run is loop.run and bantam.Tool is tools.Tool and bantam.Provider is providers.Provider
    assert bantam.load_config is config.load and bantam.ToolCall is events.ToolCall
    assert issubclass(bantam.LimitReached, errors.BantamError)
    assert bantam.build_session is session.build and bantam.Session is session.Session
    assert bantam.FrontEnd is session.FrontEnd


def test_the_documented_session_runs_a_turn(tmp_path, monkeypatch):
    """The module docstring's example, as written, against the scripted model: a session built from
    a configuration and a folder runs a tool in that folder and answers."""
    from tests.fakes.scripted import ScriptedProvider, text, tool
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "project").mkdir()
    cfg = bantam.load_config({"model": "scripted", "sandbox": "off"}, directory=tmp_path / "project")
    provider = ScriptedProvider(tool("shell_exec", {"command": "pwd > where.txt"}), text("written"))
    seen = []
    s = bantam.build_session(cfg, tmp_path / "project", bantam.FrontEnd(on_event=seen.append), provider)
    turn = s.run([*s.messages(), {"role": "user", "content": "hi"}])
    assert turn.text == "written" and any(isinstance(e, bantam.ToolResult) for e in seen)
    assert (tmp_path / "project" / "where.txt").read_text().strip() == str(tmp_path / "project")


def test_unknown_names_are_attribute_errors():
    try:
        bantam.not_a_thing  # noqa: B018
    except AttributeError as e:
        assert "not_a_thing" in str(e)
    else:
        raise AssertionError("bantam.not_a_thing resolved")


def test_import_bantam_loads_nothing_else():
    code = "import sys, bantam; print(sorted(m for m in sys.modules if m.startswith('bantam')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['bantam']"
