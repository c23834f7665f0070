"""Prompt-cache friendliness: is every request an unchanged prefix of the last one, plus new text?

    .venv/bin/python bench/bench_prefix.py --write    # from the repository root; --steps N

Providers cache the longest unchanged prefix of a request (OpenAI and DeepSeek automatically,
llama.cpp and vLLM by prefix, Anthropic up to its `cache_control` breakpoints). For a scripted
session of about --steps (50) requests in each mode, the fake server (tests/fakes) keeps every
request body exactly as bantam sent it (bytes, key order and all). For each request:

- its conversation is named by its first non-system message (the task); the first request of a
  conversation has nothing to extend and is not counted;
- `prefix share` = the longest common byte prefix with the previous request of the same
  conversation, divided by this request's length: what a prefix cache can serve of it;
- `rewritten` = the bytes of the previous request, up to the `]` closing its messages, that this
  one does not repeat (`Recorded.open_prefix`, as tests/test_prefix.py pins): 0 unless history was
  rewritten (for the daemon, its trailing LIFE.md message, rebuilt every step, is left out);
- steps that compact or stash (the summary request, and the first request after the history was
  replaced, which carries a new "[compacted conversation]" or "[stash ...]") are counted apart.

The Anthropic table plays a session against a simulation of Anthropic's cache: a request reads
the longest prefix, ending at one of its breakpoints or up to 20 blocks before one, that an
earlier request wrote at a breakpoint; it writes a cache entry at each of its breakpoints.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import BANTAM, PY, machine, write_results  # noqa: E402
from tests.fakes import anthropic_server as anth  # noqa: E402
from tests.fakes.openai_server import (FakeServer, Recorded, chunk, sse, text_reply, tool_reply,  # noqa: E402
                                       usage)

BEGIN, END = "<!-- bench_prefix:begin -->", "<!-- bench_prefix:end -->"
LLAMA_BEGIN, LLAMA_END = "<!-- bench_prefix_llama:begin -->", "<!-- bench_prefix_llama:end -->"
PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
INSTRUCTIONS = ("You are now acting as a compaction engine.",            # compact.COMPACT_PROMPT
                "Summarize this conversation in one line",               # compact.SUMMARY_PROMPT
                "The messages below are being moved out of an agent's")  # daemon stash summary
MARKERS = ("[compacted conversation]", "[stash ")
ACT = re.compile(r"Reply with the tool call, for example (\{.*\})\.\s*$", re.S)


# --- what a request says -----------------------------------------------------------------------

def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(text_of(b.get("text") or b.get("content") or "") for b in content if isinstance(b, dict))
    return ""


def chat(body: dict) -> list[dict]:
    """The non-system messages of an OpenAI or Anthropic body."""
    return [m for m in body.get("messages") or [] if m.get("role") != "system"]


def conversation_key(body: dict) -> str:
    first = chat(body)[:1]
    return hashlib.sha1(text_of(first[0].get("content")).encode()).hexdigest() if first else ""


def is_instruction(body: dict) -> bool:
    """A side request: the summary of a compaction or a stash, or a session's one-line name."""
    last = chat(body)[-1:] or [{}]
    system = text_of((body.get("messages") or [{}])[0].get("content")) + text_of(body.get("system"))
    return any(text_of(last[0].get("content")).startswith(i) or system.startswith(i) for i in INSTRUCTIONS)


def markers(body: dict) -> tuple[int, ...]:
    """How many compaction summaries and stashes the history holds (the daemon's LIFE.md tail,
    which may mention a stash, aside)."""
    text = "".join(text_of(m.get("content")) for m in chat(body) if not _life_tail(m))
    return tuple(text.count(m) for m in MARKERS)


