"""What a project's files say reaches the user's terminal as text, never as escape sequences: the
error line of every front end, the configuration warnings every front end prints at start, and
what the interactive terminal shows (`/cfg`). Real bantam processes in a project whose
.bantam.cfg and .mcp.json hold a window title, a screen clear and a cursor moved up over the
line before."""
import io
import json

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import text_reply
from tests.test_repl import Term

TITLE, CLEAR, UP_AND_ERASE = "\x1b]0;evil\x07", "\x1b[2J", "\x1b[1A\x1b[2K"
RAW = (TITLE, CLEAR, UP_AND_ERASE, "\x1b]0;", "evil\x07")


def _no_raw_sequence(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\x9b"), repr(text)


def test_a_projects_values_in_a_configuration_warning_are_shown_as_text(home, server):
    """An untrusted project's boundary keys are ignored with a warning that quotes them: their
    escape sequences are shown as escapes, on stderr as on any front end's start."""
    server.add(text_reply("hello"))
    write_cfg(home, trusted=False, **base_cfg(server, sandbox_writable=f"/tmp{UP_AND_ERASE}",
                                              env_passthrough=f"GH{TITLE},AWS{CLEAR}"))
    r = run_bantam("-p", "hi", cwd=home)
    assert r.returncode == 0 and r.stdout == "hello\n", r.stderr
    _no_raw_sequence(r.stdout + r.stderr)
    warning = [line for line in r.stderr.splitlines() if line.startswith("bantam: warning:")]
    assert len(warning) == 1, r.stderr
    for shown in (r"sandbox_writable=/tmp\x1b[1A\x1b[2K", r"env_passthrough=GH\x1b]0;evil\x07,AWS\x1b[2J"):
        assert shown in warning[0], warning[0]


def test_a_projects_mcp_server_name_in_an_error_line_drives_nothing(home, server):
    """A server name .mcp.json may not hold is one error line, exit 2: what the name hid is not
    written to the terminal."""
    write_cfg(home, **base_cfg(server))
    name = f"ev{TITLE}il{CLEAR}{UP_AND_ERASE}"
    (home / ".mcp.json").write_text(json.dumps({"mcpServers": {name: {"command": "true"}}}))
    r = run_bantam("-p", "hi", cwd=home)
    assert r.returncode == 2 and r.stdout == ""
    _no_raw_sequence(r.stderr)
    assert r.stderr == (f"bantam: {home / '.mcp.json'}: mcpServers.evil: a server name may hold only "
                        "letters, digits, _ and - (at most 40)\n"), repr(r.stderr)
    assert not server.chat_requests()


def test_cfg_in_the_terminal_shows_a_projects_values_as_text(home, server):
    """In a real pseudo-terminal: the warning at start and /cfg's listing show the project's
    escape sequences as escapes. bantam draws its own prompt with sequences, so the test looks
    for the project's, which must appear only as text."""
    write_cfg(home, trusted=False, **base_cfg(server, model=f"m{TITLE}", **{"alias.fast": f"x{CLEAR}"},
                                              sandbox_writable=f"/tmp{UP_AND_ERASE}"))
    term = Term(home, width=250, NO_COLOR="1")
    screen = io.StringIO()
    term.child.logfile_read = screen
    term.expect("Trust this project's files as they are now? [y/N]")
    term.child.send("n\r")
    term.enter("/cfg")
    term.expect("alias.fast=")
    assert term.quit() == 0
    shown = screen.getvalue()
    assert r"ignored: .bantam.cfg:5 sandbox_writable=/tmp\x1b[1A\x1b[2K" in shown, shown
    assert r"model=m\x1b]0;evil\x07" in shown and r"alias.fast=x\x1b[2J" in shown, shown
    for raw in RAW:
        assert raw not in shown, (raw, shown)
