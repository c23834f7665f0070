"""The DSPy side of `bantam optimize` (imported only there; needs the `dspy` extra, dspy==3.4.1).

Three adapters connect DSPy to a run without changing either:

    ModelEngine   DSPy's LM engine interface (complete(Request) -> Response) over bantam's own
                  provider, so the model is the one `bantam run` would use (--model, --endpoint,
                  provider=local ...), and nothing goes through DSPy's own HTTP clients
    RunAdapter    DSPy's format/parse over prompts.messages: the demos are rendered exactly as
                  a run renders them, and the answer is the model's text, parsed later by bantam

BootstrapFewShot runs once for each kind of request (plan, act, final, write, repair) on the traced
requests of that kind, so each gets demos of its own kind: the teacher answers with traced
answers in front as worked examples, and the answers that `accepted` passes become the demos.
DSPy's cache is off: every answer comes from the model.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage, response_to_events

from ..config import Config
from ..events import quiet
from ..providers import make_provider
from ..providers.retry import with_retries
from .optimize import Trace, accepted
from .prompts import Artifact, Demo, messages

PURPOSES = ("plan", "repair", "act", "final", "write")


class ModelEngine:
    """bantam's provider as a DSPy engine: one request, one answer."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.provider = make_provider(cfg)
        self.calls = 0

    def complete(self, request: Any) -> Any:
        system = request.system if isinstance(request.system, str) or request.system is None else \
            "".join(getattr(p, "text", "") for p in request.system)
        chat = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": m.role, "content": m.text or ""} for m in request.messages]
        reply = with_retries(lambda: self.provider.complete(chat, [], quiet(lambda e: None)),
                             quiet(lambda e: None), self.cfg.retry_delays)
        self.calls += 1
        prompt, completion = (reply.usage.prompt_tokens, reply.usage.completion_tokens) if reply.usage else (0, 0)
        text = reply.message.get("content") or ""
        return Response(id=None, model=self.provider.model, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=prompt, output_tokens=completion,
                                                          total_tokens=prompt + completion))

    def stream(self, request: Any) -> Any:
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


class Step(dspy.Signature):
    """Answer one request of a controlled run."""
    purpose: str = dspy.InputField()
    system: str = dspy.InputField()
    request: str = dspy.InputField()
    answer: str = dspy.OutputField()


class RunAdapter(dspy.Adapter):
    """A run's own prompt: system, worked examples of the same kind, the request; the answer is the text."""

    def format(self, signature: Any, demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        shown = [Demo(purpose=d["purpose"], request=d["request"], answer=d["answer"]) for d in demos
                 if d.get("purpose") == inputs["purpose"] and d.get("request") and d.get("answer")]
        artifact = Artifact(strategy="bootstrap", demos=shown)
        return messages(inputs["system"], inputs["request"], inputs["purpose"], artifact)

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        return {"answer": completion}


@dataclass
class Result:
    demos: list[dict[str, str]]
    made_by: dict[str, Any]


def bootstrap(cfg: Config, found: list[Trace], max_demos: int) -> Result:
    """BootstrapFewShot for each kind of request on its own traces; the demos it keeps, and how many
    traced requests got an accepted answer before and after."""
    engine = ModelEngine(cfg)
    dspy.configure(lm=dspy.LM(f"bantam/{cfg.model}", engine=engine, cache=False), adapter=RunAdapter())

    def metric(example: Any, prediction: Any, trace: Any = None) -> bool:
        return accepted(example.gold, prediction.answer or "")

    demos: list[dict[str, str]] = []
    before = after = 0
    for purpose in PURPOSES:
        examples = [dspy.Example(purpose=t.purpose, system=t.system, request=t.request, answer=t.answer,
                                 gold=t).with_inputs("purpose", "system", "request")
                    for t in found if t.purpose == purpose]
        if not examples:
            continue
        student = dspy.Predict(Step)
        before += score(student, examples, metric)
        optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=max_demos,
                                          max_labeled_demos=max_demos, max_rounds=1)
        with contextlib.redirect_stdout(sys.stderr):  # DSPy prints its progress; stdout stays clean
            compiled = optimizer.compile(student, trainset=examples)
        after += score(compiled, examples, metric)
        demos += [{"purpose": purpose, "request": d["request"], "answer": d["answer"]} for d in compiled.demos]
    return Result(demos, {"optimizer": "dspy.BootstrapFewShot", "dspy": dspy.__version__,
                          "max_demos": max_demos, "model": cfg.model, "model_calls": engine.calls,
                          "score_before": f"{before}/{len(found)}", "score_after": f"{after}/{len(found)}"})


def score(program: Any, examples: list[Any], metric: Any) -> int:
    """How many traced requests get an accepted answer from `program` (sequential: one model)."""
    return sum(bool(metric(e, program(**e.inputs()))) for e in examples)
