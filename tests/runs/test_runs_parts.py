"""The controlled run's parts on their own: parser, schema, gates, tools, settings. Real files and
real processes in temporary directories; nothing of bantam's is replaced."""
import os
import sys
import time
from pathlib import Path

import pytest

from bantam.errors import ConfigError
from bantam.runs import gates, schema, settings
from bantam.runs.gates import Blocked, GateContext, Rejected
from bantam.runs.parser import Answer, ParseError, parse_file, parse_json
from bantam.runs.state import Call, PlanStep, RunState
from bantam.runs.tools import TOOLS, Refused, Workspace, clean_env, in_workspace
from bantam.tools import Outcome


def run_tool(name, args, ws):
    """A run tool called as the run's toolbox calls it, with its refusals raised, not reported."""
    result = TOOLS[name].run(args, in_workspace(ws).ctx)
    return result if isinstance(result, Outcome) else Outcome(result)


# --- parser: proposals -------------------------------------------------------------------------


def test_strict_json_is_not_a_recovery():
    parsed = parse_json(Answer('{"tool": "read_file", "arguments": {"path": "a"}}'), plan_due=False)
    assert parsed.obj == {"tool": "read_file", "arguments": {"path": "a"}} and parsed.recovered_by is None


def test_one_json_fence_inside_prose():
    text = 'I will read it now.\n```json\n{"tool": "read_file", "arguments": {"path": "a"}}\n```\nDone.'
    parsed = parse_json(Answer(text), plan_due=False)
    assert parsed.obj["tool"] == "read_file" and parsed.recovered_by == "json_fence"
    tilde = parse_json(Answer('~~~\n{"final": "x"}\n~~~'), plan_due=False)
    assert tilde.obj == {"final": "x"} and tilde.recovered_by == "json_fence"


def test_two_fences_are_refused():
    with pytest.raises(ParseError, match="2 code fences"):
        parse_json(Answer('```\n{"final": "a"}\n```\n```\n{"final": "b"}\n```'), plan_due=False)


def test_plan_named_call_with_one_action_inside():
    text = '{"tool": "plan", "arguments": {"tool": "read_file", "arguments": {"path": "a.txt"}}}'
    act = parse_json(Answer(text), plan_due=False)
    assert act.obj == {"tool": "read_file", "arguments": {"path": "a.txt"}} and act.recovered_by == "plan_call"
    plan = parse_json(Answer(text), plan_due=True)
    assert plan.obj == {"plan": [{"description": "read_file", "tool": "read_file", "arguments": {"path": "a.txt"}}]}
    steps = '{"name": "plan", "arguments": {"steps": [{"description": "d", "tool": "list_files"}]}}'
    assert parse_json(Answer(steps), plan_due=True).obj == {"plan": [{"description": "d", "tool": "list_files"}]}


def test_ambiguous_plan_call_is_not_guessed():
    text = ('{"tool": "plan", "arguments": {"a": {"tool": "read_file", "arguments": {}}, '
            '"b": {"tool": "list_files", "arguments": {}}}}')
    parsed = parse_json(Answer(text), plan_due=False)
    assert parsed.recovered_by is None  # two calls inside: left as it is, and the gates refuse it
    proposal = schema.validate(parsed.obj, ("tool", "final"))
    with pytest.raises(Rejected, match="'plan' is not an allowed tool"):
        gates.AllowedTool().check(Call(tool=proposal.tool, arguments=proposal.arguments), ctx_for(Path("/")))


def test_json_error_names_the_position():
    with pytest.raises(ParseError, match=r"Expecting ',' delimiter: line 1 column 22 \(char 21\)") as e:
        parse_json(Answer('{"tool": "read_file" "arguments": {}}'), plan_due=False)
    assert "output limit" not in str(e.value)


def test_cut_answer_gets_the_output_limit_hint():
    with pytest.raises(ParseError, match=r"cut off at the output limit \(64 tokens\)"):
        parse_json(Answer('{"plan": [{"description": "read the', "length", 64), plan_due=True)
    near_limit = '{"final": "' + "x" * 200  # no finish reason, but it breaks off near the limit
    with pytest.raises(ParseError, match="output limit"):
        parse_json(Answer(near_limit, None, 70), plan_due=False)


