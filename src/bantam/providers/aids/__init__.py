"""Aids for a small local model: a profile of data per model family, and a small interface.

A 135M model copies what it sees and invents what it is not held to. What helps one model (a
worked exchange, a tool call first, commands held to known programs and given words, answers made
of the result's words) is a cage for a capable one, so the aids are a profile per model, as
pydantic-ai keeps per-model quirks as profiles: the word lists, patterns, worked exchanges and
switches are data in profiles.json, keyed by profile name; the code here only applies them.

The runtime (local.py) asks four things of an `Aids`:
- `examples(tools, messages)`: worked exchanges to show after the system prompt;
- `call_first(messages)`: must this reply be a tool call (the request plainly needs the machine)?
- `tools(tools, messages, folder, shown)`: the tool schemas, their arguments held to what this
  request and the session's folder name (`shown`: the shorter form the prompt prints); none
  for a question the model answers from what it knows (`answers`): no tool list, no worked
  example and no grammar, so nothing leads it to a command;
- `answer(messages)`: the grammar rule an answer must follow.
`local_aids=auto` gives the bundled model its profile and a `model_path=` GGUF none; `off` none;
a profile's name that profile, for any model.

A small model served by an endpoint (llama.cpp's or Ollama's server) gets a named profile's aids
that a request can carry (`resolve` with no model file, `Aids.request`): the worked exchange, the tool schemas
(write_file as a whole-file write), the "(no output)" view, and `tool_choice: required` where the
runtime's grammar would force a call. Held commands and grounded answers need the grammar, so
they stay the bundled runtime's; `auto` gives an endpoint none (its model may be a capable one).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ..local_format import ANY_ANSWER
from . import shaping

PROFILES = Path(__file__).with_name("profiles.json")
OFF, AUTO = "off", "auto"
EMPTY_OUTPUT = "(no output)"
WRITERS = (">", "sed -i", "perl -i", "tee ", "mv ", "cp ")  # in a command naming a file: it may write it


@dataclass(frozen=True)
class Profile:
    """One model family's aids, as profiles.json writes them (see the field comments there)."""
    name: str
    about: str = ""
    models: tuple[str, ...] = ()         # file names (without .gguf) that `auto` gives this profile
    example: bool = False                # show the worked exchange nearest the request
    call_first: bool = False             # a request that needs the machine gets a tool call first
    answer_first: bool = False           # a general question gets no tools: it is answered
    commands: bool = False               # commands and paths held to known programs and given words
    grounded: bool = False               # an answer after a tool result uses its words
    cite: bool = False                   # ... and cites one word only the result has
    exchanges: tuple[dict, ...] = ()     # {request, steps: [[tool, arguments, result], ...], answer}
    machine_words: str = "$^"            # a request that matches needs the machine (regex)
    write_words: str = ""                # a request that matches names a file to write (regex, group `file`)
    run_words: str = "$^"                # a request that matches asks to run what it quotes (regex)
    local_words: str = "$^"              # a request that matches may be about this machine (regex)
    programs: tuple[str, ...] = ()       # what a command may start with
    makers: tuple[str, ...] = ()         # of them, the programs that make the files they are given
    glue: tuple[str, ...] = ()           # words an answer may use besides the evidence's
    function_words: tuple[str, ...] = () # words that do not count when matching a request to an example
    evidence_words: int = 400            # at most this many distinct words from the results
    cite_within: int = 5                 # the answer's first fact comes within this many words
    names_allowed: int = 200             # names of the folder a command or path may use
    names_shown: int = 10                # of them, how many the prompt's copy of the pattern prints
    whole_writes: bool = False           # write_file offered without offset and del_bytes (whole files)
    mark_empty: bool = False             # a command that printed nothing is shown as EMPTY_OUTPUT
    repeat_penalty: float = 1.1          # llama.cpp's: small models loop on a phrase without it, but it
                                         # also holds a model back from its own call markup, seen before

    def but(self, **changes: Any) -> "Profile":
        """This profile with some aids switched (bench/bench_local.py measures each one's gain)."""
        return replace(self, **changes)


def profiles() -> dict[str, Profile]:
    """Every bundled profile by name."""
    return dict(_profiles())


@cache
def _profiles() -> tuple[tuple[str, Profile], ...]:
    data = json.loads(PROFILES.read_text(encoding="utf-8"))
    known = {f.name for f in fields(Profile)} - {"name"}
    return tuple((name, Profile(name, **_fields(values, known))) for name, values in data.items())


