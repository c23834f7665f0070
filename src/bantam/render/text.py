"""Plain text: the answer on stdout, everything else on stderr, in colour on a terminal.

Every character of an event (the model's answer and reasoning, its tool calls, a server's error
message) is made terminal-safe here, where it comes in, whether stdout and stderr are a terminal or
a pipe (what a pipe gets may be `cat` to a terminal later): no escape sequence of the model's or a
server's reaches either stream. bantam's own colours and Markdown are drawn after that.
"""
from __future__ import annotations

import re
import shutil
import sys
from typing import IO, Callable

from ..events import (Done, Error, Event, Notice, Preparing, Reasoning, RequestStarted, Retry, Text,
                      ToolCall, ToolResult, UsageReport)
from ..sanitize import TerminalStream, terminal_safe
from . import stated_window, usage_line

STATUS, CYAN, DIM, YELLOW, GREEN, RED, RESET = (
    "\033[1;90m", "\033[36m", "\033[2m", "\033[33m", "\033[32m", "\033[31m", "\033[0m")
MARKDOWN_HINT = re.compile(r"[*_`#|>]|^\s*(?:[-+]|\d+\.)\s|\]\(", re.M)  # worth redrawing
# A synchronized update (DEC mode 2026): the terminal shows what comes between the two at once, so
# the streamed answer is replaced by its rendered Markdown without a frame of cleared screen
# between them. Terminals without the mode ignore both.
SYNC_START, SYNC_END = "\033[?2026h", "\033[?2026l"
RESULT_LINES = 20    # lines of a tool result shown; the model always gets all of it
CALL_CHARS = 2000    # characters of tool arguments shown
LINE_CHARS = 400     # characters of one tool result line shown


