"""What a mistyped command line gets: one line, the exit status the contract gives (2 for bad
usage), and the option that was meant when one is close; asking for what is not there is no
failure. Real bantam processes, each with its own HOME."""
from __future__ import annotations

import pytest

from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import text_reply


@pytest.mark.parametrize("args", [("--thread", "bad/../id", "-p", "x"), ("--thread", "../../etc/passwd"),
                                  ("undo", "--thread", "a/b")])
def test_a_thread_name_no_file_can_have_is_bad_usage(home, server, args):
    write_cfg(home, **base_cfg(server))
    server.add(text_reply("never"))
    r = run_bantam(*args, cwd=home)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("bantam: --thread ") and "letters, digits" in lines[0]
    assert not server.requests


@pytest.mark.parametrize("args,meant", [(("--modle", "m", "-p", "x"), "--model"),
                                        (("-p", "x", "--jsno"), "--json"),
                                        (("--endpiont=http://x/v1", "-p", "x"), "--endpoint"),
                                        (("batch", "t.jsonl", "-o", "r.jsonl", "--wokers", "2"), "--workers"),
                                        (("undo", "--lst"), "--list"),
                                        (("run", "a goal", "--worksapce", "w"), "--workspace"),
                                        (("mcp", "list", "--modle", "m"), "--model"),
                                        (("web", "--prot", "1"), "--port"),
                                        (("worker", "redis://127.0.0.1:9/0", "--concurency", "2"), "--concurrency")])
def test_a_mistyped_option_names_the_one_meant(home, args, meant):
    r = run_bantam(*args, cwd=home)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert f"(did you mean {meant}?)" in lines[0] and "unrecognized arguments" in lines[0]


def test_an_option_nothing_is_close_to_gets_no_guess(home):
    r = run_bantam("--zzzzzz", cwd=home)
    assert r.returncode == 2 and "did you mean" not in r.stderr and "unrecognized arguments" in r.stderr


@pytest.mark.parametrize("args", [("undo",), ("undo", "--thread", "T"), ("undo", "--yes")])
def test_undo_with_nothing_to_undo_says_so_and_succeeds(home, args):
    r = run_bantam(*args, cwd=home)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert r.stderr.startswith("bantam undo: nothing to undo in ") and "no recorded turn changed files" in r.stderr
