"""Tokens per task: what bantam and its peers send for the same scripted task, and bantam's fixed cost.

    .venv/bin/python bench/bench_tokens.py --write    # from the repository root; needs the bundled model

Tokens are counted with the bundled model's tokenizer (through llama-cpp-python, vocabulary only;
the section names the model); tiktoken is not installed and would need to download its tables. Counts of one
tokenizer are comparable with each other, not with a provider's bill.

1. bantam's fixed cost per mode: the system prompt and the tool schemas (as JSON) of the first
   request of each mode's scripted session (bench_prefix.py), default tools.
2. One task, each program: the scripted server of bench_peers.py plays 10 tool calls and an answer.
   Per program: requests, the system prompt and tool schemas, the first request, the prompt
   tokens of all requests, how many of those a prefix cache could serve (the common prefix with
   the previous request), and the completion tokens (the scripted answers as sent back). Each
   request is laid out as a provider renders it (tools, instructions, then the messages, in
   canonical JSON), so the programs' different JSON key orders do not count.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import bench_peers, bench_prefix  # noqa: E402
from bench.bench_core import machine, write_results  # noqa: E402
from tests.fakes.openai_server import Recorded  # noqa: E402

BEGIN, END = "<!-- bench_tokens:begin -->", "<!-- bench_tokens:end -->"
STEPS = 10


class Tokenizer:
    def __init__(self) -> None:
        from llama_cpp import Llama

        from bantam.providers.local import bundled_model
        model = bundled_model()
        if model is None:
            sys.exit("bench: the bundled model is not installed")
        self.llama = Llama(model_path=str(model), vocab_only=True, verbose=False)
        self.name = model.stem

    def __call__(self, text: str | bytes) -> int:
        raw = text if isinstance(text, bytes) else text.encode()
        return len(self.llama.tokenize(raw, add_bos=False, special=False)) if raw else 0


def system_and_tools(body: dict) -> tuple[str, list]:
    """The system prompt and the tool list of a chat-completions, Anthropic or Responses body."""
    if "input" in body:  # Responses API: instructions, or developer/system messages in the input
        items = [i for i in body.get("input") or [] if i.get("role") in ("developer", "system")]
        system = (body.get("instructions") or "") + "".join(
            c.get("text", "") for i in items for c in (i.get("content") or []) if isinstance(c, dict))
    else:
        system = "".join(bench_prefix.text_of(m.get("content")) for m in body.get("messages") or []
                         if m.get("role") in ("system", "developer")) + bench_prefix.text_of(body.get("system"))
    return system, body.get("tools") or []


def fixed_cost(tok: Tokenizer) -> list[str]:
    from bantam.config import Config
    from bantam.prompt import system_prompt
    from bantam.tools import ToolContext, make_toolbox
    with tempfile.TemporaryDirectory() as work:
        cfg = Config()
        schemas = make_toolbox(cfg.tools, ToolContext(cfg)).schemas()
        rows = [f"| defaults (`bantam -p`, sandbox on; the rows below: sandbox off, as configured by "
                f"bench_prefix) | {tok(system_prompt(cfg, work))} | {tok(json.dumps(schemas))} | "
                f"{len(schemas)} ({', '.join(t['function']['name'] for t in schemas)}) |"]
    for name, fn in bench_prefix.MODES.items():
        requests = [r for r in fn(6) if isinstance(r.body, dict) and r.method == "POST"]
        first = requests[0].body
        system, tools = system_and_tools(first)
        names = ", ".join(t.get("function", t).get("name", "?") for t in tools) or "—"
        rows.append(f"| {name} | {tok(system)} | {tok(json.dumps(tools)) if tools else 0} | {len(tools)} ({names}) |")
        print(rows[-1], flush=True)
    return rows


def task(program: str) -> list[Recorded]:
    with bench_peers.ScriptServer(STEPS) as server, tempfile.TemporaryDirectory() as work:
        bench_peers.execute(bench_peers.command(program, server.url, work), work)
        return [r for r in server.requests if r.method == "POST" and isinstance(r.body, dict)]


def per_task(tok: Tokenizer) -> list[str]:
    rows = []
    for program in bench_peers.PROGRAMS:
        requests = task(program)
        rendered = [render(r.body) for r in requests]
        prompt = [tok(r) for r in rendered]
        cached = [tok(r[:bench_prefix.lcp(p, r)]) for p, r in zip(rendered, rendered[1:], strict=False)]
        system, tools = system_and_tools(requests[0].body)
        completion = completion_tokens(tok, requests)
        rows.append(f"| {program} | {len(requests)} | {tok(system)} | {tok(json.dumps(tools))} | {prompt[0]} | "
                    f"{sum(prompt)} | {sum(cached)} ({sum(cached) / sum(prompt) * 100:.0f}%) | {completion} |")
        print(rows[-1], flush=True)
    return rows


def render(body: dict) -> bytes:
    """The request as a provider lays it out for the model, whatever the JSON key order: the tool
    schemas, the instructions, then the conversation, one canonical JSON line each."""
    parts = [body.get("tools") or [], body.get("instructions") or "", body.get("system") or ""]
    parts += body.get("messages") or body.get("input") or []
    return "\n".join(json.dumps(p, sort_keys=True, ensure_ascii=False) for p in parts).encode()


def completion_tokens(tok: Tokenizer, requests: list[Recorded]) -> int:
    """The assistant turns the last request carries back (the script's answers), plus "done"."""
    last = requests[-1].body
    turns: list[Any] = [m for m in last.get("messages") or [] if m.get("role") == "assistant"]
    turns += [i for i in last.get("input") or [] if i.get("type") in ("function_call", "message")
              and i.get("role", "assistant") == "assistant"]
    return sum(tok(json.dumps(t)) for t in turns) + tok("done")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tok = Tokenizer()
    bench_peers.ensure_peers()
    fixed = fixed_cost(tok)
    peers = per_task(tok)
    load = os.getloadavg()
    section = "\n".join([
        "## Tokens per task", "",
        f"Counted with the bundled model's tokenizer ({tok.name}, vocabulary only: tiktoken is not "
        "installed here); one tokenizer, so the rows compare with each other, not with a bill. A peer "
        "that is not installed on the machine has no row.", "",
        "Command: `.venv/bin/python bench/bench_tokens.py --write`", "",
        f"Machine: {machine()} Load average {load[0]:.1f}.", "",
        "### bantam's fixed cost per request, by mode (first request of each bench_prefix session)", "",
        "| mode | system prompt tokens | tool schema tokens | tools |", "|---|---:|---:|---|", *fixed, "",
        f"### One task in each program: {STEPS} tool calls (`true N`), then the answer", "",
        "bench_peers.py's scripted server and set-ups (bantam: `tools=shell_exec`, as there). Each request "
        "laid out as a provider renders it, whatever the program's JSON key order: the tool schemas, the "
        "instructions, then the messages, one canonical JSON line each, tokenised. *System prompt*: the "
        "system/developer messages (mini-swe-agent puts its instructions in the first user message; "
        "`llm` sends none). *Cacheable*: the tokens of each request's common prefix with the one before, "
        "what a prefix cache can serve. *Completion*: the scripted answers as each program sends them "
        "back in its history.", "",
        "| program | requests | system prompt | tool schemas | first request | prompt, all requests | "
        "cacheable | completion |", "|---|---:|---:|---:|---:|---:|---:|---:|", *peers])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
