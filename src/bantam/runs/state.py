"""The run state: everything a resumed run needs, in one JSON document (state.json).

It is authoritative: plan.md is a projection of it, the JSONL logs are history. Three fields
record work in flight, so a killed process can be resumed without doing anything twice:

    inference       a model request was sent; its token reservation stays counted if it never
                    came back, and the request is made again
    pending_answer  the model's answer arrived and was saved; resume parses it, no new request
    pending_call    a tool call was about to run (the intent); resume takes its observation over
                    from observations.jsonl, repeats it if it only read or the user stopped it
                    (Ctrl+C: `interrupted`), and otherwise (a killed process: how far it got is
                    unknown) blocks the run for an explicit `--retry-blocked` instead of writing
                    or running twice
"""
from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..events import Usage
from .schema import Step
from .settings import RunConfig

RECENT = 4  # observations kept for the context: resume never rebuilds a chat history
Status = Literal["running", "paused", "completed", "blocked", "failed"]


class PlanStep(Step):
    status: Literal["pending", "done", "failed"] = "pending"
    note: str = ""                 # the evidence that checked it off, or why it failed


class Call(BaseModel):
    """A tool call: proposed, or recorded as an intent before it runs."""
    tool: str
    arguments: dict[str, Any] = {}
    call_id: str = ""
    step: int | None = None        # the plan step it would check off
    started: float = 0.0
    key: str = ""                  # tool, arguments and file hashes: for the repetition gate
    interrupted: bool = False      # stopped by the user (Ctrl+C): resume runs it again, unasked


class Observation(BaseModel):
    call_id: str
    tool: str
    arguments: dict[str, Any]      # a write's content is replaced by its size and hash
    ok: bool
    output: str                    # capped at [tools] tool_output_limit
    clipped: bool = False
    exit_code: int | None = None
    facts: dict[str, Any] = {}
    step: int | None = None


class Counters(BaseModel):
    iterations: int = 0            # loop turns: inferences and direct executions
    model_calls: int = 0
    tool_calls: int = 0
    tokens_used: int = 0           # measured use, plus the reservations of lost inferences
    prompt_tokens: int = 0
    completion_tokens: int = 0
    context_tokens: int = 0        # the prompt size of the latest answered request
    lost_reservations: int = 0     # tokens reserved by inferences that never came back
    replans: int = 0
    consecutive_failures: int = 0
    parse_retries: int = 0         # unusable answers in a row
    parse_failures: int = 0        # unusable answers in all
    parser_recoveries: int = 0     # answers read by a fallback parser (fence, "plan" call)
    gate_rejections: int = 0
    tool_failures: int = 0

    def usage(self) -> Usage:
        """The run's use in the core's terms, for a front end's usage line and `done` event:
        every model request it made, and how full the context was at the latest."""
        return Usage(prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                     context_tokens=self.context_tokens, requests=self.model_calls)


class Inference(BaseModel):
    reserved: int
    purpose: str
    started: float


class PendingAnswer(BaseModel):
    text: str
    purpose: str                   # plan, repair, act, final, or write
    path: str = ""                 # the file a write answer is for
    finish_reason: str | None = None
    max_tokens: int = 0


class Best(BaseModel):
    passed: int
    total: int
    files: dict[str, str]          # path -> artifact holding that attempt's content


class RunState(BaseModel):
    version: int = 1
    id: str
    goal: str
    status: Status = "running"
    reason: str = ""               # why it is blocked, failed or paused
    gate: str = ""                 # the gate that blocked it
    created: float = Field(default_factory=time.time)
    updated: float = Field(default_factory=time.time)
    config: RunConfig
    model: dict[str, Any] = {}     # provider, model, endpoint; or {"scripted": FILE}
    scripted_used: int = 0         # scripted answers consumed
    require_read: list[str] = []
    phase: Literal["plan", "repair", "act"] = "plan"
    plan: list[PlanStep] = []
    counters: Counters = Field(default_factory=Counters)
    reads: dict[str, str] = {}     # path -> sha256 of a complete read
    inputs: dict[str, str] = {}    # excerpts of the first required inputs, kept for the context
    verifications: dict[str, str] = {}  # command -> hash of write_paths when it passed
    recent: list[Observation] = []
    last_failure: Observation | None = None  # stays in the context across later write steps
    best: Best | None = None
    last_call: str = ""            # the last executed call, for the repetition gate
    repeats: int = 0
    next_call: int = 1
    inference: Inference | None = None
    pending_answer: PendingAnswer | None = None
    pending_call: Call | None = None
    hint: str = ""                 # a correction for the next prompt (parse error, rejection)
    prompt_artifact: dict[str, Any] = {}  # the frozen prompt artifact: file, source, sha256 (prompts.py)
    final: str = ""

    @property
    def scripted(self) -> str | None:
        return self.model.get("scripted")

    def current(self) -> int | None:
        """The index of the first step not done, or None when every step is done."""
        for i, step in enumerate(self.plan):
            if step.status != "done":
                return i
        return None

    def remember(self, obs: Observation) -> None:
        self.recent = [*self.recent, obs][-RECENT:]

    def new_call_id(self) -> str:
        self.next_call += 1
        return f"c{self.next_call - 1:04d}"
