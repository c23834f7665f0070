"""The local model's tool-call text format and the grammar that holds its output to it.

A small model cannot be trusted to write tool calls, so when tools are offered its output is
constrained by a GBNF grammar: either plain answer text (or what the `answer` rule allows), or
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` whose arguments match that tool's JSON
schema. The history goes to the model as plain role/content turns any chat template can print,
and its text comes back as an OpenAI-shape assistant message. No policy lives here: which tools
and arguments a request may use is the aids' (providers/aids), the model itself is local.py's.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..errors import ProviderError

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
# Any text that does not start like a tool call: not '<', nor '{' (a call written as bare JSON,
# the schema copied into it, is how a model trained on <tool_call> slips; held back, it writes
# the call it meant in full)
ANY_ANSWER = "[^<{\\x00] [^\\x00]*"
GRAMMARS_KEPT = 64                   # parsed grammars kept: one per tool list and quoted command

_grammars: dict[str, Any] = {}


def call_text(name: str, arguments: Any) -> str:
    """One tool call as the model writes it."""
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{CALL_CLOSE}"


def result_text(content: Any) -> str:
    """A tool's result as the model reads it."""
    return f"<tool_response>\n{content}\n</tool_response>"


def tool_prompt(tools: list[dict]) -> str:
    """What the system prompt says of the tools: how to call one, and each one's arguments."""
    lines = [f"- {t['function']['name']}: {t['function'].get('description', '')} "
             f"Arguments: {json.dumps(t['function'].get('parameters', {}).get('properties', {}))}"
             for t in tools]
    return TOOL_PROMPT.format(tools="\n".join(lines))


def native_tools(template: str) -> bool:
    """Does the model's own chat template print a tool list and read `<tool_call>` turns (Qwen2.5
    and the Hermes family)? Then the model is spoken to in that format, the one it was trained
    on; otherwise (SmolLM2) the tool list goes into the system prompt as TOOL_PROMPT."""
    return "tools" in template and CALL_OPEN in template and "tool_response" in template


def to_native(messages: list[dict]) -> list[dict]:
    """OpenAI-shape history as a tool-aware template reads it: text content, and each call's
    arguments as an object (the template writes them with `tojson`)."""
    chat: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        turn: dict[str, Any] = {"role": m.get("role"), "content": content or ""}
        if m.get("role") == "assistant" and m.get("tool_calls"):
            turn["tool_calls"] = [{"type": "function", "function": {
                "name": c["function"]["name"], "arguments": _json(c["function"]["arguments"])}}
                for c in m["tool_calls"]]
        chat.append(turn)
    return chat


def to_chat(messages: list[dict]) -> list[dict]:
    """OpenAI-shape history as plain role/content turns any chat template can print."""
    chat: list[dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if isinstance(content, list):  # content parts: only the text is for this model
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if role == "tool":
            chat.append({"role": "user", "content": result_text(content)})
        elif role == "assistant" and m.get("tool_calls"):
            calls = "".join(call_text(c["function"]["name"], _json(c["function"]["arguments"]))
                            for c in m["tool_calls"])
            chat.append({"role": "assistant", "content": (content or "") + calls})
        else:
            chat.append({"role": role, "content": content or ""})
    return chat


def to_message(text: str, tools: list[dict], written: bool = False) -> dict:
    """The model's text as an assistant message: a tool call when it starts as one (ValueError,
    KeyError or TypeError when it does not parse), else plain content. With `written`, an answer
    that is nothing but one call written as JSON, bare or in a code fence, naming an offered tool,
    is that call too: Qwen writes its later calls so (as llama.cpp's server parses them for this
    family); its arguments were not held by the grammar, so the tool checks them."""
    text = text.strip()
    if tools and text.startswith(CALL_OPEN):
        # strict=False: llama.cpp's JSON grammar lets raw control characters into strings
        call = json.loads(text[len(CALL_OPEN): text.rindex(CALL_CLOSE)] if CALL_CLOSE in text
                          else text[len(CALL_OPEN):], strict=False)
        return _call_message(text, call["name"], call["arguments"])
    call = written_json_call(text, tools) if tools and written else None
    if call is not None:
        return _call_message(text, call["name"], call["arguments"])
    return {"role": "assistant", "content": text or None}


FENCED = re.compile(r"^```[a-z]*\s*(\{.*\})\s*```$", re.S)


def written_json_call(text: str, tools: list[dict]) -> dict | None:
    """`text` as {"name", "arguments"} when it is exactly one JSON call of an offered tool."""
    fenced = FENCED.match(text)
    body = fenced.group(1) if fenced else text
    if not body.startswith("{"):
        return None
    try:
        call = json.loads(body, strict=False)
    except ValueError:
        return None
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    if not isinstance(call, dict) or call.get("name") not in schemas or not isinstance(call.get("arguments"), dict):
        return None
    known = schemas[call["name"]].get("properties")
    if known:  # only what the offered schema has (a whole-file write_file: no offset)
        call["arguments"] = {k: v for k, v in call["arguments"].items() if k in known}
    return call


def _call_message(text: str, name: str, arguments: Any) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{abs(hash(text)) % 10**8}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}]}


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
    valid for its schema, on lines of its own or not (`<tool_call>\n{...}\n</tool_call>` is how
    Qwen writes it); with `required`, only the call. Given the model, the grammar is parsed once
    here: llama.cpp would crash the process on a grammar it cannot parse."""
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    schema = {"anyOf": [{"type": "object", "required": ["name", "arguments"],
                         "properties": {"name": {"const": t["function"]["name"]},
                                        "arguments": t["function"].get("parameters") or {"type": "object"}}}
                        for t in tools]}
    key = json.dumps([schema, required, answer], sort_keys=True)
    if key not in _grammars:
        if len(_grammars) > GRAMMARS_KEPT:
            _grammars.clear()
        call = json_schema_to_gbnf(json.dumps(schema)).replace("root ::=", "call ::=", 1)
        gbnf = (f'root ::= {"" if required else "answer | "}"{CALL_OPEN}" "\\n"? call "\\n"? "{CALL_CLOSE}"\n'
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
                            "set local_aids=off to go on)", retryable=False)
    llama_cpp.llama_sampler_free(sampler)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
