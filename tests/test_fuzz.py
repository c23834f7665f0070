"""Property-based tests: no input makes the parsers crash or hang; they answer or raise bantam's own error."""
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bantam.config import Config, load
from bantam.errors import ConfigError, ProviderError, ToolError
from bantam.providers.anthropic import AnthropicProvider
from bantam.providers.openai import OpenAIProvider
from bantam.providers.sse import iter_sse
from bantam.tools import check_args, parse_arguments
from bantam.tools.files import WriteFile

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=20)


@FAST
@given(st.text())
def test_config_file(tmp_path_factory, text):
    directory = tmp_path_factory.mktemp("cfg")
    (directory / ".bantam.cfg").write_bytes(text.encode("utf-8", "replace"))
    try:
        assert isinstance(load(directory=directory, environ={}), Config)
    except ConfigError as e:
        assert "\n" not in str(e)


@FAST
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"])), max_size=30))
def test_sse_lines(lines):
    for event, data in iter_sse(lines):
        assert isinstance(event, str) and isinstance(data, str)


@FAST
@given(st.lists(json_values | st.text(max_size=40), max_size=12))
def test_openai_stream_parser(values):
    lines = []
    for v in values:
        lines += [f"data: {json.dumps(v)}" if not isinstance(v, str) else f"data: {v}", ""]
    assert_reads(OpenAIProvider(Config(endpoint="http://127.0.0.1:9/v1")), lines)


@FAST
@given(st.lists(st.tuples(st.sampled_from(["message_start", "content_block_start", "content_block_delta",
                                           "content_block_stop", "message_delta", "message_stop", "ping",
                                           "error", "weird"]), json_values), max_size=12))
def test_anthropic_stream_parser(events):
    lines = []
    for name, data in events:
        lines += [f"event: {name}", f"data: {json.dumps(data)}", ""]
    assert_reads(AnthropicProvider(Config(endpoint="http://127.0.0.1:9/v1", provider="anthropic")), lines)


def assert_reads(provider, lines):
    """A stream parser answers with an assistant message or raises ProviderError, nothing else."""
    try:
        reply = provider.read_stream(iter(lines), lambda e: None)
        assert reply.message["role"] == "assistant"
    except ProviderError:
        pass


@FAST
@given(st.text() | json_values.map(json.dumps))
def test_tool_arguments(text):
    try:
        args = parse_arguments(text)
        check_args(WriteFile.parameters, args)
    except ToolError:
        pass


@FAST
@given(st.text() | json_values.map(json.dumps), st.booleans(), st.sampled_from([None, "length", "stop"]))
def test_controlled_run_parser(text, plan_due, finish):
    from bantam.runs.parser import Answer, ParseError, parse_file, parse_json
    answer = Answer(text, finish, 256)
    for parse in (lambda: parse_json(answer, plan_due), lambda: parse_file(answer, "app.py")):
        try:
            parse()
        except ParseError as e:
            assert str(e)  # a correction the model can read