def test_schema_errors_name_the_field():
    with pytest.raises(schema.SchemaError, match=r"field plan\.0\.tool: Field required"):
        schema.validate({"plan": [{"description": "x"}]}, ("plan",))
    with pytest.raises(schema.SchemaError, match="ambiguous"):
        schema.validate({"tool": "read_file", "final": "x"}, ("tool", "final"))
    with pytest.raises(schema.SchemaError, match=r'expected \{"plan"'):
        schema.validate({"final": "x"}, ("plan",))
    with pytest.raises(schema.SchemaError, match="field arguments: Input should be a valid dictionary"):
        schema.validate({"tool": "read_file", "arguments": "a.txt"}, ("tool",))


# --- parser: files -----------------------------------------------------------------------------


def test_file_in_a_fence_without_escaping():
    text = 'Here it is:\n```python\nprint("a\\tb")\nx = {"k": 1}\n```\n'
    assert parse_file(Answer(text), "a.py") == 'print("a\\tb")\nx = {"k": 1}\n'


def test_longer_outer_fence_keeps_inner_fences():
    text = "````markdown\n# Title\n\n```sh\nls\n```\n\nend\n````"
    assert parse_file(Answer(text), "README.md") == "# Title\n\n```sh\nls\n```\n\nend\n"


def test_tilde_fence_and_files_without_a_suffix():
    assert parse_file(Answer("~~~\nFROM python:3.12\n```not a close\n~~~"), "Dockerfile") == \
        "FROM python:3.12\n```not a close\n"


def test_file_fence_problems():
    with pytest.raises(ParseError, match="no code fence"):
        parse_file(Answer("print(1)"), "a.py")
    with pytest.raises(ParseError, match="not closed.*output limit"):
        parse_file(Answer("```python\nprint(1)\n", "length", 100), "a.py")
    inner = "```markdown\n# T\n```sh\nls\n```\ntext\n```"  # a Markdown file with fences, 3-tick outer
    with pytest.raises(ParseError, match="longer outer fence"):
        parse_file(Answer(inner), "README.md")


# --- tools and path gates --------------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("b\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return Workspace(root, ("out.txt", "sub/c.txt"),
                     {"ok": [sys.executable, "-c", "print('fine')"]}, timeout=5, output_limit=8192)


def ctx_for(root: Path, config=None, state=None, planning=False):
    config = config or settings.RunConfig.model_validate({"tools": {"write_paths": ["out.txt"],
                                                                     "commands": {"ok": ["true"]}}})
    state = state or RunState(id="t", goal="g", config=config)
    return GateContext(state, config, Workspace(root, tuple(config.tools.write_paths), config.tools.commands),
                       planning)


def check(call_tool, args, root, planning=False, **kw):
    call = Call(tool=call_tool, arguments=args)
    for gate in (gates.AllowedTool(), gates.Arguments(), gates.Paths(), gates.Commands(), gates.Repetition()):
        gate.check(call, ctx_for(root, planning=planning, **kw))


