"""Controlled runs where a user trips: a server that answers with a native tool call named plan,
the token count of a request that failed, and /run's options after the goal in the terminal and
the browser. Real runs, a real local model server, real files."""
import io
import json
from pathlib import Path

from bantam.repl import Repl
from bantam.web.session import WebSession
from tests.conftest import base_cfg, wait_for, write_cfg
from tests.fakes.openai_server import json_reply, text_reply, tool_reply
from tests.runs.test_runs import FINAL, PLAN_READ, bantam, only_run, state_of, workspace


def test_native_tool_calls_named_plan_are_read_as_proposals(home, capsys, server):
    write_cfg(home, **base_cfg(server))
    ws = workspace(home, **{"a.txt": "alpha\n"})
    server.add(tool_reply("plan", {"steps": json.loads(PLAN_READ)["plan"]}),
               tool_reply("plan", {"tool": "read_file", "arguments": {"path": "a.txt"}}),
               text_reply(FINAL))
    code, out, err = bantam(capsys, "run", "read a", "--workspace", ws)
    assert code == 0 and out == "done\n", err
    assert "not valid JSON" not in err
    assert "plan accepted" in err or "1 steps" in err
    counters = state_of(only_run(home))["counters"]
    assert counters["parse_failures"] == 0 and counters["parser_recoveries"] == 1  # the action inside "plan"


def test_a_failed_request_is_no_lost_reservation(home, capsys, server):
    write_cfg(home, **base_cfg(server))
    ws = workspace(home, **{"a.txt": "alpha\n"})
    server.add(json_reply({"error": {"message": "invalid model"}}, status=400))
    code, _, err = bantam(capsys, "run", "read a", "--workspace", ws)
    assert code == 1 and "invalid model" in err
    counters = state_of(only_run(home))["counters"]
    assert counters["model_calls"] == 1
    assert counters["lost_reservations"] == 0 and counters["tokens_used"] == 0
    code, out, _ = bantam(capsys, "status", only_run(home).name)
    assert "lost reservations 0" in out


def run_folder(folder: Path) -> Path:
    (folder / "ws").mkdir(parents=True)
    (folder / "ws" / "a.txt").write_text("alpha\n")
    read = '{"tool": "read_file", "arguments": {"path": "a.txt"}}'
    (folder / "answers.json").write_text(json.dumps([PLAN_READ, read, json.dumps({"final": "a says alpha"})]))
    return folder


def ran(folder: Path) -> tuple[str, list[str]]:
    run = only_run(folder)
    return (run / "goal.md").read_text(), sorted(p.name for p in (run / "workspace").iterdir())


LINE = "/run read a --workspace ws --scripted answers.json --require-read a.txt"  # as /help shows it


def test_run_options_after_the_goal_are_read_in_the_terminal(home, server):
    write_cfg(home, **base_cfg(server))
    folder = run_folder(home / "term")
    lines = iter([LINE, "/quit"])
    out, err = io.StringIO(), io.StringIO()

    def read(prompt: str) -> str:
        wait_for(lambda: not repl.run_active.is_set(), "the run to end")
        return next(lines)
    repl = Repl({}, read=read, out=out, err=err, folder=folder)
    assert repl.run() == 0
    assert "a says alpha" in out.getvalue(), err.getvalue()
    assert ran(folder) == ("read a", ["a.txt"])


def test_run_options_after_the_goal_are_read_in_the_browser(home, server):
    write_cfg(home, **base_cfg(server))
    folder = run_folder(home / "web")
    page = WebSession({}, folder)
    try:
        assert page.submit(LINE) == "started"
        wait_for(lambda: page.job is None, "the run to end")
        assert page.submit("/run read a --workspace") == "started"
        wait_for(lambda: page.job is None, "the refusal")
    finally:
        page.close()
    assert ran(folder) == ("read a", ["a.txt"])
    shown = " ".join(str(e.get("text") or e.get("message") or "") for e in page.log)
    assert "a says alpha" in shown and "/run: argument --workspace: expected one argument" in shown
