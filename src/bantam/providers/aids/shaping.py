"""How a profile's data holds a request's tool arguments and answer: command and path patterns
from the request's words and the session folder's names, and the grammar of a grounded answer.

Pure functions of plain data (messages, schemas, a list of names, a Profile): no model, no
llama.cpp; the session's folder is read only by `names`, and only the folder it is given.
"""
from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..local_format import ANY_ANSWER

if TYPE_CHECKING:
    from . import Profile

FILE_NAME = re.compile(r"[\w-]+(?:/[\w.-]+)*\.[A-Za-z][A-Za-z0-9]{0,4}|[\w.-]+/[\w./-]+")
FLAG = "-[A-Za-z][A-Za-z]?[A-Za-z]?|-[0-9][0-9]?[0-9]?"  # -la, -5: a short flag


def known_commands(tools: list[dict], messages: list[dict], names: list[str], profile: "Profile",
                   asks_to_run: bool) -> list[dict]:
    """The tool schemas with shell_exec's command held to a command the user quoted in backticks in
    the latest request (only that, for the turn's first call when the request `asks_to_run` it), or
    a known program whose arguments are short flags, shell operators, and words of the request or
    `names` of the folder (a file name not there only as one to write); and a file tool's
    `path` to one of those words or names. A tiny model otherwise invents its arguments (`echo 123`
    to read a number, `ls docs` copied from the example, write_file to /tmp/docs.md to list a folder)."""
    request = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    request = request if isinstance(request, str) else ""
    quoted = re.findall(r"`([^`\n]+)`", request)
    given = [w for w in dict.fromkeys(words(request) + names) if w not in profile.programs]
    # A file name the request gives that is not in the folder can only be written: after `>`, by a
    # program that makes files, or as write_file's path (the 135M model ran `cat todo.txt` when
    # asked to create todo.txt). Other words of the request stay arguments anywhere.
    new = {w for w in given if w not in names and FILE_NAME.fullmatch(w)}
    # (llama.cpp's schema-to-grammar converter knows plain groups and classes only: each word a
    # literal, then a flag, then the operators)
    named = _choice(given)
    existing = _choice([w for w in given if w not in new])
    makers = "|".join(re.escape(w) for w in profile.programs if w in profile.makers)
    readers = "|".join(re.escape(w) for w in profile.programs if w not in profile.makers)
    reads, writes = f"( ({existing}|{FLAG}))", f"( ({named}|{FLAG}))"
    command = f"(({makers}){writes}*|({readers}){reads}*)"
    # a pipe or && then another program, a redirection then a name: never a dangling operator
    # (`echo >` or `wc -l &&` is a syntax error, not a command)
    program = f"{command}(( ([|]|&&) {command})|( ([>]|[>][>]) ({named})))*"
    literals = [q for q in (_literal(json.dumps(q)[1:-1]) for q in quoted) if q]
    # Asked to run what it quotes, at the start of the turn: that command, nothing else (the 135M
    # model, free to choose, ran `cat` for "Execute `exit 3`"). Later calls choose freely again.
    first_call = bool(messages) and messages[-1].get("role") == "user"
    only_quoted = literals and first_call and asks_to_run
    pattern = "^(" + "|".join(literals if only_quoted else [*literals, program]) + ")$"
    return [_shaped(tool, pattern, named, existing) for tool in tools]


def _shaped(tool: dict, command: str, named: str, existing: str) -> dict:
    """`tool` with its command or path held to a pattern (a copy); other tools as they are."""
    parameters = json.loads(json.dumps(tool["function"].get("parameters") or {}))
    properties = parameters.setdefault("properties", {})
    if tool["function"]["name"] == "shell_exec":
        properties.setdefault("command", {"type": "string"})["pattern"] = command
    elif properties.get("path", {}).get("type") == "string":  # write_file and the file tools
        properties["path"]["pattern"] = f"^({named if tool['function']['name'] == 'write_file' else existing})$"
    else:
        return tool
    return {**tool, "function": {**tool["function"], "parameters": parameters}}


