"""bantam beside the agents people use instead: simonw's `llm`, `mini-swe-agent`, OpenAI's Codex CLI and pi.

    .venv/bin/python bench/bench_peers.py --write    # from the repository root; --runs N
    npm install --prefix bench/node @openai/codex@0.169.0 @mariozechner/pi-coding-agent@0.73.1  # once

The Python peers are installed from PyPI into bench/.peers/<name>/ on first use; the npm peers are
used when that command has put them in bench/node/ (git-ignored), and left out otherwise. Every
program talks to the same scripted local server (OpenAI chat completions, streamed or not, as each
client asks; Codex only speaks the Responses API, so the server answers `/responses` in that
format), and runs of the compared programs are interleaved (A B C A B C ...), medians of --runs
(at least 5). Codex is run as its native binary (what the npm `codex` script starts, after node).
1. cold start: `--version` (mini has none: `--help`), and process start to the first byte of the
   first model request;
2. harness overhead per loop step: a 100-step tool-calling conversation against the instant server,
   wall time minus the tools' own time (100 x `bash -c true`), divided by the steps;
3. streaming latency at 200 tokens/s: each chunk carries the monotonic time it left the server; the
   delay is measured when its text is read from the program's pseudo-terminal (mini does not stream);
4. peak memory (RSS) of a one-shot run, and of bantam continuing a 1,000-message thread.
"""
from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import BANTAM, FLOOR_PEER, PY, machine, ms, write_results  # noqa: E402
from tests.fakes.openai_server import (FakeServer, Response, chunk, completion, json_reply, sse,  # noqa: E402
                                       usage)

PEERS = ROOT / "bench" / ".peers"
NODE = ROOT / "bench" / "node" / "node_modules"
CODEX = NODE / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl" / "bin" / "codex"
PI = NODE / ".bin" / "pi"
BEGIN, END = "<!-- bench_peers:begin -->", "<!-- bench_peers:end -->"
MINI_DONE = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # the only way mini-swe-agent stops
LLM_TOOLS = '''import subprocess
def bash(command: str) -> str:
    "Run a shell command and return its output and exit code."
    p = subprocess.run(["bash", "-c", command], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    return p.stdout + p.stderr + f"\\n\\nexit: {p.returncode}"
'''


class ScriptServer(FakeServer):
    """Plays `steps` tool calls (to whatever tool the client offers), then a finish; records when
    each request arrives. `stream_text` makes the final answer a timed stream instead."""

    def __init__(self, steps: int, stream_text: int = 0):
        super().__init__()
        self.steps, self.stream_text, self.count = steps, stream_text, 0
        self.arrivals: list[float] = []

    def next_response(self, body=None):
        self.arrivals.append(time.monotonic())
        self.count += 1
        if "input" in body and "messages" not in body:
            return self.responses_api(body)
        names = [t["function"]["name"] for t in body.get("tools") or []]
        name = next((n for n in ("bash", "shell_exec") if n in names), names[0] if names else "bash")
        if self.count <= self.steps:
            return self.call(body, name, f"true {self.count}")
        if name == "bash" and "COMPLETE_TASK" in json.dumps(body["messages"][:2]):  # mini-swe-agent
            return self.call(body, name, MINI_DONE)
        if self.stream_text:
            return Response(headers={"Content-Type": "text/event-stream"}, chunks=stamped(self.stream_text))
        text = "done"
        if body.get("stream"):
            return sse([chunk(text), chunk(finish="stop"), chunk(usage=usage(), no_choices=True)])
        return json_reply(completion(text))

    def call(self, body, name, command):
        call = {"id": f"call_{self.count}", "type": "function",
                "function": {"name": name, "arguments": json.dumps({"command": command})}}
        if body.get("stream"):
            return sse([chunk(tool_calls=[{"index": 0, **call}]), chunk(finish="tool_calls"),
                        chunk(usage=usage(), no_choices=True)])
        return json_reply(completion(tool_calls=[call]))


    def responses_api(self, body):
        """The same script in OpenAI's Responses API (Codex CLI speaks nothing else): its
        `exec_command` tool with {"cmd": ...}, run without a login shell like the others'."""
        if self.count <= self.steps:
            item = {"type": "function_call", "name": "exec_command", "call_id": f"call_{self.count}",
                    "arguments": json.dumps({"cmd": f"true {self.count}", "login": False})}
            return Response(headers={"Content-Type": "text/event-stream"}, chunks=responses_events([item]))
        if self.stream_text:
            return Response(headers={"Content-Type": "text/event-stream"}, chunks=stamped_responses(self.stream_text))
        message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        return Response(headers={"Content-Type": "text/event-stream"}, chunks=responses_events([message]))


