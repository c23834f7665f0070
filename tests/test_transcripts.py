"""Sessions and compaction on real files; the model's side of compaction is a scripted model in
process (tests/fakes/scripted.py). The front ends' imports are checked in a real process."""
import json
import subprocess
import sys

import pytest

from bantam import compact, transcripts
from bantam.errors import APIError
from tests.fakes.openai_server import text_reply
from tests.fakes.scripted import ScriptedProvider, text

pytestmark = pytest.mark.quick

MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "fix the bug"},
            {"role": "assistant", "content": "done"}]


def lines(path):
    """The records of a session file, parsed here rather than by bantam."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_save_load_prefix_and_listing(home):
    transcripts.save("alpha-1", MESSAGES, summary="first", secret="sk-hide-me")
    transcripts.save("alpha-2", MESSAGES + [{"role": "user", "content": "key sk-hide-me"}])
    transcripts.save("beta", MESSAGES)
    assert transcripts.load("beta") == ("beta", MESSAGES[1:])  # the system prompt is rebuilt on load
    assert transcripts.load("alpha-1")[0] == "alpha-1"
    with pytest.raises(transcripts.SessionError, match="matches 2 sessions"):
        transcripts.load("alpha")
    with pytest.raises(transcripts.SessionError, match="no session matches"):
        transcripts.load("gamma")
    rows = transcripts.listing()
    assert [r.id for r in rows] == ["beta", "alpha-2", "alpha-1"]  # newest first
    assert rows[2].summary == "first" and rows[1].summary == "fix the bug" and rows[1].count == 3
    folder = transcripts.sessions_dir()
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.iterdir())
    head, *messages = lines(folder / "alpha-1.jsonl")  # the file contract: a head, then the messages
    assert head["session"] == "alpha-1" and head["summary"] == "first" and messages == MESSAGES[1:]


def test_secret_never_written(home):
    path = transcripts.save("s", MESSAGES + [{"role": "user", "content": "my key is sk-hide-me"}], secret="sk-hide-me")
    assert "sk-hide-me" not in path.read_text() and "***" in path.read_text()


def test_unreadable_files_are_listed_not_lost(home):
    folder = transcripts.sessions_dir()
    folder.mkdir(parents=True)
    (folder / "broken.json").write_text("{not json")
    (folder / "wrong.json").write_text(json.dumps({"messages": "nope"}))
    (folder / "damaged.jsonl").write_text('{"session": "damaged"}\n{not json\n{"role": "user", "content": "x"}\n')
    rows = {r.id: r for r in transcripts.listing()}
    assert "not a readable session" in rows["broken"].problem and rows["wrong"].problem
    assert "damaged.jsonl:2: not a JSON object" in rows["damaged"].problem
    with pytest.raises(transcripts.SessionError, match="broken.json: not a readable session"):
        transcripts.load("broken")
    with pytest.raises(transcripts.SessionError, match="damaged.jsonl:2"):
        transcripts.load("damaged")
    assert (folder / "broken.json").read_text() == "{not json"
    assert (folder / "damaged.jsonl").read_text().count("\n") == 3


def test_autosave_refuses_to_overwrite_an_unreadable_file(home):
    save = transcripts.Autosave()
    path = transcripts.sessions_dir() / f"{save.id}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("garbage\n{}\n")
    assert "will not overwrite" in save(MESSAGES)
    save(MESSAGES)
    assert path.read_text() == "garbage\n{}\n"
    save.adopt()
    save(MESSAGES)
    assert lines(path)[1:] == MESSAGES[1:]


def test_autosave_appends_only_what_is_new(home):
    messages = list(MESSAGES)
    save = transcripts.Autosave()
    save(messages)
    path = transcripts.sessions_dir() / f"{save.id}.jsonl"
    before = path.read_bytes()
    inode = path.stat().st_ino
    messages += [{"role": "user", "content": "and the docs"}, {"role": "assistant", "content": "written"}]
    save(messages)
    after = path.read_bytes()
    assert after.startswith(before) and path.stat().st_ino == inode  # appended, not rewritten
    assert [json.loads(line) for line in after[len(before):].splitlines()] == messages[-2:]
    save(messages)  # nothing new: nothing written
    assert path.read_bytes() == after
    # a later process continues it, and appends too
    again = transcripts.Autosave()
    resumed = again.resume()
    assert resumed == messages[1:]
    resumed.append({"role": "user", "content": "thanks"})
    again([{"role": "system", "content": "S2"}, *resumed])
    assert path.read_bytes().startswith(after) and path.stat().st_ino == inode
    assert lines(path)[1:] == resumed


def test_clear_and_compaction_rewrite_the_file_atomically(home):
    messages = list(MESSAGES)
    save = transcripts.Autosave()
    save(messages)
    path = transcripts.sessions_dir() / f"{save.id}.jsonl"
    inode = path.stat().st_ino
    messages[1:] = [{"role": "user", "content": "summary of it all"}]  # what compaction does
    save(messages)
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert lines(path)[1:] == messages[1:]
    messages[1:] = []  # /clear
    save(messages)
    assert len(lines(path)) == 1 and "role" not in lines(path)[0]
    assert not list(path.parent.glob(".*.tmp"))


def test_a_torn_last_line_loses_only_that_message(home):
    messages = list(MESSAGES)
    save = transcripts.Autosave()
    save(messages)
    path = transcripts.sessions_dir() / f"{save.id}.jsonl"
    with open(path, "ab") as f:  # what a crash in the middle of an append leaves behind
        f.write(b'{"role": "user", "content": "half of it')
    notices = []
    assert transcripts.load(save.id, notices.append) == (save.id, MESSAGES[1:])
    assert len(notices) == 1 and "cut off" in notices[0] and f"{path}:4" in notices[0]
    assert path.read_bytes().endswith(b"half of it")  # a reader never writes
    # the next autosave continues from the last whole message, and the file is whole again
    fresh = transcripts.Autosave()
    messages.append({"role": "user", "content": "next"})
    fresh(messages)
    assert lines(path)[1:] == messages[1:]


def test_two_writers_never_interleave(home):
    first, second = transcripts.Autosave(), transcripts.Autosave()  # two terminals in one project
    mine = list(MESSAGES)
    first(mine)
    theirs = [{"role": "system", "content": "S"}, {"role": "user", "content": "another task"}]
    second(theirs)
    mine.append({"role": "user", "content": "go on"})
    first(mine)  # the file is not what `first` left: it is rewritten whole, never appended to
    path = transcripts.sessions_dir() / f"{first.id}.jsonl"
    assert lines(path)[1:] == mine[1:]


def test_old_json_sessions_are_read_and_moved_to_json_lines(home):
    folder = transcripts.sessions_dir()
    folder.mkdir(parents=True)
    save = transcripts.Autosave()
    old = folder / f"{save.id}.json"
    old.write_text(json.dumps({"id": save.id, "updated": 1.0, "summary": "old one", "messages": MESSAGES}))
    (folder / "named.json").write_text(json.dumps({"id": "named", "messages": MESSAGES}))
    assert transcripts.load("named") == ("named", MESSAGES[1:])
    assert {r.id: r.summary for r in transcripts.listing()} == {save.id: "old one", "named": "fix the bug"}
    messages = [{"role": "system", "content": "S"}, *save.resume()]
    messages.append({"role": "user", "content": "more"})
    save(messages)
    assert not old.exists() and lines(folder / f"{save.id}.jsonl")[1:] == messages[1:]
    transcripts.delete("named")
    assert transcripts.session_ids() == [save.id]


def test_project_id_is_md5_of_the_directory(home):
    import hashlib
    assert transcripts.project_id(home) == hashlib.md5(str(home.resolve()).encode()).hexdigest()


def test_compact_keeps_task_latest_request_and_rules(home):
    (home / "AGENTS.md").write_text("Rule: run tests first.")
    messages = MESSAGES + [{"role": "user", "content": "now add docs"}]
    model = ScriptedProvider(text("Fixed the bug; docs pending."))
    compact.compact(model, messages, (0,))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert model.requests[0].tools == []  # a summary request offers no tools
    summary = messages[1]["content"]
    for part in ("Original task (verbatim):\nfix the bug", "Latest request (verbatim):\nnow add docs",
                 "Rule: run tests first.", "Fixed the bug; docs pending."):
        assert part in summary
    # compacting again keeps the original task, not the previous summary
    messages += [{"role": "assistant", "content": "docs added"}]
    model.add(text("All done."))
    compact.compact(model, messages, (0,))
    assert "Original task (verbatim):\nfix the bug\n\n" in messages[1]["content"]
    assert messages[1]["content"].count("Original task") == 1


def test_compact_when_even_the_summary_request_is_too_long(home):
    long = [{"role": "system", "content": "S"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(16)]
    overflow = "HTTP 400: prompt is too long: 300000 tokens > 200000 maximum"
    model = ScriptedProvider(APIError(overflow, status=400), APIError(overflow, status=400), text("short summary"))
    compact.compact(model, long, (0,))
    sizes = [len(r.messages) for r in model.requests]
    assert sizes[0] > sizes[1] > sizes[2]
    assert "short summary" in long[1]["content"] and "message 0" in long[1]["content"]


def test_compact_fails_cleanly_on_other_errors(home):
    messages = list(MESSAGES)
    model = ScriptedProvider(APIError("HTTP 401: bad key", status=401))
    with pytest.raises(APIError):
        compact.compact(model, messages, ())
    assert messages == MESSAGES and len(model.requests) == 1


def test_front_ends_import_only_what_they_need(home, server):
    (home / ".bantam.cfg").write_text(f"endpoint={server.url}\nmodel=test-model\n")
    server.add(text_reply("ok"))
    code = ("import sys; from bantam.cli import main; main(['-p', 'x']); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'prompt_toolkit', 'pygments'}))")
    r = subprocess.run([sys.executable, "-c", code], cwd=home, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.stdout.strip().endswith("[]"), r.stdout + r.stderr
    code = "import sys; import bantam.repl; print(sorted(m for m in sys.modules if m.startswith('bantam.render.jsonl')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]"
