"""The parser: a model's text in, a JSON object or a file's text out, or a ParseError that says
exactly what to fix (the JSON position, and a hint about the output limit when the answer was cut).

Proposals are recognised in three forms, tried in this order; whatever form they came in, they
then go through the same gates:
  1. strict JSON: the whole answer is one JSON value;
  2. one JSON code fence: prose around a single ```json ... ``` (or ~~~) block;
  3. a tool call named "plan" whose arguments hold one unambiguous tool/arguments object (or, when
     a plan is due, a list of steps): small models were seen wrapping their action that way.
Forms 2 and 3 count as parser recoveries.

File contents (file_output_format = "fenced", the default) come in one code fence, unescaped. The
fence is CommonMark's: it closes on a line of the same character at least as long, so a Markdown
file with ``` blocks travels inside a ```` fence, and ~~~ fences work too.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ParseError as ParseError  # re-exported: the parser raises it

# A run's token estimate: 3 characters a token, not the 4 bantam uses to guess a server's
# unreported usage (providers/http.py CHARS_PER_TOKEN). Here the estimate is a reservation made
# before the request, and a prompt that does not fit is refused rather than cut: it must not
# fall short, and code and JSON run at fewer characters a token than prose.
RESERVE_CHARS_PER_TOKEN = 3

FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class Answer:
    """One model answer as the parser needs it."""
    text: str
    finish_reason: str | None = None  # "length" when the provider cut it at the output limit
    max_tokens: int = 0               # the output limit of that request


@dataclass(frozen=True)
class Parsed:
    obj: Any
    recovered_by: str | None = None   # None for strict JSON, else "json_fence" or "plan_call"


def parse_json(answer: Answer, plan_due: bool) -> Parsed:
    """The proposal object in the answer. `plan_due`: a "plan" call may carry a list of steps."""
    text = answer.text.strip()
    try:
        parsed = Parsed(json.loads(text))
    except ValueError as strict:
        parsed = Parsed(_from_fence(answer, strict), "json_fence")
    unwrapped = unwrap_plan_call(parsed.obj, plan_due)
    if unwrapped is not None:
        return Parsed(unwrapped, "plan_call")
    return parsed


def _from_fence(answer: Answer, strict: ValueError) -> Any:
    blocks = fenced_blocks(answer.text)
    if not blocks:
        raise ParseError(f"not valid JSON ({strict}). Reply with one JSON object and nothing "
                         "else" + cut_hint(answer, at_end=_at_end(strict, answer.text.strip())))
    if len(blocks) > 1:
        raise ParseError(f"{len(blocks)} code fences in the answer; reply with exactly one JSON "
                         "object (no more than one fence)")
    body, closed = blocks[0]
    try:
        return json.loads(body)
    except ValueError as e:
        raise ParseError(f"the code fence does not hold valid JSON ({e})"
                         + cut_hint(answer, at_end=not closed or _at_end(e, body.strip()))) from None


def _at_end(error: ValueError, text: str) -> bool:
    """A JSON error at the very end of the text: the typical mark of a cut-off answer."""
    if not isinstance(error, json.JSONDecodeError):
        return False
    return error.pos >= len(text.rstrip()) - 1 or error.msg.startswith("Unterminated string")


def cut_hint(answer: Answer, at_end: bool) -> str:
    """The output-limit hint: certain when the provider says "length", likely when the text
    breaks off at its end near the limit (servers that do not report a finish reason)."""
    near_limit = answer.max_tokens and len(answer.text) / RESERVE_CHARS_PER_TOKEN >= 0.9 * answer.max_tokens
    if answer.finish_reason == "length" or (at_end and near_limit):
        return (f". The answer was cut off at the output limit ({answer.max_tokens} tokens): "
                "give a shorter answer (fewer steps, shorter descriptions, a smaller file)")
    return ""


def unwrap_plan_call(obj: Any, plan_due: bool) -> dict | None:
    """`{"tool"|"name": "plan", "arguments": {...}}` with one tool/arguments object inside ->
    that action (or a one-step plan when a plan is due); with a list of steps -> the plan."""
    if not isinstance(obj, dict) or (obj.get("tool") or obj.get("name")) != "plan":
        return None
    inner = obj.get("arguments")
    if not isinstance(inner, dict):
        return None
    steps = inner.get("plan", inner.get("steps"))
    if plan_due and isinstance(steps, list):
        return {"plan": steps}
    calls = _calls_in(inner)
    if len(calls) != 1:
        return None  # none, or ambiguous: leave it to the schema gate to explain
    call = {"tool": calls[0]["tool"], "arguments": calls[0].get("arguments", {})}
    if plan_due:
        return {"plan": [{"description": calls[0].get("description") or call["tool"], **call}]}
    return call


def _calls_in(inner: dict) -> list[dict]:
    if isinstance(inner.get("tool"), str):
        return [inner]
    found = []
    for value in inner.values():
        items = value if isinstance(value, list) else [value]
        found += [v for v in items if isinstance(v, dict) and isinstance(v.get("tool"), str)]
    return found


def fenced_blocks(text: str) -> list[tuple[str, bool]]:
    """Every top-level code fence: (its body, whether it was closed)."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        opening = _opening(lines[i])
        if opening is None:
            i += 1
            continue
        end = _closing_index(lines, i + 1, opening)
        blocks.append(("\n".join(lines[i + 1:end]), end < len(lines)))
        i = end + 1
    return blocks


def _opening(line: str) -> str | None:
    m = FENCE_LINE.match(line)
    if not m or (m.group(1)[0] == "`" and "`" in m.group(2)):  # CommonMark: no ` in a ``` info string
        return None
    return m.group(1)


def _closing_index(lines: list[str], start: int, opening: str) -> int:
    for j in range(start, len(lines)):
        m = FENCE_LINE.match(lines[j])
        if m and m.group(1)[0] == opening[0] and len(m.group(1)) >= len(opening) and not m.group(2).strip():
            return j
    return len(lines)


def parse_file(answer: Answer, path: str) -> str:
    """The whole text of `path` from one code fence (file_output_format = "fenced")."""
    blocks = fenced_blocks(answer.text)
    if not blocks:
        raise ParseError(f"no code fence: reply with the complete content of {path} inside one "
                         "code fence (``` on a line before it and after it)" + cut_hint(answer, True))
    body, closed = blocks[0]
    if not closed:
        raise ParseError(f"the code fence around {path} is not closed" + cut_hint(answer, True))
    if len(blocks) > 1:
        raise ParseError(f"{len(blocks)} code fences: put the whole of {path} in one fence. If the "
                         "file itself contains ``` fences, use a longer outer fence (````) or ~~~")
    return body + "\n" if body else ""