@pytest.mark.parametrize("purpose, kinds", [("plan", ("plan",)), ("act", ("tool", "final"))])
def test_every_path_a_grammar_admits_passes_the_paths_gate(ws, purpose, kinds):
    # a free-string path let the bundled model propose /example.txt and examples/example.txt for
    # list_files until the run blocked (seen in CI); each path argument must be an enum of names
    # the gate accepts, hidden folders and links that leave the workspace left out
    from bantam.runs.context import Request
    from bantam.runs.model import grammar_tools
    root = ws.root
    (root / "sub" / "deeper").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    os.symlink(root.parent / "secret.txt", root / "link.txt")
    os.symlink(root.parent, root / "up")
    request = Request(purpose, [], kinds, tools=["read_file", "list_files"])
    schemas = [t["function"]["parameters"] for t in grammar_tools(request, ws)]
    if purpose == "plan":
        steps = schemas[0]["properties"]["steps"]["items"]["anyOf"]
        schemas = [(s["properties"]["tool"]["const"], s["properties"]["arguments"]) for s in steps]
    else:
        schemas = list(zip(["read_file", "list_files"], schemas, strict=True))
    admitted = {}
    for tool, arguments in schemas:
        path = arguments["properties"]["path"]
        assert "enum" in path, (tool, path)
        admitted[tool] = path["enum"]
        for choice in path["enum"]:
            check(tool, {"path": choice}, root, planning=purpose == "plan")
    assert set(admitted["read_file"]) >= {"a.txt", "sub/b.txt"}
    assert ("out.txt" in admitted["read_file"]) == (purpose == "plan")  # written by an earlier step
    assert admitted["list_files"] == [".", "sub", "sub/deeper"]
    assert not any(".git" in c or "link" in c or c.startswith("up") for c in sum(admitted.values(), []))


def test_a_huge_workspace_costs_a_bounded_walk_per_grammar(tmp_path):
    from bantam.runs.model import NAMES_IN_GRAMMAR, workspace_names
    for i in range(60):
        (tmp_path / f"d{i:02}").mkdir()
        for j in range(2):
            (tmp_path / f"d{i:02}" / f"f{j:03}").write_bytes(b"")
    files, folders = workspace_names(tmp_path)
    assert len(files) == NAMES_IN_GRAMMAR and len(folders) == NAMES_IN_GRAMMAR
    assert folders[0] == "d00" and files[0] == "d00/f000"  # shallowest first, in name order


def test_path_gate_blocks_traversal_absolute_and_symlink_escapes(ws):
    root = ws.root
    os.symlink(root.parent / "secret.txt", root / "link.txt")
    os.symlink(root.parent, root / "up")
    os.symlink(root / "a.txt", root / "inner.txt")  # a link that stays inside is fine
    for path, reason in [("../secret.txt", "'..' is not allowed"), ("sub/../../secret.txt", "'..'"),
                         (str(root.parent / "secret.txt"), "absolute"), ("link.txt", "outside the workspace"),
                         ("up/secret.txt", "outside the workspace"), ("sub", "not a regular file"),
                         ("missing.txt", "no such file")]:
        with pytest.raises(Rejected, match=reason) as e:
            check("read_file", {"path": path}, root)
        assert e.value.gate == "paths"
        with pytest.raises(Refused):  # the tool refuses on its own too
            run_tool("read_file", {"path": path}, ws)
    check("read_file", {"path": "inner.txt"}, root)
    assert run_tool("read_file", {"path": "inner.txt"}, ws).content == "hello\n"


def test_fifo_is_not_a_regular_file(ws):
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(Rejected, match="not a regular file"):
        check("read_file", {"path": "pipe"}, ws.root)


def test_write_only_to_write_paths_and_never_through_an_outside_link(ws):
    with pytest.raises(Refused, match="not in write_paths"):
        run_tool("write_file", {"path": "a.txt", "content": "x"}, ws)
    os.symlink(ws.root.parent, ws.root / "sub" / "c.txt.d")
    (ws.root / "sub" / "c.txt").unlink(missing_ok=True)
    os.symlink(ws.root.parent / "secret.txt", ws.root / "sub" / "c.txt")
    with pytest.raises(Refused, match="outside"):
        run_tool("write_file", {"path": "sub/c.txt", "content": "x"}, ws)
    assert (ws.root.parent / "secret.txt").read_text() == "outside\n"
    result = run_tool("write_file", {"path": "out.txt", "content": "new\n"}, ws)
    assert not result.is_error and (ws.root / "out.txt").read_text() == "new\n" and result.facts["bytes"] == 4