def responses_event(kind: str, **data) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def responses_events(items: list[dict]) -> list[bytes]:
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    return [responses_event("response.created", response={"id": "resp_1"}),
            *[responses_event("response.output_item.done", output_index=i, item=item) for i, item in enumerate(items)],
            responses_event("response.completed", response={"id": "resp_1", "usage": usage})]


def stamped_responses(tokens: int, rate: float = 200.0):
    """`stamped` as Responses API text deltas, then the whole message and the end."""
    yield responses_event("response.created", response={"id": "resp_1"})
    yield responses_event("response.output_item.added", output_index=0,
                          item={"type": "message", "role": "assistant", "id": "msg_1", "content": []})
    text = []
    for _ in range(tokens):
        time.sleep(1 / rate)
        piece = f" T{time.monotonic_ns()}T"
        text.append(piece)
        yield responses_event("response.output_text.delta", item_id="msg_1", output_index=0, content_index=0,
                              delta=piece)
    message = {"type": "message", "role": "assistant", "id": "msg_1",
               "content": [{"type": "output_text", "text": "".join(text)}]}
    yield from responses_events([message])[1:]


def stamped(tokens: int, rate: float = 200.0):
    """SSE chunks at `rate` per second, each text stamped with the monotonic ns it was sent."""
    for _ in range(tokens):
        time.sleep(1 / rate)
        yield f"data: {json.dumps(chunk(f' T{time.monotonic_ns()}T'))}\n\n".encode()
    yield f"data: {json.dumps(chunk(finish='stop'))}\n\ndata: [DONE]\n\n".encode()


# --- the programs ----------------------------------------------------------------------------

def ensure_peers() -> None:
    for name, package in (("llm", "llm"), ("mini", "mini-swe-agent")):
        if not (PEERS / name / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(PEERS / name)], check=True)
        if subprocess.run([str(PEERS / name / "bin" / "python"), "-c", f"import {'llm' if name == 'llm' else 'minisweagent'}"],
                          capture_output=True).returncode:
            subprocess.run([str(PEERS / name / "bin" / "pip"), "install", "-q", package], check=True)


def clean_env(work: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "BANTAM_", "AGENT_", "OPENAI_",
                                                                       "CODEX_", "PI_"))}
    return {**env, "HOME": work, "OPENAI_API_KEY": "sk-bench", "MSWEA_CONFIGURED": "true", "NO_COLOR": "1",
            "LLM_USER_PATH": str(Path(work, "llm")), "MSWEA_SILENT_STARTUP": "1", "TERM": "xterm",
            "CODEX_HOME": str(Path(work, ".codex")), "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}


def command(program: str, url: str, work: str) -> list[str]:
    if program == "floor":  # the same requests and commands with no harness at all
        Path(work, "floor.py").write_text(FLOOR_PEER)
        return [PY, str(Path(work, "floor.py")), url]
    if program == "bantam":
        # all on the command line, as Codex's are (a project file may only narrow the boundary's
        # settings until the user trusts the folder, nor send the user's key to its endpoint):
        # --yolo, no sandbox and no approvals, since the peers run their commands bare too (Codex
        # with its bypass flag), one tool, and budgets no run here reaches
        return [BANTAM, "--endpoint", url, "--model", "test-model", "--yolo", "--set", "tools=shell_exec",
                "--set", "max_al_iterations=1000", "--set", "tool_budget=1000", "-p", "go"]
    if program == "codex":
        Path(work, ".codex").mkdir(exist_ok=True)
        provider = f'{{name="bench",base_url="{url}",wire_api="responses"}}'
        return [str(CODEX), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                "-c", "model_provider=bench", "-c", f"model_providers.bench={provider}", "-m", "test-model", "go"]
    if program == "pi":
        Path(work, ".pi", "agent").mkdir(parents=True, exist_ok=True)
        Path(work, ".pi", "agent", "models.json").write_text(json.dumps({"providers": {"bench": {
            "baseUrl": url, "api": "openai-completions", "apiKey": "sk-bench",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "test-model"}]}}}))
        return [str(PI), "-p", "--no-session", "--model", "bench/test-model", "go"]
    if program == "llm":
        Path(work, "llm").mkdir(exist_ok=True)
        Path(work, "llm", "extra-openai-models.yaml").write_text(
            f'- model_id: bench\n  model_name: test-model\n  api_base: "{url}"\n  supports_tools: true\n')
        Path(work, "tools.py").write_text(LLM_TOOLS)
        return [str(PEERS / "llm" / "bin" / "llm"), "-m", "bench", "--functions", "tools.py", "--chain-limit", "0", "go"]
    return [str(PEERS / "mini" / "bin" / "mini"), "-m", "openai/test-model", "-t", "go", "-y", "--exit-immediately",
            "-c", "mini.yaml", "-c", f"model.model_kwargs.api_base={url}", "-c", "agent.cost_limit=0",
            "-c", "model.cost_tracking=ignore_errors", "-o", str(Path(work, "traj.json"))]