class TextRenderer:
    def __init__(self, out: IO[str], err: IO[str], color: bool, context_window: Callable[[], int],
                 status: bool = False, markdown: bool = False, live: bool = False):
        self.out, self.err = out, err
        self.color = color
        self.markdown = markdown      # redraw each answer as rendered Markdown (stdout is a terminal)
        # On a terminal the answer streams as it comes, and a retried request's partial answer is
        # erased; into a pipe or file each response is written whole, so none is ever left behind.
        self.live = live
        self.segment: list[str] = []  # the answer text of the response in progress
        self.held = False             # a long Markdown answer kept off the screen until it is complete
        self.filled = False           # the answer in progress has filled the screen once
        self.held_lines = 0
        self.context_window = context_window
        self.session_cost = 0.0       # dollars, over every turn this renderer showed (/cost)
        self.status = status          # show `...requesting...` in place (a terminal only)
        self.status_shown = False
        self.in_reasoning = False
        self.mid_line = False         # the last character written was not a newline
        self.answer_mid_line = False  # the same, for stdout alone
        # streamed text, cleaned piece by piece: an escape sequence split between two deltas is
        # held back until it is complete, then dropped whole
        self.answer_stream, self.reasoning_stream = TerminalStream(), TerminalStream()

    def __call__(self, event: Event) -> None:
        if self.status_shown and not (self.held and isinstance(event, Text)):  # a held answer's count stays
            self.err.write("\r\033[K")
            self.status_shown = False
        if isinstance(event, RequestStarted):
            if self.status:
                self._status(event.what if isinstance(event, Preparing) and event.what else "requesting")
            return
        if isinstance(event, Reasoning):
            if not self.in_reasoning:
                self._line("--- reasoning start ---", CYAN)
                self.in_reasoning = True
            self._write(self.err, self.reasoning_stream.feed(event.text), DIM)
            return
        self._end_reasoning()
        if isinstance(event, Text):
            self._text(self.answer_stream.feed(event.text))
            return
        if rest := self.answer_stream.flush():
            self._text(rest)
        if isinstance(event, Retry):
            self._discard_answer()
        elif isinstance(event, Error) and not self.live:
            self._drop_answer()  # into a pipe only whole responses go, on the failure path too
        self._end_answer()
        agent = getattr(event, "agent", "")  # which sub-agent
        who = f"{agent} " if agent else ""
        if isinstance(event, ToolCall):
            args = event.arguments if len(event.arguments) <= CALL_CHARS else event.arguments[:CALL_CHARS] + "…"
            self._line(f"[{who}tool call: {event.name}({args})]", YELLOW)
        elif isinstance(event, ToolResult):
            self._line(f"[{who}tool result: {event.name}]", GREEN)
            self._line(_clip_lines(event.content), RED if event.is_error else DIM)
        elif isinstance(event, UsageReport):
            if self.status and isinstance(sys.exc_info()[1], KeyboardInterrupt):
                self.mid_line = True  # the terminal echoed ^C where the cursor was: a new line first
            cost = getattr(self.context_window, "cost", lambda usage: None)(event.usage)
            self.session_cost += cost or 0.0
            self._line(usage_line(event.model, event.usage, stated_window(self.context_window), cost,
                                  self.session_cost), DIM)
        elif isinstance(event, Retry):
            self._line(f"[{who}retry {event.attempt} in {event.delay:g}s: {event.message}]", RED)
        elif isinstance(event, Notice):
            self._line(f"[{who.strip()}: {event.message}]" if who else f"[{event.message}]", DIM)
        elif isinstance(event, Error):
            self._line(f"error: {event.message}", RED)
        elif isinstance(event, Done) and self.answer_mid_line:
            self.out.write("\n")
            self.out.flush()
            self.answer_mid_line = self.mid_line = False

    def reset(self) -> None:
        """After an interrupt: forget half-drawn state and start on a fresh line."""
        self.segment.clear()
        self.answer_stream.flush()
        self.reasoning_stream.flush()
        self.held = self.filled = False
        if self.mid_line:
            self.err.write("\n")
        self.in_reasoning = self.status_shown = self.mid_line = self.answer_mid_line = False

    def _text(self, piece: str) -> None:
        """Answer text: streamed on a terminal, until Markdown grows too long to be redrawn once it
        has scrolled away; then it is taken off the screen and shown rendered when complete."""
        self.segment.append(piece)
        if not self.live:
            return
        if self.markdown and not self.filled:  # checked until the answer fills the screen, once
            text = "".join(self.segment)
            if _rows(text) >= shutil.get_terminal_size().lines - 1:
                self.filled = True
                self.held = bool(MARKDOWN_HINT.search(text)) and self._erase(text[:len(text) - len(piece)])
                self.held_lines = text.count("\n") + 1
                if self.held:
                    piece = ""
        if not self.held:
            return self._answer(piece)
        lines = self.held_lines + piece.count("\n")
        if lines != self.held_lines or not self.status_shown:  # redrawn when it changes, not every token
            self.held_lines = lines
            self._status(f"writing ({lines} lines)")

    def _status(self, label: str) -> None:
        """`...label...` on stderr, in place of the status shown before; cut to one row, since
        what clears it clears the cursor's row only (a wrapped status left its first rows behind)."""
        if self.status_shown:
            self.err.write("\r\033[K")
        self._write(self.err, f"...{label}..."[:shutil.get_terminal_size().columns - 1], STATUS)
        self.status_shown, self.mid_line = True, False

    def _answer(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        if text:
            self.answer_mid_line = not text.endswith("\n")
            if self.live:  # on a terminal stdout and stderr share the screen's line; in a pipe they do not
                self.mid_line = self.answer_mid_line

    def _end_answer(self) -> None:
        """The response's answer is complete: written now (not live), or redrawn as Markdown."""
        text, self.segment = "".join(self.segment), []
        self.filled = False
        if not self.live:  # a pipe: each response's text is whole, its line ended before anything
            if text:         # follows on stderr (the usage line), which may share the pipe's terminal
                self._answer(text if text.endswith("\n") else text + "\n")
            return
        back = "" if self.held else self._back_over(text) if self.markdown and MARKDOWN_HINT.search(text) else None
        if back is not None:  # the streamed text (when on the screen) and its rendering, in one update
            self.held = False
            self.out.write(SYNC_START + back + self._rendered(text) + SYNC_END)
            self.out.flush()
            self.mid_line = self.answer_mid_line = False

    def _rendered(self, text: str) -> str:
        """`text` as rendered Markdown, with the terminal's width and the renderer's colours."""
        import io

        from rich.console import Console

        from .markdown import BoxedMarkdown
        buffer = io.StringIO()
        Console(file=buffer, width=shutil.get_terminal_size().columns, force_terminal=True,
                no_color=not self.color, highlight=False).print(BoxedMarkdown(text))
        return buffer.getvalue()

    def _discard_answer(self) -> None:
        """A request failed part-way and will be sent again: its partial answer must not stay."""
        text, self.segment = "".join(self.segment), []
        self.filled = False
        if self.held:  # nothing of it is on the screen
            self.held = False
        elif text and self.live and not self._erase(text):
            self._line("[the partial answer above was cut off; it is asked for again]", DIM)

    def _drop_answer(self) -> None:
        """The request failed for good with part of its answer received, kept off stdout (a pipe):
        a program reading stdout must never take a cut-off answer for a whole one."""
        text, self.segment = "".join(self.segment), []
        if text:
            self._line(f"[a partial answer ({len(text)} characters) was not written: the response failed]", DIM)

    def _erase(self, text: str) -> bool:
        """Move the cursor back over `text` just written and clear it; False if it scrolled away."""
        back = self._back_over(text)
        if back is None:
            return False
        self.out.write(back)
        self.mid_line = self.answer_mid_line = False
        return True

    @staticmethod
    def _back_over(text: str) -> str | None:
        """What moves the cursor back over `text` just written and clears it; None if it scrolled away."""
        rows = _rows(text)
        if rows >= shutil.get_terminal_size().lines:
            return None
        return f"\r\033[{rows - 1}A\033[J" if rows > 1 else "\r\033[J"

    def _end_reasoning(self) -> None:
        if self.in_reasoning:
            self._write(self.err, self.reasoning_stream.flush(), DIM)
            self.in_reasoning = False
            self._line("--- reasoning end ---", CYAN)

    def _line(self, text: str, color: str) -> None:
        """A whole line on stderr: a trace, a server's message, a notice (cleaned, then coloured)."""
        if self.mid_line:
            self.err.write("\n")
        self._write(self.err, terminal_safe(text), color)
        self.err.write("\n")
        self.err.flush()
        self.mid_line = False

    def _write(self, stream: IO[str], text: str, color: str) -> None:
        stream.write(f"{color}{text}{RESET}" if self.color and text else text)
        stream.flush()
        if text:
            self.mid_line = not text.endswith("\n")


def _rows(text: str) -> int:
    """How many terminal rows `text` takes, long lines wrapped."""
    from rich.cells import cell_len
    columns = shutil.get_terminal_size().columns
    return sum(max(1, -(-cell_len(line) // columns)) for line in text.split("\n"))


def _clip_lines(text: str) -> str:
    """A tool result as the trace shows it: RESULT_LINES lines of at most LINE_CHARS characters
    (one 1 MB line must not flood the terminal)."""
    lines = [line if len(line) <= LINE_CHARS else f"{line[:LINE_CHARS]}… ({len(line) - LINE_CHARS} more characters)"
             for line in text.rstrip("\n").split("\n", RESULT_LINES)[:RESULT_LINES + 1]]
    if len(lines) <= RESULT_LINES:
        return "\n".join(lines)
    more = text.rstrip("\n").count("\n") + 1 - RESULT_LINES
    return "\n".join(lines[:RESULT_LINES]) + f"\n… ({more} more lines)"