def grounded_answer(messages: list[dict], profile: "Profile") -> str:
    """A GBNF rule for an answer after a tool result: words of the results since the request, of
    the request, and the profile's glue words, joined by spaces and punctuation; with `cite`, at
    least one of them a word only the results have (a fact the model looked up, not one it was
    told). Before any result: any text."""
    if not messages or messages[-1].get("role") != "tool":
        return ANY_ANSWER
    results, request = [], ""
    for m in reversed(messages):
        if m.get("role") == "user":
            request = m.get("content") if isinstance(m.get("content"), str) else ""
            break
        if isinstance(m.get("content"), str):
            results.append(m["content"])
    glue = list(profile.glue) + [w.capitalize() for w in profile.glue]
    found = words("\n".join(reversed(results)))[:profile.evidence_words]
    told = set(words(request)) | set(glue)
    facts = [w for w in found if w not in told and w.lower() not in told] if profile.cite else []
    others = [w for w in dict.fromkeys(found + words(request) + glue) if w not in facts]
    rules = (f'sep ::= " " | ", " | ": " | "\\n" | "\\n- "\nother ::= {_alternatives(others)}\n')
    if not facts:
        return 'other (sep other)* "."?\n' + rules
    # the fact comes within the first few words: a model that never cites would otherwise run on
    # to its output limit, and the grammar's open choices make each of those tokens slow
    within = profile.cite_within
    lead = "(other sep " * within + ")? " * within  # nested: one way to read each start
    return (f'{lead}fact (sep (fact | other))* "."?\nfact ::= {_alternatives(facts)}\n' + rules)


def names(folder: Path, limit: int) -> list[str]:
    """Names in `folder` and its subfolders (as `sub/name`), at most `limit`, hidden ones left out."""
    found: list[str] = []
    try:
        for entry in _entries(str(folder), limit):
            found.append(entry.name)
            if entry.is_dir(follow_symlinks=False):
                found += [f"{entry.name}/{sub.name}" for sub in _entries(entry.path, limit)]
            if len(found) >= limit:
                break
    except OSError:
        pass
    return found[:limit]


def shown(found: list[str], limit: int) -> list[str]:
    """At most `limit` of `found`, the folder's own names before its subfolders' (all of them, in
    their order, when they fit): the same for every request in the folder."""
    if len(found) <= limit:
        return found
    return sorted(found, key=lambda name: "/" in name)[:limit]  # a stable sort keeps the order


def words(text: str) -> list[str]:
    """The words of `text` (file names and paths whole), each once, in order."""
    return list(dict.fromkeys(w.rstrip(".") or w for w in re.findall(r"[A-Za-z0-9_./+-]+", text)))


def _alternatives(options: list[str]) -> str:
    return " | ".join(json.dumps(w) for w in options)


def _entries(folder: str, limit: int) -> list[os.DirEntry[str]]:
    """At most `limit` visible entries of `folder`, sorted by name: a huge folder is not read whole
    on every request."""
    with os.scandir(folder) as found:
        return sorted(itertools.islice((e for e in found if not e.name.startswith(".")), limit),
                      key=lambda e: e.name)


def _choice(options: list[str]) -> str:
    """A pattern matching any one of `options`; with none, `.` (the folder itself: harmless)."""
    return "|".join(q for q in (_literal(w) for w in options) if q) or "[.]"


def _literal(text: str) -> str | None:
    """`text` as a pattern matching itself, in the subset llama.cpp's schema converter turns into a
    valid grammar: no backslash escapes there, so each special character goes in a class of its
    own. None for text with brackets or backslashes, which that subset cannot say."""
    if any(c in text for c in "[]\\"):
        return None
    return "".join(f"[{c}]" if c in ".|?*+(){}$^" else c for c in text)
