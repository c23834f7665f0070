"""Configuration layers and errors, read from real files in a temporary directory."""
import pytest

from bantam import config
from bantam.config import Config, load
from bantam.errors import ConfigError
from tests.conftest import write_cfg


def test_defaults(home):
    from bantam.providers.local import available
    cfg = load(environ={})
    embedded = available()  # with the local extra, nothing configured means the bundled model
    assert cfg == Config(provider="local" if embedded else "openai", embedded=embedded,
                         temperature=0.2 if embedded else 0.7, tool_output_limit=6000 if embedded else 30_000)
    assert (cfg.endpoint, cfg.model, cfg.stream, cfg.color) == (
        "https://api.kilo.ai/api/openrouter", "openrouter/free", True, "auto")
    assert load({"endpoint": "http://x/v1"}, environ={}).temperature == 0.7
    assert load({"provider": "local", "temperature": "0.9"}, environ={}).temperature == 0.9
    # a local model's window is small: its tool results are clipped sooner, unless set
    assert load({"provider": "local"}, environ={}).tool_output_limit == 6000
    assert load({"provider": "local", "tool_output_limit": "9000"}, environ={}).tool_output_limit == 9000
    assert (cfg.timeout, cfg.shell_timeout, cfg.max_al_iterations, cfg.reasoning_effort) == (300, 120, 1000, "high")
    assert (cfg.tool_budget, cfg.max_fanout, cfg.context_window) == (200, 8, None)
    assert cfg.tools == ("shell_exec", "write_file", "run_subagent")
    assert cfg.retry_delays == (1, 1, 2, 3, 5, 8, 13, 21, 34)


def test_bantam_cfg_wins_over_model_cfg(home):
    write_cfg(home, "model.cfg", model="from-model-cfg", temperature="0.1", endpoint="http://a/v1")
    assert load(environ={}).model == "from-model-cfg"
    write_cfg(home, ".bantam.cfg", model="from-bantam-cfg", endpoint="http://b/v1")
    cfg = load(environ={})
    assert cfg.model == "from-bantam-cfg" and cfg.temperature == 0.7  # files are not merged
    assert cfg.file.endswith(".bantam.cfg")


def test_precedence_flags_file_environment(home):
    env = {"LLM_MODEL": "env-model", "LLM_URL": "http://env/v1", "AGENT_TOOL_BUDGET": "5"}
    assert load(environ=env).model == "env-model"
    write_cfg(home, model="file-model")
    cfg = load(environ=env)
    assert (cfg.model, cfg.endpoint, cfg.tool_budget) == ("file-model", "http://env/v1", 5)
    assert load({"model": "flag-model"}, environ=env).model == "flag-model"


def test_file_format(home):
    (home / ".bantam.cfg").write_text(
        "# a comment\n\n  model = spaced  \napi_key=\"sk-quoted\"\nendpoint=http://h/v1/\n"
        "top_p=0.9\nmax_tokens=100\nstop=[\"END\"]\nrequest.vendor_flag=some text\nstream=no\n")
    cfg = load(environ={})
    assert cfg.model == "spaced" and cfg.api_key == "sk-quoted" and cfg.endpoint == "http://h/v1"
    assert cfg.stream is False
    assert cfg.forward == {"top_p": 0.9, "max_tokens": 100, "stop": ["END"], "vendor_flag": "some text"}


def test_api_key_fallbacks(home):
    assert load(environ={"OPENAI_API_KEY": "sk-o"}).api_key == "sk-o"
    assert load(environ={"OPENAI_API_KEY": "sk-o", "LLM_API_KEY": "sk-l"}).api_key == "sk-l"
    anth = {"ANTHROPIC_API_KEY": "sk-a", "OPENAI_API_KEY": "sk-o"}
    assert load({"endpoint": "https://api.anthropic.com/v1"}, environ=anth).api_key == "sk-a"
    write_cfg(home, api_key="sk-file")
    assert load(environ=anth).api_key == "sk-file"
    assert "sk-file" not in repr(load(environ={}))


@pytest.mark.parametrize("endpoint,provider", [
    ("https://api.openai.com/v1", "openai"), ("https://api.anthropic.com/v1", "anthropic"),
    ("http://proxy/v1/messages", "anthropic"), ("http://localhost:8080/v1", "openai")])
def test_provider_inference(home, endpoint, provider):
    assert load({"endpoint": endpoint}, environ={}).provider == provider
    assert load({"endpoint": endpoint, "provider": "openai"}, environ={}).provider == "openai"


