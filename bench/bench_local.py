"""The local provider on the bundled SmolLM2-135M-Instruct, beside llama-cpp-python called directly.

    .venv/bin/python bench/bench_local.py --write    # from the repository root; needs '.[local]'

1. Generation speed: the same prompt, greedy, the same number of new tokens, through bantam's
   LocalProvider and through `Llama.create_completion` on its own model instance; the KV cache is
   cleared before every run so both read the whole prompt. Tokens per second and their ratio.
2. Time to first token as a conversation grows (turns 1, 10 and 20, 32 new tokens a turn), with
   bantam's prefix reuse, and with the KV cache cleared before each turn (what a harness that
   re-sends the history to a cache-less backend pays).
3. Simple agent work offline: the evaluation set of bench/local_eval/tasks.jsonl (25 tasks in five
   kinds), once per row of EVAL_VARIANTS, from the model deciding alone to every aid bantam gives a
   small model, so the gain of each is visible. `--eval-only` runs just this part.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import machine, ms, write_results  # noqa: E402
from bantam.config import Config  # noqa: E402
from bantam.events import Text  # noqa: E402
from bantam.prompt import SYSTEM_PROMPT  # noqa: E402
from bantam.providers.aids import profiles  # noqa: E402
from bantam.providers.local import LocalProvider, bundled_model  # noqa: E402

BEGIN, END = "<!-- bench_local:begin -->", "<!-- bench_local:end -->"
EVAL_BEGIN, EVAL_END = "<!-- bench_local_eval:begin -->", "<!-- bench_local_eval:end -->"
# Each row adds one aid of the bundled model's profile (providers/aids/profiles.json) to the row
# above it; the last row is bantam's default (local_aids=auto).
BUNDLED_PROFILE = "smollm2-135m"
NONE = {"example": False, "call_first": False, "commands": False, "grounded": False, "cite": False}
EVAL_VARIANTS = [
    ("model decides alone (0.1)", NONE),
    ("+ the worked tool call nearest the request shown", {**NONE, "example": True}),
    ("+ tool call first when the request needs the machine", {**NONE, "example": True, "call_first": True}),
    ("+ commands: a known program; its words from the request or the folder",
     {"grounded": False, "cite": False}),
    ("+ answers after a result use its words", {"cite": False}),
    ("+ ... and cite one word only the result has", {}),
]
# Kinds no worked example shows (the examples list a folder and read a file): more than half the
# set, so the gain measured there is general behaviour, not copying.
HELD_OUT = ("count lines", "exit code", "write a file")
NEW_TOKENS = 128
QUESTION = "Write a short story about a lighthouse keeper and a storm."


def bantam_run(provider: LocalProvider, messages: list[dict], max_tokens: int) -> tuple[float, float, int, str]:
    """(seconds to the first token, total seconds, new tokens, the answer)."""
    first: list[float] = []
    t0 = time.perf_counter()
    reply = provider.complete(messages, [], lambda e: first.append(time.perf_counter()) if isinstance(e, Text) and not first else None)
    total = time.perf_counter() - t0
    return (first[0] - t0 if first else total), total, reply.usage.completion_tokens, reply.message["content"] or "."


def speed_table(reps: int) -> str:
    from llama_cpp import Llama
    cfg = Config(provider="local", temperature=0.0, forward={"max_tokens": NEW_TOKENS, "stop": ["\x00"]})
    provider = LocalProvider(cfg)
    messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": QUESTION}]
    tokens = provider.llama.tokenize(provider.format(messages, []).encode(), add_bos=False, special=True)
    direct = Llama(model_path=str(bundled_model()), n_ctx=8192, verbose=False)
    rates: dict[str, list[float]] = {"llama-cpp-python `create_completion` (peer)": [], "bantam LocalProvider": []}
    for _ in range(reps):
        direct.reset()
        t0 = time.perf_counter()
        n = sum(1 for _ in direct.create_completion(tokens, max_tokens=NEW_TOKENS, temperature=0.0, stream=True,
                                                    repeat_penalty=1.1, stop=["\x00"]))
        rates["llama-cpp-python `create_completion` (peer)"].append(n / (time.perf_counter() - t0))
        provider.llama.reset()
        _, total, n, _ = bantam_run(provider, messages, NEW_TOKENS)
        rates["bantam LocalProvider"].append(n / total)
    peer, ours = (statistics.median(r) for r in rates.values())
    rows = [f"| {name} | {min(r):.1f} | {statistics.median(r):.1f} | {max(r):.1f} |" for name, r in rates.items()]
    return "\n".join([f"### Generation speed ({len(tokens)}-token prompt read in full, {NEW_TOKENS} new tokens, "
                      f"{reps} runs each)", "", "| run | min tok/s | median tok/s | max tok/s |",
                      "|---|---:|---:|---:|", *rows, "", f"bantam / direct: **{ours / peer:.2f}**"])


def ttft_table() -> str:
    cfg = Config(provider="local", temperature=0.0, forward={"max_tokens": 32})
    rows = []
    for label, reuse in (("bantam, prefix reused", True), ("KV cache cleared before each turn", False)):
        provider = LocalProvider(cfg)
        provider.llama.reset()
        messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        found = {}
        for turn in range(1, 21):
            messages.append({"role": "user", "content": f"Question {turn}: name a {('colour', 'city', 'fruit', 'animal')[turn % 4]}."})
            if not reuse:
                provider.llama.reset()
            first, _, _, answer = bantam_run(provider, messages, 32)
            reply_usage = provider.llama.n_tokens
            messages.append({"role": "assistant", "content": answer})
            if turn in (1, 10, 20):
                found[turn] = (first, reply_usage)
        rows.append(f"| {label} | " + " | ".join(f"{ms(found[t][0])} ms ({found[t][1]} tok)" for t in (1, 10, 20)) + " |")
    return "\n".join(["### Time to first token as the conversation grows (built-in system prompt, 32 new tokens a turn)",
                      "", "| run | turn 1 | turn 10 | turn 20 |", "|---|---:|---:|---:|", *rows, "",
                      "(tok: tokens in the KV cache after the turn, i.e. the conversation's length.)"])


def eval_table() -> str:
    from bench.local_eval import evaluate, tasks
    kinds = list(dict.fromkeys(t["kind"] for t in tasks()))
    rows = []
    bundled = profiles()[BUNDLED_PROFILE]
    for label, switches in EVAL_VARIANTS:
        results = evaluate(profile=bundled.but(**switches))
        print(label, [(r["id"], r["ok"], r["trace"]) for r in results], file=sys.stderr, flush=True)
        by_kind = [sum(r["ok"] for r in results if r["kind"] == k) for k in kinds]
        per_kind = [len([r for r in results if r["kind"] == k]) for k in kinds]
        calls, valid = sum(r["calls"] for r in results), sum(r["valid_calls"] for r in results)
        n = len(results)
        unseen = [r for r in results if r["kind"] in HELD_OUT]
        held = sum(r["ok"] for r in unseen)
        rows.append(f"| {label} | " + " | ".join(f"{a}/{b}" for a, b in zip(by_kind, per_kind))
                    + f" | **{sum(by_kind)}/{n}** | {held}/{len(unseen)} | {valid}/{calls} | "
                    f"{sum(r['prompt_tokens'] for r in results) / n:.0f} + {sum(r['completion_tokens'] for r in results) / n:.0f}"
                    f" | {statistics.median(r['seconds'] for r in results):.1f} |")
    return "\n".join([
        f"### Simple agent work offline ({len(tasks())} tasks of bench/local_eval/tasks.jsonl, greedy, seed 1)", "",
        "| bantam | " + " | ".join(kinds) + " | solved | of them, kinds no example shows | valid tool calls | tokens per task (prompt + completion) | median s per task |",
        "|---|" + "---:|" * (len(kinds) + 5), *rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--eval-only", action="store_true", help="only the evaluation set")
    args = ap.parse_args()
    evaluation = "\n".join(["## Local model: simple agent work offline (bundled SmolLM2-135M-Instruct Q4_1)", "",
                             "Command: `.venv/bin/python bench/bench_local.py --write` (or `--eval-only`)", "",
                             f"Machine: {machine()}", "", eval_table()])
    print(evaluation)
    if args.write:
        write_results(evaluation, EVAL_BEGIN, EVAL_END)
    if args.eval_only:
        return
    section = "\n".join(["## Local model (bundled SmolLM2-135M-Instruct Q4_1, CPU)", "",
                         "Command: `.venv/bin/python bench/bench_local.py --write`", "",
                         f"Machine: {machine()}", "", speed_table(args.reps), "", ttft_table()])
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
