"""The daemon's config.json and the runs' TOML read onto bantam's one configuration schema: the
seeds' names are aliases with the same meaning, and one checker says what is wrong and where."""
import json

import pytest

from bantam.daemon import settings as daemon_settings
from bantam.errors import ConfigError
from bantam.runs import settings as run_settings

LOCAL = "http://127.0.0.1:9/v1"  # a server on this machine needs no key; nothing is sent to it


def daemon_load(tmp_path, data, cli=None):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return daemon_settings.load(path, cli, environ={})


def test_daemon_seed_names_map_onto_bantam_keys(tmp_path):
    s, cfg = daemon_load(tmp_path, {"api_base": LOCAL, "context_tokens": 6000, "bash_timeout": 9,
                                    "tool_output_limit": 400, "timeout": 12, "retry_delays": [0, 1]})
    assert (s.endpoint, s.context_window, s.shell_timeout, s.tool_output_limit) == (LOCAL, 6000, 9.0, 400)
    assert (cfg.endpoint, cfg.timeout, cfg.retry_delays) == (LOCAL, 12.0, (0.0, 1.0))
    s, _ = daemon_load(tmp_path, {"endpoint": LOCAL, "context_window": 7000, "shell_timeout": 3})
    assert (s.endpoint, s.context_window, s.shell_timeout) == (LOCAL, 7000, 3.0)
    s, cfg = daemon_load(tmp_path, {"api_base": LOCAL}, cli={"endpoint": "http://127.0.0.1:8/v1",
                                                            "context_tokens": "300"})
    assert s.endpoint == cfg.endpoint == "http://127.0.0.1:8/v1" and s.context_window == 300
    assert daemon_settings.Settings().tool_output_limit == 5000  # the daemon's default, in characters


@pytest.mark.parametrize("data, message", [
    ({"context_tokens": "lots"}, "config.json: context_tokens: expected an integer, got 'lots'"),
    ({"api_base": "ftp://x"}, "config.json: api_base: expected an http:// or https:// URL, got 'ftp://x'"),
    ({"endpoint": LOCAL, "api_base": LOCAL}, "config.json: api_base: the same key as 'endpoint', given twice"),
    ({"timeout": "30"}, "config.json: timeout: expected a number, got '30'"),  # JSON: a string is a string
    ({"life_tail": 0}, "config.json: life_tail: must be greater than 0, got 0"),
    ({"watch": "inotify"}, "config.json: watch: expected one of auto, poll, got 'inotify'"),
    ({"tool_output_limit": 10}, "config.json: tool_output_limit: must be at least 200"),
])
def test_daemon_bad_values_are_one_line_naming_file_and_key(tmp_path, data, message):
    with pytest.raises(ConfigError) as info:
        daemon_load(tmp_path, {"api_base": LOCAL, **data} if "endpoint" not in data else data)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def write(tmp_path, text, name="run.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_run_seed_names_map_onto_bantam_keys_and_old_runs_resume(tmp_path):
    old = run_settings.load(write(tmp_path, "[tools]\ncommand_timeout_seconds = 5.0\noutput_limit_bytes = 4096\n"))
    assert (old.tools.shell_timeout, old.tools.tool_output_limit) == (5.0, 4096)  # same numbers
    new = run_settings.load(write(tmp_path, "[tools]\nshell_timeout = 5\ntool_output_limit = 4096\n", "n.toml"))
    assert new == old and "output_limit_bytes" not in json.dumps(new.model_dump())
    # a run saved before the rename (state.json holds the old names) still loads, unchanged
    saved = run_settings.RunConfig.model_validate(
        {"tools": {"command_timeout_seconds": 7.5, "output_limit_bytes": 1000, "write_paths": ["a"]}})
    assert (saved.tools.shell_timeout, saved.tools.tool_output_limit) == (7.5, 1000)
    resumed, changes = run_settings.for_resume(saved, write(tmp_path, "[limits]\nmax_iterations = 9\n", "r.toml"))
    assert resumed.tools == saved.tools and changes == {"limits.max_iterations": [200, 9]}


@pytest.mark.parametrize("text, message", [
    ('[model]\nendpoint = "ftp://x"\n', "[model] endpoint: expected an http:// or https:// URL"),
    ('[model]\nprovider = "gemini"\n', "[model] provider: expected one of openai, anthropic, local"),
    ("[model]\ntemperature = -1\n", "[model] temperature: must be at least 0"),
    ("[tools]\nshell_timeout = 0\n", "[tools] shell_timeout: must be at least 0.001"),
    ("[tools]\nshell_timeout = 5\ncommand_timeout_seconds = 6\n",
     "command_timeout_seconds: the same key as 'shell_timeout', given twice"),
    ('[tools.commands]\nverify = []\n', "[tools] commands: verify: a name of letters"),
    ('[runtime]\nexecute_plan = "yes"\n', "[runtime] execute_plan: expected true or false, got 'yes'"),
])
def test_run_bad_values_are_one_line_naming_file_section_and_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        run_settings.load(write(tmp_path, text))
    assert message in str(info.value) and "run.toml" in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_the_configuration_reference_names_every_key_and_alias():
    from pathlib import Path

    from bantam import config
    reference = Path(__file__).resolve().parent.parent.joinpath("docs", "configuration.md").read_text()
    table = reference[reference.index("## Keys\n"):reference.index("## Keys bantam does not know")]
    for name in [*config.KEYS, *config.ALIASES]:
        assert f"`{name}`" in table, name