def test_call_gates_tools_arguments_commands(ws):
    root = ws.root
    with pytest.raises(Rejected, match="'delete_file' is not an allowed tool") as e:
        check("delete_file", {}, root)
    assert e.value.gate == "tools"
    with pytest.raises(Rejected, match="files are written only as plan steps"):
        check("write_file", {"path": "out.txt", "content": "x"}, root)
    check("write_file", {"path": "out.txt"}, root, planning=True)  # a plan step names only the path
    with pytest.raises(Rejected, match="not in write_paths") as e:
        check("write_file", {"path": "a.txt"}, root, planning=True)
    with pytest.raises(Rejected, match="takes no argument 'content'"):
        check("write_file", {"path": "out.txt", "content": "x"}, root, planning=True)
    with pytest.raises(Rejected, match="needs the argument 'path'") as e:
        check("read_file", {}, root)
    assert e.value.gate == "arguments"
    with pytest.raises(Rejected, match="argument 'path' must be a str"):
        check("read_file", {"path": 3}, root)
    with pytest.raises(Rejected, match="'rm -rf /' is not a named command") as e:
        check("shell", {"command": "rm -rf /"}, root)
    assert e.value.gate == "commands"
    check("shell", {"command": "ok"}, root)
    readonly = settings.RunConfig()
    with pytest.raises(Rejected, match="allowed: read_file, list_files$"):
        check("shell", {"command": "ok"}, root, config=readonly)


def test_repetition_gate(ws):
    config = settings.RunConfig()
    state = RunState(id="t", goal="g", config=config)
    ctx = ctx_for(ws.root, config, state)
    call = Call(tool="read_file", arguments={"path": "a.txt"})
    state.last_call, state.repeats = gates.call_key(call, ctx), 3
    with pytest.raises(Rejected, match="already ran 3 times") as e:
        gates.Repetition().check(call, ctx)
    assert e.value.gate == "repetition"
    gates.Repetition().check(Call(tool="read_file", arguments={"path": "sub/b.txt"}), ctx)


def test_budget_gates():
    config = settings.RunConfig.model_validate({"limits": {"max_iterations": 2, "max_replans": 1,
                                                           "max_runtime_seconds": 60}})
    state = RunState(id="t", goal="g", config=config)
    gates.check_turn(state, config)
    cases = [("iterations", 2, "max_iterations"), ("consecutive_failures", 20, "max_consecutive_failures"),
             ("parse_retries", 6, "max_parse_retries")]
    for field, value, gate in cases:
        fresh = state.model_copy(deep=True)
        setattr(fresh.counters, field, value)
        with pytest.raises(Blocked) as e:
            gates.check_turn(fresh, config)
        assert e.value.gate == gate
    with pytest.raises(Blocked, match="limit 60s") as e:
        gates.check_turn(state, config, now=state.created + 61)
    state.counters.replans = 1
    with pytest.raises(Blocked, match="all 1 repair plans are used"):
        gates.check_replans(state, config)
    unlimited = settings.RunConfig.model_validate({"limits": {"max_replans": "unlimited"}})
    state.counters.replans = 10_000
    gates.check_replans(state, unlimited)
    state.counters.tool_calls = 160
    with pytest.raises(Blocked, match="160 of 160 tool calls"):
        gates.check_tool_budget(state, unlimited)


def test_token_gate_reserves_and_refuses_overlong_prompts():
    config = settings.RunConfig.model_validate({"limits": {"max_tokens": 5000}})
    state = RunState(id="t", goal="g", config=config)
    gates.check_tokens(state, config, prompt=3000, output=1024, window=8192)
    with pytest.raises(Blocked, match="more than the model's context window of 4096; refused rather than cut"):
        gates.check_tokens(state, config, prompt=3500, output=1024, window=4096)
    state.counters.tokens_used = 1000
    with pytest.raises(Blocked, match="1000 of 5000 tokens used; the next inference reserves 4024") as e:
        gates.check_tokens(state, config, prompt=3000, output=1024, window=8192)
    assert e.value.gate == "max_tokens"


