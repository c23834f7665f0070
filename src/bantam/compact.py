"""Compaction: ask the model to summarise, then restart from system + summary.

The summary message also carries the original task, the latest request and the
project's AGENTS.md verbatim, so no compaction can lose what the user asked for or the rules.
"""
from __future__ import annotations

from .errors import APIError, is_context_overflow
from .events import OnEvent, ignore
from . import providers
from .providers import Provider
from .prompt import AGENTS_FILE, agents_md

COMPACT_PROMPT = (
    "You are now acting as a compaction engine. Summarize the preceding conversation concisely but "
    "completely: the goal, the decisions made, what was done and its results (files changed, "
    "commands run, facts learned), what failed, and what remains to do. Write it so that the "
    "work can continue from the summary alone. Reply with the summary only.")
SUMMARY_PROMPT = ("Summarize this conversation in one line of at most 12 words, to name it in a "
                  "list. Reply with that line only.")
HEADER = "[compacted conversation]\n"
TASK, LATEST, RULES, WORK = ("Original task (verbatim):\n", "Latest request (verbatim):\n",
                             f"Project rules from {AGENTS_FILE} (verbatim):\n", "Summary of the work so far:\n")
RESULT_CLIP = 2000   # characters of each tool result the summariser sees


def ask(provider: Provider, messages: list[dict], instruction: str, delays: tuple[float, ...],
        on_event: OnEvent = ignore) -> str:
    """The conversation plus one instruction, without tools; returns the reply text."""
    return providers.ask(provider, messages + [{"role": "user", "content": instruction}], delays, on_event)


def compact(provider: Provider, messages: list[dict], delays: tuple[float, ...],
            on_event: OnEvent = ignore, directory: str = ".") -> None:
    """Replace `messages` in place by [system, summary message]."""
    system = [m for m in messages[:1] if m.get("role") == "system"]
    body = [m for m in messages[len(system):]]
    task, latest = original_task(body), latest_request(body)
    view = _readable(body)
    while True:
        try:
            summary = ask(provider, system + view, COMPACT_PROMPT, delays, on_event)
            break
        except APIError as e:
            if not is_context_overflow(e) or len(view) <= 2:
                raise
            view = view[len(view) // 2:]  # too long even to summarise: keep the later half
            while view and view[0].get("role") == "tool":
                view = view[1:]
    messages[:] = system + [{"role": "user", "content": summary_message(task, latest, summary, directory)}]


def summary_message(task: str, latest: str, summary: str, directory: str = ".") -> str:
    parts = [HEADER + TASK + task]
    if latest and latest != task:
        parts.append(LATEST + latest)
    rules = agents_md(directory)
    if rules:
        parts.append(RULES + rules)
    parts.append(WORK + (summary or "(the model gave no summary)"))
    return "\n\n".join(parts)


def original_task(body: list[dict]) -> str:
    first = next((m.get("content") for m in body if m.get("role") == "user"), "") or ""
    if isinstance(first, str) and first.startswith(HEADER + TASK):  # compacted before
        rest = first[len(HEADER + TASK):]
        ends = [i for i in (rest.find("\n\n" + LATEST), rest.find("\n\n" + RULES),
                            rest.find("\n\n" + WORK)) if i >= 0]
        return rest[:min(ends)] if ends else rest
    return first if isinstance(first, str) else str(first)


def latest_request(body: list[dict]) -> str:
    last = next((m.get("content") for m in reversed(body) if m.get("role") == "user"), "") or ""
    return "" if not isinstance(last, str) or last.startswith(HEADER) else last


def _readable(body: list[dict]) -> list[dict]:
    """The conversation with long tool results clipped, so the summary request stays small."""
    out = []
    for m in body:
        content = m.get("content")
        if m.get("role") == "tool" and isinstance(content, str) and len(content) > RESULT_CLIP:
            m = {**m, "content": content[:RESULT_CLIP] + f"\n[... {len(content) - RESULT_CLIP} characters clipped]"}
        out.append(m)
    return out
