"""What the model may propose, validated by pydantic (the schema gate).

    {"plan": [{"description": "...", "tool": "read_file", "arguments": {"path": "a.txt"}}, ...]}
    {"tool": "read_file", "arguments": {"path": "a.txt"}}
    {"final": "the answer to the goal"}
    {"content": "..."}        the whole file, when file_output_format = "json"

Extra keys (a "thought", a "reason") are ignored; exactly one of plan / tool / final decides the
kind, so `{"tool": ..., "final": ...}` is refused as ambiguous rather than guessed.
"""
from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import SchemaError as SchemaError  # re-exported: validate raises it

MAX_STEPS = 20  # a plan longer than this is a sign the model lost the thread


class Step(BaseModel):
    model_config = ConfigDict(strict=True)
    description: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = {}


class Plan(BaseModel):
    model_config = ConfigDict(strict=True)
    plan: list[Step] = Field(min_length=1, max_length=MAX_STEPS)


class Action(BaseModel):
    model_config = ConfigDict(strict=True)
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = {}


class Final(BaseModel):
    model_config = ConfigDict(strict=True)
    final: str = Field(min_length=1)


class FileContent(BaseModel):
    model_config = ConfigDict(strict=True)
    content: str


Proposal = Plan | Action | Final | FileContent
KINDS: dict[str, type[BaseModel]] = {"plan": Plan, "tool": Action, "final": Final, "content": FileContent}
SHAPES = {"plan": '{"plan": [{"description": ..., "tool": ..., "arguments": {...}}]}',
          "tool": '{"tool": ..., "arguments": {...}}', "final": '{"final": ...}',
          "content": '{"content": ...}'}


def validate(obj: Any, kinds: tuple[str, ...]) -> Proposal:
    """The proposal in `obj`, of one of `kinds` ("plan", "tool", "final", "content")."""
    if not isinstance(obj, dict):
        raise SchemaError(f"expected a JSON object, got {type(obj).__name__}; reply with "
                          + " or ".join(SHAPES[k] for k in kinds))
    present = [k for k in KINDS if k in obj]
    if len(present) > 1:
        raise SchemaError(f"ambiguous: the object has both {present[0]!r} and {present[1]!r}; "
                          "give exactly one")
    if not present or present[0] not in kinds:
        got = f"a {present[0]!r} object" if present else f"keys {sorted(obj)}"
        raise SchemaError(f"expected {' or '.join(SHAPES[k] for k in kinds)}, got {got}")
    try:
        return cast(Proposal, KINDS[present[0]].model_validate(obj))
    except ValidationError as e:
        raise SchemaError(field_problem(e)) from None


def field_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "object"
    return f"field {where}: {first['msg']}"
