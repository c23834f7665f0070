"""A recorded turn shown as a diff (undo/diff.py): text hunks, and one line for what has none."""
import pytest

from bantam.undo.diff import turn_diff
from bantam.undo.restore import UndoError
from bantam.undo.store import SECRET, Store
from bantam.undo.turns import record_path


def recorded(store: Store, changes: dict) -> int:
    store.write_json(record_path(store, "session-x", 1), {"key": "session-x", "seq": 1, "turn": 1, "changes": changes})
    return 1


def entry(store: Store, data: bytes, mode: int = 0o644) -> list:
    return ["f", mode, store.put(data), len(data), 0, 0, 0]


def test_each_kind_of_change_reads_as_git_would_show_it(tmp_path):
    store = Store(tmp_path / "undo")
    seq = recorded(store, {
        "app.py": [entry(store, b"a\nb\n"), entry(store, b"a\nc", 0o755)],
        "logo.png": [None, entry(store, b"\x89PNG\x00\x01")],
        "old.txt": [entry(store, b"gone\n"), None],
        "build": [None, ["d", 0o755, "", 0, 0, 0, 0]],
        ".env": [["i", 0o600, f"{SECRET}10:1", 0, 0, 0, 0], ["i", 0o600, f"{SECRET}12:2", 0, 0, 0, 0]],
    })
    text = turn_diff("session-x", seq, store)
    assert "diff --git a/app.py b/app.py\nold mode 644\nnew mode 755\n--- a/app.py\n+++ b/app.py\n" in text
    assert " a\n-b\n+c\n\\ No newline at end of file\n" in text
    assert "new file mode 644\nBinary files /dev/null and b/logo.png differ\n" in text
    assert "deleted file mode 644\n--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n" in text
    assert "diff --git a/build b/build\n(absent) -> folder\n" in text
    assert "diff --git a/.env b/.env\nnot shown: it may hold keys, so its content was not kept\n" in text


def test_a_turn_not_recorded_is_one_clear_error(tmp_path):
    with pytest.raises(UndoError, match="no recorded turn 7 in session-x"):
        turn_diff("session-x", 7, Store(tmp_path / "undo"))
