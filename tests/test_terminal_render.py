"""The answer on a terminal, read as the terminal gets it (raw bytes from a real pseudo-terminal):
each piece of a streamed answer is written once, as it comes; an answer with Markdown is then
replaced by its rendering in one synchronized update, so no frame shows the screen cleared; and a
long one kept off the screen redraws its `...writing (N lines)...` status only when N changes."""
from __future__ import annotations

import os
import sys

import pexpect

from bantam.render.text import SYNC_END, SYNC_START
from tests.conftest import base_cfg, write_cfg
from tests.fakes.openai_server import chunk, sse, usage


def streamed(text: str, size: int = 4):
    """`text` in deltas of `size` characters: many more deltas than lines."""
    pieces = [chunk(text[i:i + size]) for i in range(0, len(text), size)]
    return sse([*pieces, chunk(finish="stop"), chunk(usage=usage(40, 4), no_choices=True)])


def on_a_terminal(cwd, rows: int) -> bytes:
    env = {**os.environ, "TERM": "xterm", "NO_COLOR": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "-p", "go"], cwd=str(cwd), env=env,
                          dimensions=(rows, 100), timeout=30)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before


def test_the_streamed_answer_is_written_once_then_replaced_by_its_markdown_in_one_update(home, server):
    write_cfg(home, **base_cfg(server))
    answer = "# Title\n\nSome **bold** text:\n\n" + "".join(f"- item {i} with `code`\n" for i in range(8))
    server.add(streamed(answer))
    out = on_a_terminal(home, rows=40)
    streaming, _, update = out.partition(SYNC_START.encode())
    # while it streams, each delta is written as it comes and nothing is redrawn
    assert streaming.replace(b"\r\n", b"\n").count(answer.encode()) == 1, streaming
    assert b"\x1b[J" not in streaming and b"\x1b[" + str(answer.count("\n")).encode() + b"A" not in streaming
    # then, in one update: back over the streamed rows, clear, the rendering
    update, _, after = update.partition(SYNC_END.encode())
    assert update.startswith(b"\r\x1b[" + str(answer.count("\n")).encode() + b"A\x1b[J"), update[:40]
    assert b"Title" in update and b"item 7 with " in update and b"**bold**" not in update and b"- item" not in update
    assert b"Title" not in after and b"[test-model: 40 prompt" in after


def test_a_long_answer_kept_off_the_screen_redraws_its_status_only_when_its_line_count_changes(home, server):
    write_cfg(home, **base_cfg(server))
    answer = "".join(f"- item {i} with `code`\n" for i in range(40))
    server.add(streamed(answer))  # 40 lines on 20 rows: kept off the screen, rendered when complete
    out = on_a_terminal(home, rows=20)
    statuses = out.count(b"...writing (")
    assert 0 < statuses <= answer.count("\n") < len(answer) // 4, statuses  # per line at most, not per delta
    assert b"item 39 with " in out.partition(SYNC_START.encode())[2]


def test_a_status_wider_than_the_terminal_is_cut_to_one_row(home, server):
    """`\\r` and erase-line clear the cursor's row only: a status that wrapped left its first row
    on the screen (`...requestin` above the answer on a 12-column terminal)."""
    write_cfg(home, **base_cfg(server))
    server.add(streamed("fine"))
    # the width is the terminal's: COLUMNS/LINES (which win in shutil.get_terminal_size) left out
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}, "TERM": "xterm", "NO_COLOR": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "bantam", "-p", "go"], cwd=str(home), env=env,
                          dimensions=(40, 12), timeout=30)
    child.expect(pexpect.EOF)
    child.close()
    assert b"...requesting..." not in child.before and b"...requesti\r\x1b[K" in child.before, child.before