PROGRAMS = ("bantam", "llm", "mini", *(["codex"] if CODEX.exists() else []), *(["pi"] if PI.exists() else []))
STREAMING = tuple(p for p in PROGRAMS if p != "mini")
VERSION = {"bantam": [BANTAM, "--version"], "llm": [str(PEERS / "llm" / "bin" / "llm"), "--version"],
           "mini": [str(PEERS / "mini" / "bin" / "mini"), "--help"], "codex": [str(CODEX), "--version"],
           "pi": [str(PI), "--version"]}


def run(program: str, steps: int, stream_text: int = 0, on_pty: bool = False) -> dict:
    """One run against a fresh server: wall seconds, first-request delay, peak RSS, stamp delays."""
    with ScriptServer(steps, stream_text) as server, tempfile.TemporaryDirectory() as work:
        cmd = command(program, server.url, work)
        delays, rss, t0 = execute(cmd, work, on_pty)
        wall = time.monotonic() - t0
        return {"wall": wall, "first": server.arrivals[0] - t0 if server.arrivals else float("nan"),
                "rss": rss, "delays": delays, "requests": len(server.arrivals)}


# The peak RSS a child reports counts what it held before exec: a fork of this benchmark (75 MB
# after the loops), the same for every program. A small launcher in between forks the program from
# a fresh interpreter instead, and reports the program's own peak.
# It notes the monotonic time of the exec, from which the program's times are taken.
LAUNCHER = ("import os, sys, time\npid = os.fork()\nif pid == 0:\n"
            "    open(sys.argv[1] + '.t0', 'w').write(repr(time.monotonic()))\n    os.execvp(sys.argv[2], sys.argv[2:])\n"
            "_, status, usage = os.wait4(pid, 0)\nopen(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
            "sys.exit(os.waitstatus_to_exitcode(status))\n")


def execute(cmd: list[str], work: str, on_pty: bool = False) -> tuple[list[float], float, float]:
    """Run to the end: (stamp delays in s, when on a pty; peak RSS in MB; monotonic time of the
    program's exec). A failure stops the bench."""
    peak = Path(work, "peak_rss")
    cmd = [PY, "-S", "-c", LAUNCHER, str(peak), *cmd]
    log = open(Path(work, "output.log"), "wb")
    if on_pty:
        leader, follower = pty.openpty()
        p = subprocess.Popen(cmd, cwd=work, env=clean_env(work), stdin=follower, stdout=follower,
                             stderr=log, start_new_session=True)
        os.close(follower)
        delays = read_stamps(leader)
    else:
        p = subprocess.Popen(cmd, cwd=work, env=clean_env(work), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        delays = []
    _, status, _ = os.wait4(p.pid, 0)
    log.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {' '.join(cmd[5:8])} failed:\n{Path(work, 'output.log').read_text()[-2000:]}")
    return delays, int(peak.read_text()) / 1024, float(Path(f"{peak}.t0").read_text())


def read_stamps(leader: int) -> list[float]:
    delays, seen, tail = [], set(), b""
    while select.select([leader], [], [], 60)[0]:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the program closed the terminal
            break
        if not data:
            break
        now = time.monotonic_ns()
        tail += data
        for stamp in re.findall(rb"T(\d{12,})T", tail):
            if stamp not in seen:
                seen.add(stamp)
                delays.append((now - int(stamp)) / 1e9)
        tail = tail[-40:]
    os.close(leader)
    return delays


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=clean_env(tempfile.gettempdir()))
    return time.perf_counter() - t0


def interleave(n: int, cases: dict) -> dict[str, list]:
    """Each case once untimed, then n rounds of all cases in turn."""
    for fn in cases.values():
        fn()
    out: dict[str, list] = {k: [] for k in cases}
    for _ in range(n):
        for k, fn in cases.items():
            out[k].append(fn())
    return out