def test_completion_gate_needs_steps_reads_and_current_checks(ws):
    config = settings.RunConfig.model_validate({"tools": {"write_paths": ["out.txt"],
                                                          "required_verifications": ["ok"],
                                                          "commands": {"ok": ["true"]}}})
    state = RunState(id="t", goal="g", config=config, require_read=["a.txt"])
    state.plan = [PlanStep(description="Read a", tool="read_file", arguments={"path": "a.txt"})]
    ctx = ctx_for(ws.root, config, state)
    assert gates.unmet(ctx) == ["step 1 (Read a) is not done", "no file has been read in full yet",
                                "the required file a.txt has not been read in full",
                                "the check 'ok' has not passed on the current files"]
    state.plan[0].status = "done"
    state.reads["a.txt"] = "sha"
    (ws.root / "out.txt").write_text("v1")
    state.verifications["ok"] = ctx.workspace.files_hash(["out.txt"])
    gates.check_final(ctx)
    (ws.root / "out.txt").write_text("v2")  # the check was for other code
    with pytest.raises(Rejected, match="'ok' has not passed on the current files"):
        gates.check_final(ctx)


# --- commands -------------------------------------------------------------------------------------


def shell(ws, argv, **kw):
    ws.commands = {"c": argv}
    for key, value in kw.items():
        setattr(ws, key, value)
    return run_tool("shell", {"command": "c"}, ws)


def test_command_runs_without_a_shell_in_the_workspace_with_stdin_closed(ws):
    result = shell(ws, [sys.executable, "-c", "import os,sys; print(os.getcwd()); print(repr(sys.stdin.read())); "
                                              "print(sys.argv[1])", "$HOME; echo hi"])
    cwd, stdin, arg = result.content.splitlines()
    assert Path(cwd) == ws.root.resolve() and stdin == "''" and arg == "$HOME; echo hi"
    assert not result.is_error and result.exit_code == 0
    failed = shell(ws, [sys.executable, "-c", "raise SystemExit(3)"])
    assert failed.is_error and failed.exit_code == 3
    missing = shell(ws, ["/no/such/program"])
    assert missing.exit_code == 127 and "cannot start" in missing.content


def test_command_environment_has_no_credentials(ws, monkeypatch):
    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "MY_AUTH"):
        monkeypatch.setenv(name, "leak")
    monkeypatch.setenv("HARMLESS", "visible")
    assert "OPENAI_API_KEY" not in clean_env()
    result = shell(ws, [sys.executable, "-c", "import os; print(sorted(os.environ))"])
    assert "leak" not in result.content and "OPENAI_API_KEY" not in result.content
    assert "GITHUB_TOKEN" not in result.content and "HARMLESS" in result.content


def test_command_output_is_capped(ws):
    result = shell(ws, [sys.executable, "-c", "print('x' * 100000); print('THE END')"], output_limit=8192)
    assert result.clipped and len(result.content.encode()) < 8400
    assert "bytes clipped of" in result.content and "THE END" in result.content


def test_command_timeout_kills_the_process_group(ws, tmp_path):
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    started = time.monotonic()
    result = shell(ws, [sys.executable, "-c", code], timeout=1.0)
    assert result.exit_code == 124 and "timed out after 1s" in result.content
    assert time.monotonic() - started < 10
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the command's child survived the timeout")


def test_list_files(ws):
    os.symlink(ws.root.parent / "secret.txt", ws.root / "link")
    listing = run_tool("list_files", {"path": "."}, ws).content.splitlines()
    assert listing == ["a.txt (6 bytes)", "link -> (symlink)", "sub/b.txt (2 bytes)"]
    assert run_tool("list_files", {"path": "a.txt"}, ws).content == "a.txt (6 bytes)"


# --- settings -------------------------------------------------------------------------------------