def lcp(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix (binary search on slice equality: C speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class Step:
    kind: str          # "start", "step" or "apart" (a compaction or stash step)
    share: float = 1.0
    rewritten: int = 0  # bytes of the previous request's messages (and all before) not repeated
    size: int = 0
    tail: bool = False  # the previous request ended in the daemon's LIFE.md tail, not counted as rewritten


def analyse(requests: list[Recorded], key_of: Callable[[dict], str] = conversation_key) -> list[Step]:
    """Each request beside the previous request of its conversation."""
    last: dict[str, Recorded] = {}
    newest: Recorded | None = None  # the latest request that continued a conversation
    steps = []
    for r in requests:
        if not isinstance(r.body, dict):
            continue
        key, raw = key_of(r.body), r.raw
        previous = last.get(key)
        if is_instruction(r.body):
            steps.append(Step("apart", lcp(previous.raw, raw) / len(raw) if previous else 0.0, size=len(raw)))
            continue  # a side request does not continue its conversation
        before, newest, last[key] = newest, r, r
        if previous is None:
            share = lcp(before.raw, raw) / len(raw) if before else 0.0  # after a compaction: vs the last request
            steps.append(Step("apart", share, size=len(raw)) if any(markers(r.body)) else Step("start", size=len(raw)))
            continue
        common = lcp(previous.raw, raw)
        kind = "apart" if markers(r.body) != markers(previous.body) else "step"
        base, tail = previous.open_prefix(), False
        if _life_tail(previous.body["messages"][-1]):  # the daemon's, rebuilt every step by design
            base, tail = base[:base.rindex(b',{"role":"user","content":"<system-message>[now ')], True
        steps.append(Step(kind, common / len(raw), len(base) - min(common, len(base)), len(raw), tail))
    return steps


# --- the scripted model ------------------------------------------------------------------------

class Scripted(FakeServer):
    """Answers by the request it gets: `plan(body, done)` says what the model does after `done`
    tool calls in the current turn: ("call", name, arguments) or ("text", text)."""

    def __init__(self, plan: Callable[[dict, int], tuple], anthropic: bool = False):
        super().__init__()
        self.plan, self.anthropic = plan, anthropic
        self.calls = 0

    def next_response(self, body: Any = None) -> Any:
        if is_instruction(body):
            return self.reply(("text", "Summary: the work so far, in short."))
        messages = chat(body)
        done = 0  # tool calls since the turn's last plain user message
        for m in reversed(messages):
            if m.get("role") == "assistant":
                done += len(m.get("tool_calls") or []) + sum(
                    1 for b in m.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_use")
            elif m.get("role") == "user" and not _tool_results(m) and not _life_tail(m):
                break
        return self.reply(self.plan(body, done))

    def reply(self, action: tuple) -> Any:
        with self.lock:
            self.calls += 1
            n = self.calls
        if action[0] == "text":
            return anth.text_reply(action[1]) if self.anthropic else text_reply(action[1])
        calls = action[1] if action[0] == "calls" else [action[1:]]
        if self.anthropic:
            events = [anth.message_start()]
            for i, (name, args) in enumerate(calls):
                events += anth.tool_block(i, name, args, f"toolu_{n}_{i}")
            return anth.stream(events + anth.finish("tool_use"))
        if len(calls) == 1:
            return tool_reply(calls[0][0], calls[0][1], call_id=f"call_{n}")
        return sse([chunk(tool_calls=[{"index": i, "id": f"call_{n}_{i}", "type": "function",
                                       "function": {"name": name, "arguments": json.dumps(args)}}])
                    for i, (name, args) in enumerate(calls)]
                   + [chunk(finish="tool_calls"), chunk(usage=usage(), no_choices=True)])


def _life_tail(m: dict) -> bool:
    """The daemon's trailing "[now ...] The end of agent/LIFE.md" message, rebuilt every step."""
    return "] The end of " in text_of(m.get("content"))[:200]


def _tool_results(m: dict) -> bool:
    content = m.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def shell_steps(per_turn: int, tool: str = "shell_exec") -> Callable[[dict, int], tuple]:
    def plan(body: dict, done: int) -> tuple:
        if done < per_turn:
            return ("call", tool, {"command": f"echo step {done + 1} of {per_turn}"})
        return ("text", f"Done after {per_turn} steps.\nSTATUS: success")
    return plan


# --- the modes ---------------------------------------------------------------------------------

def clean_env(work: str) -> dict[str, str]:
    """HOME is the folder, and no configuration of the person running the bench applies (with no
    XDG_CONFIG_HOME, the user's file is the one under that HOME)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "BANTAM_", "AGENT_", "OPENAI_",
                                                                       "ANTHROPIC_")) and k != "XDG_CONFIG_HOME"}
    return {**env, "HOME": work, "NO_COLOR": "1", "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}


def config(work: str, url: str, **extra: Any) -> None:
    """The folder's .bantam.cfg names the server; the settings that draw bantam's boundary (the
    sandbox off, the tools, the budgets: config.BOUNDARY_KEYS) go in the user's own file under
    HOME, as a user sets them: a project file may only narrow those until the user trusts it."""
    from bantam.config import ALIASES, BOUNDARY_KEYS
    values = {"endpoint": url, "model": "test-model", "sandbox": "off", "retry_delays": "0,0,0",
              "tool_budget": 1000, "max_al_iterations": 1000, **extra}
    user = {k: v for k, v in values.items() if ALIASES.get(k, k) in BOUNDARY_KEYS}
    user_file = Path(work, ".config", "bantam", "config")
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text("".join(f"{k}={v}\n" for k, v in user.items()))
    Path(work, ".bantam.cfg").write_text("".join(f"{k}={v}\n" for k, v in values.items() if k not in user))


def bantam(work: str, *args: str) -> None:
    p = subprocess.run([BANTAM, *args], cwd=work, env=clean_env(work), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=300)
    if p.returncode:
        sys.exit(f"bench: bantam {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-2000:]}")


def oneshot(steps: int, anthropic: bool = False, task: str = "Run the checks one by one.") -> list[Recorded]:
    """`bantam -p` with tools: steps-1 tool calls, then the answer."""
    with Scripted(shell_steps(steps - 1), anthropic) as server, tempfile.TemporaryDirectory() as work:
        config(work, server.url, tools="shell_exec,write_file",
               **({"provider": "anthropic", "stream": "true"} if anthropic else {}))
        bantam(work, "-p", task)
        return server.requests


def thread(steps: int) -> list[Recorded]:
    """Five `bantam --thread t -p ...` runs continuing one thread, each a turn of steps/5 requests."""
    turns = 5
    with Scripted(shell_steps(steps // turns - 1)) as server, tempfile.TemporaryDirectory() as work:
        config(work, server.url, tools="shell_exec,write_file")
        for i in range(turns):
            bantam(work, "--thread", "t", "-p", f"Part {i + 1}: run the checks.")
        return server.requests


def subagents(steps: int) -> list[Recorded]:
    """A parent that delegates two subtasks (one after the other) to children with their own steps."""
    child_steps = steps // 4

    def plan(body: dict, done: int) -> tuple:
        system = text_of(body["messages"][0].get("content"))
        if "this is a child agent" in system:
            return shell_steps(child_steps - 1)(body, done)
        parent_calls = steps - 2 * child_steps - 1
        if done in (3, 9):
            return ("call", "spawn_agent", {"task": f"Subtask {done}: run its checks."})
        return shell_steps(parent_calls)(body, done)
    with Scripted(plan) as server, tempfile.TemporaryDirectory() as work:
        config(work, server.url, tools="shell_exec,write_file,spawn_agent")
        bantam(work, "-p", "Run the checks, delegating two subtasks.")
        return server.requests


def terminal(steps: int) -> list[Recorded]:
    """The interactive terminal: five prompts of steps/5 requests each, `/compact` after the third."""
    import pexpect
    turns, ready = 5, "\x1b[?2004h"
    with Scripted(shell_steps(steps // turns - 1)) as server, tempfile.TemporaryDirectory() as work:
        config(work, server.url, tools="shell_exec,write_file")
        child = pexpect.spawn(BANTAM, [], cwd=work, env=clean_env(work), encoding="utf-8",
                              dimensions=(40, 120), timeout=120)
        for i in range(turns):
            child.expect_exact(ready)
            child.send(f"Part {i + 1}: run the checks.\r")
            child.expect_exact(f"Done after {steps // turns - 1} steps.")
            if i == 2:
                child.expect_exact(ready)
                child.send("/compact\r")
                child.expect_exact("compacted")
        child.expect_exact(ready)
        child.send("/quit\r")
        child.expect(pexpect.EOF)
        child.close()
        return [r for r in server.requests if r.method == "POST"]


def daemon(steps: int, anthropic: bool = False) -> list[Recorded]:
    """`bantam daemon`: user messages, a trigger, and a context budget small enough to stash once."""
    per_turn = 4

    def plan(body: dict, done: int) -> tuple:
        return shell_steps(per_turn, "BASH")(body, done)
    with Scripted(plan, anthropic) as server, tempfile.TemporaryDirectory() as work:
        agent = Path(work, "agent")
        agent.mkdir()
        (agent / "config.json").write_text(json.dumps({
            "api_base": server.url, "model": "test-model", "context_tokens": 5500, "heartbeat_s": 0,
            "trigger_tick": 1, **({"provider": "anthropic", "api_key": "sk-ant-bench"} if anthropic else {})}))
        proc = subprocess.Popen([PY, "-m", "bantam", "daemon"], cwd=work, env=clean_env(work),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            turn, trigger_sent = 0, False
            while len(server.requests) < steps:
                wait_idle(server, proc)
                if turn == 4 and not trigger_sent:
                    (agent / "triggers").mkdir(exist_ok=True)
                    (agent / "triggers" / "check.json").write_text(
                        json.dumps({"next": time.time(), "message": "Scheduled check: run it."}))
                    trigger_sent = True
                else:
                    append_line(agent / "messages.jsonl", {"role": "user", "content": f"Message {turn}: run the checks."})
                turn += 1
            wait_idle(server, proc)
        finally:
            proc.terminate()
            proc.wait(30)
        return [r for r in server.requests if r.method == "POST"]


def wait_idle(server: FakeServer, proc: subprocess.Popen, quiet: float = 0.6) -> None:
    """Until no request came for `quiet` seconds (the daemon's turn is over)."""
    deadline = time.monotonic() + 120
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"bench: the daemon exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        if len(server.requests) != seen:
            seen, since = len(server.requests), time.monotonic()
        elif time.monotonic() - since > quiet:
            return
        time.sleep(0.05)
    sys.exit("bench: the daemon never went idle")


def append_line(path: Path, message: dict) -> None:
    import fcntl
    with open(path, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write((json.dumps(message) + "\n").encode())


def controlled(steps: int) -> list[Recorded]:
    """`bantam run`: a plan of reads (at most 20, a plan's limit), each proposed by the model,
    then the answer."""
    reads = min(steps - 2, 20)

    def plan(body: dict, done: int) -> tuple:
        prompt = text_of(chat(body)[-1].get("content"))
        if "Write a short plan" in prompt:
            return ("text", json.dumps({"plan": [{"description": f"Read f{i}.txt", "tool": "read_file",
                                                  "arguments": {"path": f"f{i}.txt"}} for i in range(reads)]}))
        act = ACT.search(prompt)
        if act:
            return ("text", act.group(1))
        return ("text", json.dumps({"final": "All files read."}))
    with Scripted(plan) as server, tempfile.TemporaryDirectory() as work:
        config(work, server.url)
        ws = Path(work, "ws")
        ws.mkdir()
        for i in range(reads):
            (ws / f"f{i}.txt").write_text(f"file {i}\n")
        (Path(work) / "run.toml").write_text(f"[limits]\nmax_iterations = {steps * 2}\nmax_tool_calls = {steps * 2}\n")
        bantam(work, "run", "Read every file.", "--workspace", str(ws), "--config", "run.toml")
        return [r for r in server.requests if r.method == "POST"]


MODES: dict[str, Callable[[int], list[Recorded]]] = {
    "one-shot with tools (`-p`)": oneshot, "terminal, `/compact` after turn 3": terminal,
    "thread (`--thread`, 5 runs)": thread, "sub-agents (2 `spawn_agent`)": subagents,
    "daemon (messages, a trigger, a stash)": daemon, "controlled run (`bantam run`)": controlled}


# --- Anthropic's cache, simulated --------------------------------------------------------------

def blocks(body: dict, policy: str = "sent") -> list[tuple[str, bool]]:
    """The request as Anthropic caches it, tools then system then messages, one entry a block:
    (the block's canonical JSON without cache_control, whether it is a breakpoint). `policy`
    "sent": the breakpoints as bantam sent them; "last block": only the last block of the last
    message (bantam's placement before this benchmark), for comparison."""
    def entry(where: str, block: Any) -> tuple[str, bool]:
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        return where + json.dumps(clean, sort_keys=True), "cache_control" in block and policy == "sent"
    out = [entry("tool", t) for t in body.get("tools") or []]
    system = body.get("system")
    out += [entry("system", b) for b in ([{"type": "text", "text": system}] if isinstance(system, str) else system or [])]
    for i, m in enumerate(body.get("messages") or []):
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        out += [entry(f"{i}{m['role']}", b) for b in content]
    if policy == "last block" and body.get("messages"):
        out[-1] = (out[-1][0], True)
    return out


def simulate(requests: list[Recorded], policy: str = "sent") -> dict:
    """Bytes sent and bytes read from the cache over the requests; the most breakpoints used."""
    written: set[str] = set()
    sent = read = most = 0
    for r in requests:
        if not isinstance(r.body, dict) or not r.path.endswith("/messages"):
            continue
        seq = blocks(r.body, policy)
        digests, sizes, h, total = [], [], hashlib.sha256(), 0
        for text, _ in seq:
            h.update(text.encode())
            digests.append(h.copy().hexdigest())
            total += len(text)
            sizes.append(total)
        points = [i for i, (_, bp) in enumerate(seq) if bp]
        hits = [next((j for j in range(p, max(-1, p - 20), -1) if digests[j] in written), None) for p in points]
        read += max((sizes[j] for j in hits if j is not None), default=0)
        sent += total
        most = max(most, len(points))
        written.update(digests[p] for p in points)
    return {"sent": sent, "read": read, "breakpoints": most}


def parallel(steps: int, fanout: int = 12) -> list[Recorded]:
    """One-shot on Anthropic, each step `fanout` tool calls in one message (2 x fanout blocks)."""
    def plan(body: dict, done: int) -> tuple:
        if done < (steps - 1) * fanout:
            return ("calls", [("shell_exec", {"command": f"echo {done + i}"}) for i in range(fanout)])
        return ("text", "Done.")
    with Scripted(plan, anthropic=True) as server, tempfile.TemporaryDirectory() as work:
        config(work, server.url, tools="shell_exec,write_file", provider="anthropic")
        bantam(work, "-p", "Run the checks, many at a time.")
        return server.requests


ANTHROPIC_SESSIONS: dict[str, Callable[[int], list[Recorded]]] = {
    "one-shot, one call a step": lambda n: oneshot(n, anthropic=True),
    "one-shot, 12 parallel calls a step": parallel,
    "daemon (messages, a trigger, a stash)": lambda n: daemon(n, anthropic=True),
    "two one-shot runs, two tasks (a new session)": lambda n: oneshot(n // 2, anthropic=True) + oneshot(
        n // 2, anthropic=True, task="Another task: run the other checks."),
}


def anthropic_rows(steps: int) -> list[str]:
    rows = []
    for name, fn in ANTHROPIC_SESSIONS.items():
        requests = [r for r in fn(steps) if r.method == "POST"]
        now, before = simulate(requests), simulate(requests, "last block")
        rows.append(f"| {name} | {len(requests)} | {now['breakpoints']} | {pct(now['read'] / now['sent'])} | "
                    f"{pct(before['read'] / before['sent'])} |")
        print(rows[-1], flush=True)
    return rows


# --- a real prefix-caching server ----------------------------------------------------------------

def replay_on_llama(sessions: dict[str, list[Recorded]], n_ctx: int = 16384) -> list[str]:
    """Send each session's recorded requests, in order, to llama-cpp-python's server on the bundled
    model (one slot: it keeps the last prompt's tokens and reuses their longest common prefix).
    Its responses carry no cached-token count, so the count is the server's own log line per
    request, "Llama.generate: N prefix-match hit, remaining M prompt tokens to eval"."""
    import httpx
    from tests.fakes import real_servers
    rows = []
    with tempfile.TemporaryDirectory() as logs:
        server = real_servers.start_llama_server(Path(logs), n_ctx=n_ctx)  # 50-step sessions outgrow 4096
        try:
            for name, requests in sessions.items():
                prompt = cached = 0
                shares, first = [], True
                for r in requests:
                    if not isinstance(r.body, dict) or not r.path.endswith("/chat/completions"):
                        continue
                    body = {**r.body, "model": "smollm2", "stream": False, "max_tokens": 4}
                    body.pop("stream_options", None)
                    seen = len(server.log.read_bytes())
                    reply = httpx.post(server.base + "/v1/chat/completions", json=body, timeout=600)
                    reply.raise_for_status()
                    server.output.flush()
                    hit = PREFIX_HIT.search(server.log.read_bytes()[seen:].decode(errors="replace"))
                    tokens = reply.json()["usage"]["prompt_tokens"]
                    reused = int(hit.group(1)) if hit else 0
                    prompt, cached = prompt + tokens, cached + reused
                    if not first:
                        shares.append(reused / tokens)
                    first = False
                rows.append(f"| {name} | {len(shares) + 1} | {prompt} | {cached} | {pct(cached / prompt)} | "
                            f"{pct(statistics.median(shares))} | {pct(min(shares))} |")
                print(rows[-1], flush=True)
        finally:
            server.stop()
    return rows


# --- the report --------------------------------------------------------------------------------

def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def mode_row(name: str, steps: list[Step]) -> str:
    counted = [s for s in steps if s.kind == "step"]
    apart = [s for s in steps if s.kind == "apart"]
    shares = [s.share for s in counted] or [0.0]
    rewritten = [s.rewritten for s in counted]
    late = [s.share for s in counted[5:]] or shares
    return (f"| {name} | {len(steps)} | {len(counted)} | {pct(min(shares))} | {pct(statistics.median(shares))} | "
            f"{pct(min(late))} | {statistics.median(s.size - round(s.share * s.size) for s in counted) if counted else 0:.0f} | "
            f"{sum(1 for b in rewritten if b)} | {max(rewritten, default=0)} | "
            + (", ".join(pct(s.share) for s in apart) if apart else "—") + " |")


LLAMA_SESSIONS = ("one-shot with tools (`-p`)", "thread (`--thread`, 5 runs)", "sub-agents (2 `spawn_agent`)",
                  "controlled run (`bantam run`)")


def llama_main(args: argparse.Namespace) -> None:
    sessions = {name: MODES[name](args.steps) for name in LLAMA_SESSIONS}
    sessions["daemon (messages, no stash)"] = daemon(12)
    rows = replay_on_llama(sessions)
    load = os.getloadavg()
    section = "\n".join([
        "## Cached prompt tokens on a real prefix-caching server (llama.cpp)", "",
        "The recorded requests of the scripted sessions above, sent in order to llama-cpp-python's server "
        "(`python -m llama_cpp.server`, `chatml-function-calling`, n_ctx 16384, 2 threads) on the bundled "
        "SmolLM2-135M, 4 output tokens each. That server keeps one slot, the last prompt's tokens, and "
        "evaluates only what follows their longest common prefix; its responses carry no cached-token "
        "count (no `prompt_tokens_details`), so *cached* is its own log line for each request, "
        "`Llama.generate: N prefix-match hit, remaining M prompt tokens to eval`. *Prompt*: the "
        "response's `usage.prompt_tokens`, as that server renders the request with its chat template.", "",
        f"Command: `.venv/bin/python bench/bench_prefix.py --llama --steps {args.steps} --write` (the daemon: "
        "messages until 12 requests, then the turn in progress to its end; at 2 cores shared with "
        "other work, prompt evaluation ran at 8-60 tokens/s)", "",
        f"Machine: {machine()} Load average {load[0]:.1f}.", "",
        "| session | requests | prompt tokens | cached tokens | cached share | median per request (2..) | "
        "min per request (2..) |", "|---|---:|---:|---:|---:|---:|---:|", *rows])
    print(section)
    if args.write:
        write_results(section, LLAMA_BEGIN, LLAMA_END)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--only", help="run only the modes whose name contains this")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--llama", action="store_true", help="replay the sessions on llama-cpp-python's server")
    args = ap.parse_args()
    if args.llama:
        return llama_main(args)
    rows = []
    for name, fn in MODES.items():
        if args.only and args.only not in name:
            continue
        # a controlled run builds a fresh prompt for each inference (no chat history): it is one
        # conversation, the run, though its user message is new each time
        steps = analyse(fn(args.steps), (lambda body: "run") if fn is controlled else conversation_key)
        rows.append(mode_row(name, steps))
        print(rows[-1], flush=True)
    anthropic = [] if args.only else anthropic_rows(args.steps)
    section = "\n".join([
        "## Prompt-cache friendliness: each request an extension of the last", "",
        "A scripted session of about "
        f"{args.steps} requests in each mode against the fake server, which keeps each request body as sent "
        "(bytes, key order and all). *Prefix share*: the longest common byte prefix with the previous "
        "request of the same conversation (named by its first non-system message), as a share of this "
        "request: what a prefix cache can serve. *Rewriting history*: a step that does not repeat the "
        "previous request byte for byte up to the `]` closing its messages (what tests/test_prefix.py "
        "pins), and by how many bytes of that part. The first request of each conversation is not counted; compaction and "
        "stash steps (the summary request, and the first request after the history was replaced) are "
        "listed apart. *Min after 5*: the early requests are short, so the few hundred new bytes of a "
        "step weigh more there. *New bytes a step*: what follows the common prefix, what a cache cannot "
        "serve (the step's call and result, and in the daemon its LIFE.md tail, rebuilt every step by "
        "design).", "",
        "Command: `.venv/bin/python bench/bench_prefix.py --write`", "", f"Machine: {machine()}", "",
        "| mode | requests | counted | min prefix share | median | min after 5 | new bytes a step (median) | "
        "steps rewriting history | most bytes rewritten | compaction / stash steps (prefix share) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|", *rows, "",
        "### Anthropic: share of each session read from the cache (simulated)", "",
        "The same scripted model in Anthropic's wire format (`provider=anthropic`). Each request's reads "
        "are computed as Anthropic computes them: the longest prefix, ending at one of the request's "
        "breakpoints or up to 20 blocks before one, that an earlier request wrote at one of its "
        "breakpoints; in bytes of block JSON (tools, system, messages). *Before*: the same requests with "
        "bantam's earlier placement, one breakpoint on the last block.", "",
        "| session | requests | breakpoints (most) | read from cache | before |",
        "|---|---:|---:|---:|---:|", *anthropic])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