def table(title: str, unit: str, values: dict[str, list[float]], scale: float = 1000.0, note: str = "") -> str:
    med = {k: statistics.median(v) for k, v in values.items()}
    ours = med.get("bantam")
    rows = [f"| {k} | {min(v) * scale:.1f} | {med[k] * scale:.1f} | {max(v) * scale:.1f} | "
            f"{'—' if k == 'bantam' or not ours else f'{med[k] / ours:.1f}x'} |" for k, v in values.items()]
    return "\n".join([f"### {title}", "", f"| program | min {unit} | median {unit} | max {unit} | peer / bantam |",
                      "|---|---:|---:|---:|---:|", *rows] + (["", note] if note else []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    ensure_peers()
    n = max(args.runs, 5)
    sections = []
    floor = interleave(n, {"`python -c pass` (floor)": lambda: timed([PY, "-c", "pass"])})
    versions = interleave(n, {p: (lambda p=p: timed(VERSION[p])) for p in PROGRAMS})
    noise = floor["`python -c pass` (floor)"]
    sections.append(table("1a. Cold start: `--version`", "ms", {**versions, **floor},
                          note=f"Machine noise: the floor's runs spread {ms(min(noise))}-{ms(max(noise))} ms."))
    first = interleave(n, {p: (lambda p=p: run(p, 1)["first"]) for p in PROGRAMS})
    sections.append(table("1b. Process start to the first model request", "ms", first))
    tool_time = statistics.median(timed(["bash", "-c", "true"]) for _ in range(20)) * args.steps
    loops = interleave(n, {p: (lambda p=p: run(p, args.steps)) for p in (*PROGRAMS, "floor")})
    per_step = {p: [(r["wall"] - tool_time) / args.steps for r in rs] for p, rs in loops.items()}
    floor_step = statistics.median(per_step.pop("floor"))
    sections.append(table(f"2. Harness overhead per loop step ({args.steps} tool steps, tools' own "
                          f"{ms(tool_time)} ms taken out)", "ms", per_step,
                          note=f"This still holds the server's own time and the HTTP exchange: a bare script doing "
                               f"the same requests and commands with httpx and subprocess (bench_core's floor) takes "
                               f"{ms(floor_step)} ms a step by the same measure. Over that floor: "
                               + ", ".join(f"{p} {ms(statistics.median(v) - floor_step)} ms" for p, v in per_step.items())
                               + "."))
    streams = interleave(n, {p: (lambda p=p: stream_delay(p)) for p in STREAMING})
    sections.append(table("3. Streaming latency at 200 tokens/s (server send to text on the terminal)", "ms", streams,
                          note="mini-swe-agent does not stream (whole responses through litellm). A delay near half the "
                               "stream's length (200 tokens: 1 s) means the text is shown only once the answer is whole."))
    rss = interleave(n, {p: (lambda p=p: run(p, 0)["rss"]) for p in PROGRAMS})
    sections.append(table("4a. Peak memory of a one-shot run", "MB", rss, scale=1.0))
    sections.append(thread_rss(n))
    npm = [f"{p} {npm_version(p)}" for p in PROGRAMS if p in ("codex", "pi")]
    load = os.getloadavg()
    section = "\n\n".join([f"## Peers: bantam, llm {peer_version('llm')}, mini-swe-agent {peer_version('mini')}"
                            + "".join(f", {v}" for v in npm),
                            "Command: `.venv/bin/python bench/bench_peers.py --write` (Codex CLI and pi: "
                            "`npm install --prefix bench/node @openai/codex@0.169.0 "
                            "@mariozechner/pi-coding-agent@0.73.1` first; without them their columns are left out)",
                            f"Machine: {machine()} Load average at the end: {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} "
                            "(1, 5, 15 min; the machine is shared).",
                            *sections])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


def stream_delay(program: str) -> float:
    return statistics.median(run(program, 0, stream_text=200, on_pty=True)["delays"] or [float("nan")])


def thread_rss(n: int) -> str:
    """bantam continuing a 1,000-message thread (peers keep no comparable file-based session)."""
    values = []
    for _ in range(n):
        with ScriptServer(0) as server, tempfile.TemporaryDirectory() as work:
            threads = Path(work, ".bantam", "threads")
            threads.mkdir(parents=True)
            lines = [json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 400})
                     for i in range(1000)]
            Path(threads, "big.jsonl").write_text("\n".join(lines) + "\n")
            Path(work, ".bantam.cfg").write_text(f"endpoint={server.url}\nmodel=test-model\n")
            _, peak, _ = execute([BANTAM, "--thread", "big", "-p", "go"], work)
            values.append(peak)
    return table("4b. Peak memory continuing a 1,000-message thread (bantam only)", "MB", {"bantam": values}, scale=1.0)


def npm_version(name: str) -> str:
    package = NODE / ("@openai/codex" if name == "codex" else "@mariozechner/pi-coding-agent") / "package.json"
    return json.loads(package.read_text()).get("version", "?")


def peer_version(name: str) -> str:
    import importlib.metadata as md
    site = next((PEERS / name / "lib").glob("python*/site-packages"))
    dist = next(md.distributions(path=[str(site)], name="llm" if name == "llm" else "mini-swe-agent"), None)
    return dist.version if dist else "?"


if __name__ == "__main__":
    main()
