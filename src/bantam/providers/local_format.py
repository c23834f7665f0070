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
ANY_ANSWER = "[^<\\x00] [^\\x00]*"  # any text that does not start like a tool call
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


def to_message(text: str, tools: list[dict]) -> dict:
    """The model's text as an assistant message: a tool call when it starts as one (ValueError,
    KeyError or TypeError when it does not parse), else plain content."""
    text = text.strip()
    if tools and text.startswith(CALL_OPEN):
        # strict=False: llama.cpp's JSON grammar lets raw control characters into strings
        call = json.loads(text[len(CALL_OPEN): text.rindex(CALL_CLOSE)] if CALL_CLOSE in text
                          else text[len(CALL_OPEN):], strict=False)
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{abs(hash(text)) % 10**8}", "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]}
    return {"role": "assistant", "content": text or None}


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
        if len(_grammars) > GRAMMARS_KEPT:
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
                            "set local_aids=off to go on)", retryable=False)
    llama_cpp.llama_sampler_free(sampler)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
