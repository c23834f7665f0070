"""`bantam acp` beside other ACP agents: start-up, a new session, and a turn's overhead (issue 30).

    .venv/bin/python bench/bench_acp.py                  # from the repository root; --runs N, --turns N
    npm install --prefix bench/node --no-audit --no-fund \
        @zed-industries/codex-acp@0.16.0 @zed-industries/claude-code-acp@0.16.2      # once, for the peers

Each program is started as an editor starts its agent, and spoken to in raw JSON-RPC lines over its
stdin and stdout (no SDK on this side, so the client costs every program the same), once per run:
- start-up: Popen to the `initialize` answer read;
- `session/new` sent to its answer read (what an editor waits for before the first prompt);
- the first `session/prompt` sent to its answer read, then --turns - 1 more in the same session
  ("later turns"), each against a local fake model server that answers at once with "done": what
  is left is the agent's own cost of a turn, and the HTTP exchange.
Every program gets its own HOME, kept across its runs (a warm-up run first, not counted: the
files an agent writes on its very first start are not what an editor pays each time) and its own
fake server in the API it speaks: bantam OpenAI chat completions, codex-acp the Responses API,
claude-code-acp Anthropic Messages (ANTHROPIC_BASE_URL). The peers are used when the npm command
above has put them in bench/node/ (git-ignored), and left out otherwise: codex-acp as its native
binary (what its npm script starts after node, and what Zed downloads), claude-code-acp as its
node script. Runs are interleaved (A B C A B C ...). Prints markdown rows (median, min, max ms,
the median's ratio to bantam's) and notes (model requests per turn, whether the program ends at
the end of its input); nothing is written, and no timing here is asserted anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import as_installed  # noqa: E402
from bench.bench_peers import responses_events  # noqa: E402
from tests.fakes import anthropic_server  # noqa: E402
from tests.fakes.openai_server import FakeServer, Response, text_reply  # noqa: E402

PY = sys.executable
BANTAM = Path(PY).parent / "bantam"  # the console script an editor is configured with
NODE = ROOT / "bench" / "node" / "node_modules"
CODEX_ACP = NODE / "@zed-industries" / "codex-acp-linux-x64" / "bin" / "codex-acp"
CLAUDE_ACP = NODE / ".bin" / "claude-code-acp"
WAIT = 120.0  # seconds one answer may take before the run is called failed
MEASURES = ("start to the `initialize` answer", "`session/new` to its answer", "first `session/prompt` to its answer",
            "later `session/prompt` to its answer")


class BenchError(Exception):
    pass


# --- the fake model servers: each answers every request at once with "done" ------------------

class ChatServer(FakeServer):
    def next_response(self, body: Any = None) -> Response:
        return text_reply("done")


class ResponsesServer(FakeServer):
    """OpenAI's Responses API (all codex speaks), as bench_peers answers Codex CLI."""

    def next_response(self, body: Any = None) -> Response:
        message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        return Response(headers={"Content-Type": "text/event-stream"}, chunks=responses_events([message]))


class MessagesServer(FakeServer):
    """Anthropic Messages. Claude Code asks `/v1/messages?beta=true`, and the fake server routes
    on the path's end: the query is dropped before it looks."""

    def __init__(self) -> None:
        super().__init__()
        base: Any = self.httpd.RequestHandlerClass

        class WithoutQuery(base):
            path: str

            def do_POST(self) -> None:
                self.path = self.path.split("?", 1)[0]
                super().do_POST()
        self.httpd.RequestHandlerClass = WithoutQuery

    @property
    def base_url(self) -> str:
        return self.url.removesuffix("/v1")

    def next_response(self, body: Any = None) -> Response:
        return anthropic_server.text_reply("done")


# --- the programs --------------------------------------------------------------------------------

@dataclass
class Program:
    name: str
    server: Callable[[], FakeServer]
    command: Callable[[FakeServer, Path], tuple[list[str], dict[str, str]]]  # (argv, extra env)
    version: str = ""
    times: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MEASURES})
    requests: dict[str, set[int]] = field(default_factory=lambda: {"first": set(), "later": set()})  # a turn's
    ends_at_eof: list[bool] = field(default_factory=list)
    failed: str = ""  # why its turns could not be measured
    dead: bool = False  # it could not even start: left out of the runs after


def bantam_command(server: FakeServer, home: Path) -> tuple[list[str], dict[str, str]]:
    return [str(BANTAM), "acp", "--endpoint", server.url, "--model", "test-model",
            "--set", "retry_delays=0,0,0"], {}