@pytest.mark.parametrize("line,message", [
    ("temperature=hot", "temperature: expected a number, got 'hot'"),
    ("stream=maybe", "stream: expected true or false, got 'maybe'"),
    ("provider=gemini", "provider: expected one of openai, anthropic, local, got 'gemini'"),
    ("color=blue", "color: expected one of auto, always, never"),
    ("max_al_iterations=0", "max_al_iterations: must be at least 1"),
    ("tool_budget=lots", "tool_budget: expected an integer, got 'lots'"),
    ("shell_timeout=-1", "shell_timeout: must be at least"),
    ("retry_delays=1,x", "retry_delays: expected a number, got 'x'"),
    ("just some words", "expected key=value, got 'just some words'"),
    ("=value", "expected key=value"),
])
def test_bad_values_name_file_line_and_key(home, line, message):
    (home / ".bantam.cfg").write_text(f"model=ok\n# comment\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load(environ={})
    assert str(info.value).startswith(".bantam.cfg:3: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_environment_and_flag_values_name_their_source(home):
    with pytest.raises(ConfigError, match="environment variable AGENT_TOOL_BUDGET: tool_budget"):
        load(environ={"AGENT_TOOL_BUDGET": "many"})
    with pytest.raises(ConfigError, match="^command line: temperature: expected a number"):
        load({"temperature": "warm"}, environ={})


def test_unreadable_config_file(home):
    (home / ".bantam.cfg").write_bytes(b"model=\xff\xfe\n")
    with pytest.raises(ConfigError, match=r"\.bantam\.cfg: cannot read"):
        load(environ={})


def test_known_keys_cover_the_seed():
    seed_keys = {"endpoint", "model", "temperature", "api_key", "stream", "color", "timeout",
                 "shell_timeout", "max_al_iterations", "context_window", "reasoning_effort",
                 "bantam_tools_dir", "provider", "tools", "tool_budget", "max_fanout",
                 "tool_output_limit", "model_path"}
    assert seed_keys <= set(config.known_keys())


def test_anthropic_provider_without_endpoint_uses_anthropic(home):
    cfg = load({"provider": "anthropic"}, environ={"ANTHROPIC_API_KEY": "sk-ant"})
    assert cfg.endpoint == "https://api.anthropic.com/v1" and cfg.api_key == "sk-ant"


# --- one schema: the seeds' other names for bantam's keys, and the checker every file shares ---

def test_other_files_names_are_aliases_with_the_same_meaning(home):
    write_cfg(home, api_base="http://h/v1/", context_tokens="5000", bash_timeout="7")
    cfg = load(environ={})
    assert (cfg.endpoint, cfg.context_window, cfg.shell_timeout) == ("http://h/v1", 5000, 7.0)
    assert "api_base" not in cfg.forward and "context_tokens" not in cfg.forward
    assert load({"output_limit_bytes": "4096"}, environ={}).tool_output_limit == 4096  # bytes: same number
    assert load({"endpoint": "http://flag/v1"}, environ={}).endpoint == "http://flag/v1"  # flags over file


def test_one_key_under_two_names_in_one_file_is_an_error(home):
    write_cfg(home, model="m", shell_timeout="5", command_timeout_seconds="6")
    with pytest.raises(ConfigError) as info:
        load(environ={})
    assert str(info.value) == (".bantam.cfg:3: command_timeout_seconds: the same key as 'shell_timeout', "
                               "given twice; keep one")
    (home / ".bantam.cfg").write_text("shell_timeout=5\nshell_timeout=6\n")  # one name twice: the last wins
    assert load(environ={}).shell_timeout == 6.0


def test_a_bad_value_under_an_alias_names_the_alias(home):
    write_cfg(home, model="m", context_tokens="lots")
    with pytest.raises(ConfigError) as info:
        load(environ={})
    assert str(info.value) == ".bantam.cfg:2: context_tokens: expected an integer, got 'lots'"


def test_every_key_has_one_kind_a_comment_and_its_default():
    for name, spec in config.KEYS.items():
        assert spec.name == name and spec.comment, name
        assert getattr(Config(), name) == spec.default, name
    assert config.ALIASES == {"api_base": "endpoint", "context_tokens": "context_window",
                              "bash_timeout": "shell_timeout", "command_timeout_seconds": "shell_timeout",
                              "output_limit_bytes": "tool_output_limit"}
    assert config.ENVIRONMENT["LLM_URL"] == "endpoint" and config.ENVIRONMENT["AGENT_TOOL_BUDGET"] == "tool_budget"


@pytest.mark.parametrize("name,value,message", [
    ("temperature", "0.5", "temperature: expected a number, got '0.5'"),  # typed files: a string is a string
    ("stream", "yes", "stream: expected true or false, got 'yes'"),
    ("tool_budget", 2.5, "tool_budget: expected an integer, got 2.5"),
    ("retry_delays", [1, "x"], "retry_delays: expected a number, got 'x'"),
    ("endpoint", "ftp://x", "endpoint: expected an http:// or https:// URL, got 'ftp://x'"),
    ("tools", ["nope"], "tools: unknown tool 'nope'"),
])
def test_typed_values_are_checked_strictly(name, value, message):
    with pytest.raises(ConfigError) as info:
        config.check(config.KEYS[name], value, "f.json", typed=True)
    assert str(info.value).startswith(f"f.json: {message}") and "\n" not in str(info.value)
    assert config.check(config.KEYS["temperature"], 1, "f.json", typed=True) == 1.0
    assert config.check(config.KEYS["tools"], ["shell_exec"], "f.json", typed=True) == ("shell_exec",)


def test_an_alias_and_its_key_together_are_one_clear_error():
    with pytest.raises(ConfigError, match=r"^f.json: api_base: the same key as 'endpoint', given twice; keep one$"):
        config.canonical({"endpoint": "http://a", "api_base": "http://b"}, config.KEYS, "f.json")


WIDER = {"tools": "shell_exec,write_file,read_file,list_files,spawn_agent", "tool_budget": "100000",
         "max_fanout": "64", "max_al_iterations": "100000", "shell_timeout": "86400"}


def test_an_untrusted_project_may_narrow_the_models_tools_and_budgets_but_not_widen_them(home):
    from bantam import trust
    write_cfg(home, trusted=False, **WIDER)
    loaded = load(environ={})
    assert loaded.tools == ("shell_exec", "write_file", "run_subagent")
    assert (loaded.tool_budget, loaded.max_fanout, loaded.max_al_iterations, loaded.shell_timeout) == (
        200, 8, 1000, 120)
    assert loaded.ignored == tuple(f".bantam.cfg:{n} {key}={value}" for n, (key, value) in enumerate(WIDER.items(), 1))
    assert loaded.warning.count("\n") == 0 and "`bantam trust`" in loaded.warning

    write_cfg(home, trusted=False, tools="run_shell", tool_budget="5", max_fanout="2", max_al_iterations="3",
              shell_timeout="1.5")  # narrower: applies untrusted
    loaded = load(environ={})
    assert loaded.tools == ("shell_exec",) and not loaded.ignored
    assert (loaded.tool_budget, loaded.max_fanout, loaded.max_al_iterations, loaded.shell_timeout) == (5, 2, 3, 1.5)

    write_cfg(home, trusted=False, **WIDER)
    trust.trust(home)
    loaded = load(environ={})
    assert loaded.tools == ("shell_exec", "write_file", "read_file", "list_files", "spawn_agent")
    assert (loaded.tool_budget, loaded.max_fanout, loaded.max_al_iterations, loaded.shell_timeout) == (
        100000, 64, 100000, 86400)
    assert not loaded.ignored and not loaded.warning


def test_what_an_untrusted_project_may_widen_to_is_what_the_user_allows(home):
    """The layer below is the user's: their file (or environment) may allow more than the
    defaults, and a project may then go up to that, and no further."""
    user = config.user_config_path()
    user.parent.mkdir(parents=True)
    user.write_text("tools=shell_exec,write_file,read_file\nsandbox_writable=/tmp/cache\n"
                    "env_passthrough=GH_TOKEN\nbantam_tools_dir=/opt/mine\n")
    write_cfg(home, trusted=False, tools="read_file,write_file", tool_budget="300")
    loaded = load(environ={"AGENT_TOOL_BUDGET": "500"})
    assert loaded.tools == ("read_file", "write_file") and loaded.tool_budget == 300 and not loaded.ignored
    write_cfg(home, trusted=False, tools="read_file,list_files", sandbox_writable="/",
              env_passthrough="*", bantam_tools_dir="tools")
    loaded = load(environ={})
    assert loaded.tools == ("shell_exec", "write_file", "read_file")
    assert (loaded.sandbox_writable, loaded.env_passthrough, loaded.bantam_tools_dir) == (
        ("/tmp/cache",), ("GH_TOKEN",), "/opt/mine")
    assert loaded.ignored == (".bantam.cfg:1 tools=read_file,list_files", ".bantam.cfg:2 sandbox_writable=/",
                              ".bantam.cfg:3 env_passthrough=*", ".bantam.cfg:4 bantam_tools_dir=tools")