def write(tmp_path, text, name="run.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_are_the_seeds():
    limits = settings.RunConfig().limits
    assert (limits.max_replans, limits.max_iterations, limits.max_tool_calls, limits.max_tokens,
            limits.max_consecutive_failures, limits.max_parse_retries) == (20, 200, 160, 500000, 20, 5)
    assert settings.RunConfig().runtime.file_output_format == "fenced"


def test_config_file_with_placeholders(tmp_path):
    path = write(tmp_path, '[limits]\nmax_replans = "unlimited"\n[tools]\nwrite_paths = ["./app.py"]\n'
                           'required_verifications = ["verify"]\n[tools.commands]\n'
                           'verify = ["{python}", "{config_dir}/verify.py"]\n')
    config = settings.load(path)
    assert config.limits.max_replans == "unlimited" and config.tools.write_paths == ["app.py"]
    assert config.tools.commands["verify"] == [sys.executable, f"{tmp_path.resolve()}/verify.py"]


@pytest.mark.parametrize("text, message", [
    ("[limits]\nmax_replans = -1\n", "[limits] max_replans: expected a non-negative integer"),
    ("[limit]\nmax_replans = 1\n", "[limit]: Extra inputs are not permitted"),
    ('[limits]\nmax_iterations = "5"\n', "[limits] max_iterations: expected an integer, got '5'"),
    ("[limits]\nmax_iteration = 5\n", "[limits] max_iteration: Extra inputs are not permitted"),
    ('[tools]\nrequired_verifications = ["verify"]\n', "'verify' is not in [tools.commands]"),
    ('[tools]\nwrite_paths = ["../x"]\n', "must be a relative path inside the workspace"),
    ('[runtime]\nkeep_best = true\n', "keep_best needs exactly one command"),
    ('[runtime]\nrepair_strategy = "rewrite"\n', "needs [tools] write_paths"),
    ("[limits\n", "not valid TOML"),
])
def test_bad_config_says_what_and_where(tmp_path, text, message):
    with pytest.raises(ConfigError) as e:
        settings.load(write(tmp_path, text))
    assert message in str(e.value) and "run.toml" in str(e.value)


def test_resume_config_changes_limits_keeps_format_and_policy(tmp_path):
    saved = settings.load(write(tmp_path, '[runtime]\nfile_output_format = "json"\n[tools]\nwrite_paths = ["a"]\n'))
    new, changes = settings.for_resume(saved, write(tmp_path, '[limits]\nmax_replans = 40\n[runtime]\n'
                                                              'file_output_format = "fenced"\n', "r.toml"))
    assert new.limits.max_replans == 40 and new.runtime.file_output_format == "json"
    assert changes["limits.max_replans"] == [20, 40] and "ignored" in changes["runtime.file_output_format"][1]
    assert new.tools.write_paths == ["a"]
    with pytest.raises(ConfigError, match="cannot change for an existing run"):
        settings.for_resume(saved, write(tmp_path, '[tools]\nwrite_paths = ["b"]\n', "t.toml"))


# --- partial repairs --------------------------------------------------------------------------------


def test_patch_replaces_a_function_a_method_or_lines():
    from bantam.runs import patch
    source = ("import x\n\n\n@decorated\ndef f(a):\n    return 1\n\n\nclass C:\n    def m(self):\n"
              "        return 2\n\n    def n(self):\n        return 3\n")
    assert patch.header("function f\n```\nbody\n```") == "f"
    assert patch.header("Replace lines 3 to 7:\n```\nx\n```") == (3, 7)
    assert patch.header("```\nfunction f\n```") is None  # inside the fence it is content
    assert patch.apply(source, "f", "def f(a):\n    return 10\n", "m.py").startswith(
        "import x\n\n\ndef f(a):\n    return 10\n\n\nclass C:")  # the decorator went with it
    method = patch.apply(source, "C.m", "def m(self):\n    return 20", "m.py")
    assert "    def m(self):\n        return 20\n\n    def n(self):" in method  # indentation restored
    assert patch.apply("a\nb\nc\n", (2, 2), "B\nB2", "t.txt") == "a\nB\nB2\nc\n"
    for target, problem in [("g", "no function or class 'g'"), ((4, 9), "lines 4-9 are not in t.txt")]:
        with pytest.raises(ParseError, match=problem):
            patch.apply("a\nb\nc\n" if isinstance(target, tuple) else source, target, "x", "t.txt")
    with pytest.raises(ParseError, match="not valid Python"):
        patch.apply("def (:\n", "f", "x", "bad.py")