def codex_command(server: FakeServer, home: Path) -> tuple[list[str], dict[str, str]]:
    # a provider of our own with the fake server's URL, as bench_peers points Codex CLI at it
    (home / ".codex").mkdir(exist_ok=True)
    provider = f'{{name="bench",base_url="{server.url}",wire_api="responses"}}'
    return [str(CODEX_ACP), "-c", "model_provider=bench", "-c", f"model_providers.bench={provider}",
            "-c", 'model="test-model"'], {"CODEX_HOME": str(home / ".codex"), "OPENAI_API_KEY": "sk-bench"}


def claude_command(server: FakeServer, home: Path) -> tuple[list[str], dict[str, str]]:
    assert isinstance(server, MessagesServer)
    env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-bench",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # no telemetry or update checks off the machine
    if os.geteuid() == 0:  # Claude Code refuses to skip its permission prompts as root unless told it is sandboxed
        env["IS_SANDBOX"] = "1"
    return [str(CLAUDE_ACP)], env


def npm_version(package: str) -> str:
    try:
        return json.loads((NODE / package / "package.json").read_text()).get("version", "?")
    except OSError:
        return "?"


def programs(wanted: list[str]) -> tuple[list[Program], list[str]]:
    """The programs to run, and a line for each peer left out."""
    found = [Program("bantam", ChatServer, bantam_command)]
    missing = []
    peers = {"codex-acp": (CODEX_ACP, ResponsesServer, codex_command, "@zed-industries/codex-acp"),
             "claude-code-acp": (CLAUDE_ACP, MessagesServer, claude_command, "@zed-industries/claude-code-acp")}
    for name in wanted:
        if name not in peers:
            sys.exit(f"bench: unknown peer {name!r} (peers: {', '.join(peers)})")
        path, server, command, package = peers[name]
        if path.exists():
            found.append(Program(name, server, command, npm_version(package)))
        else:
            missing.append(f"{name}: not installed ({path.relative_to(ROOT)} is missing; see the npm command at "
                           "the top of this script)")
    return found, missing


# --- one run ---------------------------------------------------------------------------------

class Agent:
    """A started agent and its stdout read line by line on a thread, so a hung agent is a
    timeout here rather than a hang."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, stderr: Any):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=cwd,
                                     env=env, start_new_session=True)  # its own group: its children go with it
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self.read, daemon=True).start()
        self.next_id = 0

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def ask(self, method: str, params: dict) -> dict:
        """Send a request; its result once the answer is read (notifications before it are read
        and dropped; a request from the agent is answered 'not supported')."""
        self.next_id += 1
        ident = self.next_id
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            try:
                line = self.lines.get(timeout=WAIT)
            except queue.Empty:
                raise BenchError(f"no answer to {method} in {WAIT:.0f} s") from None
            if not line:
                raise BenchError(f"the agent ended before answering {method} (exit {self.proc.wait()})")
            try:
                message = json.loads(line)
            except ValueError:
                raise BenchError(f"not JSON on its stdout: {line[:200]!r}") from None
            if "method" in message and "id" in message:
                self.send({"jsonrpc": "2.0", "id": message["id"],
                           "error": {"code": -32601, "message": "not supported by the bench"}})
            elif message.get("id") == ident and "method" not in message:
                if "error" in message:
                    raise BenchError(f"{method}: {json.dumps(message['error'])[:300]}")
                return message["result"]

    def send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def end(self) -> bool:
        """Close its input as an editor does; whether it ended by itself within 5 s (else killed)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=5)
            ended = True
        except subprocess.TimeoutExpired:
            ended = False
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # what it started, whether or not it ended itself
        except ProcessLookupError:
            pass
        self.proc.wait()
        return ended


def one_run(program: Program, server: FakeServer, home: Path, turns: int, record: bool) -> None:
    work = home / "work"
    argv, extra = program.command(server, home)
    env = {k: v for k, v in as_installed(dict(os.environ)).items()
           if not k.startswith(("LLM_", "BANTAM_", "AGENT_", "OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE_"))}
    env.update({"HOME": str(home), "NO_COLOR": "1", **extra})
    with open(home / "stderr.log", "wb") as stderr:
        t0 = time.perf_counter()
        agent = Agent(argv, env, work, stderr)
        try:
            init = agent.ask("initialize", {"protocolVersion": 1, "clientInfo": {"name": "bench", "version": "0"},
                                            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                                                                   "terminal": False}})
            started = time.perf_counter() - t0
            if init.get("protocolVersion") != 1:
                raise BenchError(f"initialize answered protocol version {init.get('protocolVersion')!r}")
            found = {"start to the `initialize` answer": [started]}
            try:
                t = time.perf_counter()
                session = agent.ask("session/new", {"cwd": str(work), "mcpServers": []})["sessionId"]
                found["`session/new` to its answer"] = [time.perf_counter() - t]
                for turn in range(0 if program.failed else turns):  # a peer whose turn failed once is not asked again
                    before = posts(server)
                    t = time.perf_counter()
                    done = agent.ask("session/prompt", {"sessionId": session,
                                                        "prompt": [{"type": "text", "text": "hi"}]})
                    took = time.perf_counter() - t
                    if done.get("stopReason") != "end_turn":
                        raise BenchError(f"the turn ended {done.get('stopReason')!r}")
                    which = "first `session/prompt` to its answer" if turn == 0 else "later `session/prompt` to its answer"
                    found.setdefault(which, []).append(took)
                    if record:
                        program.requests["first" if turn == 0 else "later"].add(posts(server) - before)
            except BenchError as e:
                if program.name == "bantam":
                    raise
                program.failed = program.failed or f"{str(e)[:200]}; its stderr: {tail(home / 'stderr.log')}"
            if record:
                for name, values in found.items():
                    program.times[name].extend(values)
        finally:
            ended = agent.end()
            if record:
                program.ends_at_eof.append(ended)