def _fields(values: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """A profile's data as Profile's fields (lists as tuples: a profile is a frozen value)."""
    unknown = set(values) - known
    if unknown:  # a typo in the data would silently switch an aid off
        raise ValueError(f"{PROFILES}: unknown profile fields {sorted(unknown)}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def resolve(setting: str, model_file: Path | None, own_model: bool = False) -> "Aids":
    """The aids `local_aids=setting` gives the model in `model_file` (None: a model served by an
    endpoint); `own_model`: the user named it with model_path=. auto gives either of those none:
    the aids would cage a capable model."""
    known = profiles()
    if setting == OFF or (setting == AUTO and (own_model or model_file is None)):
        return NO_AIDS
    if setting == AUTO:
        name = model_file.name.lower() if model_file else ""  # a profile names the start of its models' file names
        found = next((p for p in known.values() if any(name.startswith(m.lower()) for m in p.models)), None)
        return Aids(found) if found else NO_AIDS
    if setting not in known:
        raise ConfigError(f"local_aids: no profile {setting!r} (auto, off, or one of: {', '.join(known)})")
    return Aids(known[setting])


class Aids:
    """A profile applied to requests; `Aids(None)` (NO_AIDS) changes nothing."""

    def __init__(self, profile: Profile | None):
        self.profile = profile
        p = profile or Profile(name=OFF)
        self._machine = re.compile(p.machine_words, re.I)
        self._run = re.compile(p.run_words, re.I)
        self._local = re.compile(p.local_words, re.I)

    def examples(self, tools: list[dict], messages: list[dict]) -> list[dict]:
        """The worked exchange whose request shares the most words with the conversation's first
        request (function words do not count; on a tie the last of the profile's), among those
        whose tool is offered: the model copies the example it saw, so it is shown only the nearest
        one. Measured on the evaluation set: with both shown, the 135M model read no number (0/5,
        it ran `echo` or `ls` on the file); with the nearest only, 5/5. (Shown with read_file and
        list_files instead, it copied the example's own path into every call: 1/25 against 6/25.)
        The first request, not the latest, so that the conversation's prefix, and its saved
        state, stay the same from turn to turn."""
        p = self.profile
        names = {t["function"]["name"] for t in tools}
        shown = [e for e in (p.exchanges if p and p.example else ())
                 if all(tool in names for tool, _, _ in e["steps"])]
        if not p or not shown:
            return []
        request = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        asked = self._content_words(request if isinstance(request, str) else "")
        nearest = max(reversed(shown), key=lambda e: len(asked & self._content_words(e["request"])))
        shown_turn: list[dict] = [{"role": "user", "content": nearest["request"]}]
        for n, (tool, arguments, result) in enumerate(nearest["steps"]):
            call = {"id": f"call_example_{n}" if n else "call_example", "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(arguments)}}
            shown_turn += [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": call["id"], "content": result}]
        return [*shown_turn, {"role": "assistant", "content": nearest["answer"]}]

    def conversation(self, messages: list[dict], tools: list[dict]) -> list[dict]:
        """What the model reads: the system message, the worked exchange (with tools offered), then
        the conversation as `shown` gives it."""
        examples = self.examples(tools, messages) if tools and messages and messages[0].get("role") == "system" else []
        return self.shown(messages[:1] + examples + messages[1:])

    def request(self, messages: list[dict], tools: list[dict], folder: Path | None
                ) -> tuple[list[dict], list[dict], bool]:
        """A request to an endpoint with the aids it can carry: (messages, tools, whether the reply
        must be a tool call)."""
        tools = self.tools(tools, messages, folder)
        return self.conversation(messages, tools), tools, bool(tools) and self.call_first(messages)

    def shown(self, history: list[dict]) -> list[dict]:
        """The conversation as the model reads it. With `mark_empty`, a command that printed
        nothing says so: shown `\n\nexit: 0` alone, Qwen2.5-Coder 1.5B took `exit: 0` for what
        `python3 compute.py > output.txt` printed and wrote it over the file the command had just
        written. The conversation itself keeps the result as the tool gave it."""
        if not (self.profile and self.profile.mark_empty):
            return history
        return [{**m, "content": EMPTY_OUTPUT + m["content"]}
                if m.get("role") == "tool" and isinstance(m.get("content"), str) and m["content"].startswith("\n\nexit: ")
                else m for m in history]

    def call_first(self, messages: list[dict]) -> bool:
        """Must this reply be a tool call: the turn starts with a request that needs the machine
        (`starts_with_call`), or the request names a file to write that no call has written yet
        (`unwritten`)?"""
        return self.starts_with_call(messages) or self.unwritten(messages)

    def unwritten(self, messages: list[dict]) -> bool:
        """Does the latest request ask for a file to be written ("write the number into
        answer.txt") that no call of this turn has written? A model that found the answer then
        said "I have written it into answer.txt" without a call (Qwen2.5-Coder 1.5B, 4 of 6
        such tasks) is held to a call until one writes it."""
        p = self.profile
        if not (p and p.write_words) or not messages or messages[-1].get("role") != "tool":
            return False
        start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        found = re.search(p.write_words, _request(messages), re.I)
        if start < 0 or not found:
            return False
        target = found.group("file")
        for m in messages[start:]:
            for c in m.get("tool_calls") or []:
                args = c.get("function", {}).get("arguments", "")
                if target in str(args) and (c["function"]["name"] == "write_file" or any(w in str(args) for w in WRITERS)):
                    return False
        return True

    def starts_with_call(self, messages: list[dict]) -> bool:
        """Is this the start of a turn (the last message is the user's) whose request names a file,
        a path or a command, asks to run something, or starts by asking to list or count? Then the
        first reply is a tool call (grammar-forced), not a guess. (`list` or `count` elsewhere is
        most often a noun, as in "Explain what a linked list is.": matched there, it forced the
        135M model to run `printf` for it.)"""
        if not (self.profile and self.profile.call_first):
            return False
        last = messages[-1] if messages else {}
        content = last.get("content")
        return last.get("role") == "user" and isinstance(content, str) and bool(self._machine.search(content))

    def answers(self, messages: list[dict], folder: Path | None = None) -> bool:
        """Is this a general question the model answers from what it knows: the start of a
        conversation that has not used a tool, whose request names no file, path or command, asks
        to run, list or count nothing (machine_words), and speaks of nothing on this machine
        (local_words: the time, a version, the project, ...) nor names anything in `folder`
        (an extensionless file: Makefile, LICENSE)? Then it is offered no tools.

        Offered them, the 135M model answered 6 of 24 such questions (8 questions, 3 folders,
        greedy): it copied the worked tool call instead (`printf` for "What is the capital of
        France?", `cat autumn` for a haiku), and "Say hello in French." went either way by the
        folder's name in the system prompt (2 of 12 folders: a call), the choice between `<` and
        `Hello` being within 0.5 of a logit. With no tools, all 24 were answers (Paris, Bonjour,
        Shakespeare), from a prompt of 184 tokens instead of 1,200. A question in the middle
        (speaking of this machine, or later in a conversation that used tools, whose calls would
        otherwise be copied as text) is the model's to decide, as before."""
        p = self.profile
        if not (p and p.answer_first) or not messages:
            return False
        last = messages[-1]
        content = last.get("content")
        if last.get("role") != "user" or not isinstance(content, str):
            return False
        if any(m.get("role") == "tool" or m.get("tool_calls") for m in messages):
            return False
        if self._machine.search(content) or self._local.search(content):
            return False
        # a name in the session's folder, though the patterns miss it ("What is in Makefile?")
        return folder is None or not set(shaping.words(content)) & set(shaping.names(folder, p.names_allowed))

    def tools(self, tools: list[dict], messages: list[dict], folder: Path | None,
              shown: bool = False) -> list[dict]:
        """The tool schemas with shell_exec's command and the file tools' paths held to what this
        request and `folder` name (shaping.known_commands); None: no folder, no names. With
        `shown`, the copy the prompt prints: the pattern for no request in particular, with fewer
        of the folder's names (the grammar allows them all and the request's words; the model
        reads the pattern's shape, and a big folder's names repeated in it took half the bundled
        model's window). None for a general question (`answers`)."""
        p = self.profile
        if self.answers(messages, folder):
            return []
        if p and p.whole_writes:
            tools = [whole_file(t) for t in tools]
        if not (p and p.commands):
            return tools
        names = shaping.names(folder, p.names_allowed) if folder is not None else []
        if shown:
            # The folder's names only, never this request's words: the printed pattern is part of
            # the prompt's fixed prefix, whose saved state (kv_cache) then serves every request in
            # the folder. With the request's words in it, each new question in the repository
            # root cost a cold read of 1,789 tokens and a 31.6 MB state file of its own.
            return shaping.known_commands(tools, [], shaping.shown(names, p.names_shown), p, False)
        request = _request(messages)
        return shaping.known_commands(tools, messages, names, p, bool(self._run.search(request)))

    def answer(self, messages: list[dict]) -> str:
        """The GBNF rule an answer follows: after a tool result, with `grounded`, the words of the
        result and the request (shaping.grounded_answer); else any text."""
        p = self.profile
        return shaping.grounded_answer(messages, p) if p and p.grounded else ANY_ANSWER

    def _content_words(self, text: str) -> set[str]:
        skip = set(self.profile.function_words) if self.profile else set()
        return {w for w in shaping.words(text.lower()) if w not in skip}


def whole_file(tool: dict) -> dict:
    """write_file as a whole-file write: a model that fills every argument it is shown wrote
    `offset: 0, del_bytes: 0` to mean "the whole file", an insertion at the start, and turned
    a one-line fix into the old file with the new one before it."""
    if tool["function"]["name"] != "write_file":
        return tool
    parameters = tool["function"]["parameters"]
    kept = {k: v for k, v in parameters["properties"].items() if k not in ("offset", "del_bytes")}
    return {**tool, "function": {**tool["function"], "description": "Write a whole file: it holds content "
            "afterwards (parent directories are created).", "parameters": {**parameters, "properties": kept}}}


def _request(messages: list[dict]) -> str:
    """The latest request's text."""
    request = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    return request if isinstance(request, str) else ""


NO_AIDS = Aids(None)