def posts(server: FakeServer) -> int:
    """Model requests so far (a GET of the model list is not one)."""
    return sum(r.method == "POST" for r in server.requests)


def tail(path: Path) -> str:
    text = path.read_text(errors="replace").strip().splitlines()
    return " / ".join(text[-3:])[-300:].replace("|", "/") or "(empty)"  # "|" would split a table's cell


def measure(chosen: list[Program], runs: int, turns: int) -> None:
    # the peers' HOMEs are kept out of /tmp when bench/node exists: codex will not make its helper
    # links under a temporary folder, and an editor's agent does not live in one
    place = NODE.parent if NODE.parent.is_dir() else None
    with tempfile.TemporaryDirectory(prefix="bench_acp-", dir=place) as tmp:
        servers = {p.name: p.server() for p in chosen}
        for server in servers.values():
            server.__enter__()
        try:
            homes = {p.name: Path(tmp, p.name) for p in chosen}
            for home in homes.values():
                (home / "work").mkdir(parents=True)
            for run in range(runs + 1):  # run 0: the warm-up
                for p in chosen:
                    if p.dead:
                        continue
                    try:
                        one_run(p, servers[p.name], homes[p.name], turns, record=run > 0)
                    except BenchError as e:
                        why = f"{e}; its stderr: {tail(homes[p.name] / 'stderr.log')}"
                        if p.name == "bantam":
                            sys.exit(f"bench: bantam: {why}")
                        p.dead, p.failed = True, p.failed or why
        finally:
            for server in servers.values():
                server.__exit__(None, None, None)


# --- the report ------------------------------------------------------------------------------

def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs of each program (default 10), after one warm-up")
    ap.add_argument("--turns", type=int, default=5, help="prompts in each run's session (default 5; at least 2)")
    ap.add_argument("--peers", default="codex-acp,claude-code-acp",
                    help="the peers to run beside bantam, when installed (comma-separated; '' for none)")
    args = ap.parse_args()
    if args.runs < 1 or args.turns < 2:
        sys.exit("bench: --runs must be at least 1 and --turns at least 2")
    if not BANTAM.exists():
        sys.exit(f"bench: {BANTAM} is missing: pip install -e . in this virtual environment")
    chosen, missing = programs([p for p in args.peers.split(",") if p])
    print(f"load average at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    measure(chosen, args.runs, args.turns)
    load = os.getloadavg()
    names = {p.name: p.name + (f" {p.version}" if p.version else "") for p in chosen}
    print(f"| measure ({args.runs} runs, {args.turns - 1} later turns a run) | program | median ms | min ms | "
          "max ms | median / bantam |")
    print("|---|---|---:|---:|---:|---:|")
    bantam = chosen[0]
    for m in MEASURES:
        base = statistics.median(bantam.times[m])
        for p in chosen:
            values = p.times[m]
            if not values:
                print(f"| {m} | {names[p.name]} | n/a ({(p.failed or 'not measured').replace('|', '/')}) | | | |")
                continue
            median = statistics.median(values)
            print(f"| {m} | {names[p.name]} | {ms(median)} | {ms(min(values))} | {ms(max(values))} | "
                  f"{median / base:.2f}x |")
    print()
    for p in chosen:
        counts = {k: "/".join(map(str, sorted(v))) or "n/a" for k, v in p.requests.items()}
        print(f"- {names[p.name]}: model requests in a turn: first {counts['first']}, later {counts['later']}; "
              f"ended by itself within 5 s of its input closing in {sum(p.ends_at_eof)} of {len(p.ends_at_eof)} runs")
    for line in missing:
        print(f"- {line}")
    print(f"\nload average at the end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (1, 5, 15 min); "
          f"nproc {len(os.sched_getaffinity(0))}; `bantam acp` is {BANTAM}", file=sys.stderr)


if __name__ == "__main__":
    main()
