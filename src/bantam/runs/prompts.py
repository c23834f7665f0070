"""A prompt artifact: what a prompt optimisation produced, as plain data a run can use.

    bantam optimize RUN... --output prompt.json     (runs/optimize.py; needs the `dspy` extra)
    bantam run GOAL --prompt-artifact prompt.json   (this module; needs nothing extra)

The artifact holds worked examples (demos: a request of the run and an answer that passed the
parser and the gates) and optional instructions, each for one purpose of request (plan, act,
final, write, repair). A run given one copies it into its directory (`prompt.json`), records its
hash in state.json, and uses that copy for its whole life: a resume reads the copy and refuses it
if it changed, so the prompts a run started with stay frozen. The demos go before the run's own
request as user/assistant pairs, the instructions at the end of the system message; the parser
and the gates do not change. `messages` is the one rendering, used by the run and by the
optimiser alike, so what was optimised is exactly what the run sends.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError, Refused
from ..fsutil import CONFIG_LIMIT, atomic_write, read_named

FORMAT = "bantam-prompt/1"
RUN_COPY = "prompt.json"  # the frozen copy in the run directory
Purpose = Literal["plan", "repair", "act", "final", "write"]


class Demo(BaseModel, extra="forbid"):
    purpose: Purpose
    request: str       # the user message of a request, as the run built it
    answer: str        # an answer the parser read and the gates accepted


class Artifact(BaseModel, extra="forbid"):
    format: Literal["bantam-prompt/1"] = "bantam-prompt/1"
    strategy: str                                # e.g. "bootstrap" (dspy.BootstrapFewShot)
    demos: list[Demo] = []
    instructions: dict[str, str] = {}            # purpose -> text added to the system message
    made_by: dict[str, Any] = {}                 # optimiser, versions, the runs it learned from, scores


def messages(system: str, user: str, purpose: str, artifact: Artifact | None) -> list[dict]:
    """A request's messages with the artifact's demos and instructions for its purpose."""
    if artifact is None:
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    extra = artifact.instructions.get(purpose, "").strip()
    out = [{"role": "system", "content": f"{system}\n\n{extra}" if extra else system}]
    for demo in artifact.demos:
        if demo.purpose == purpose:
            out += [{"role": "user", "content": demo.request}, {"role": "assistant", "content": demo.answer}]
    return out + [{"role": "user", "content": user}]


def read(path: Path, what: str = "--prompt-artifact") -> tuple[Artifact, bytes]:
    """The artifact and its exact bytes; one clear line when it cannot be used."""
    try:
        data = read_named(path, CONFIG_LIMIT)
    except Refused as e:
        raise ConfigError(f"{what}: {e}") from None
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {path}: {e.strerror or e}") from None
    try:
        return Artifact.model_validate(json.loads(data)), data
    except (ValueError, ValidationError) as e:
        first = str(e).splitlines()
        problem = e.errors()[0] if isinstance(e, ValidationError) else None
        where = ".".join(str(p) for p in problem["loc"]) if problem else ""
        reason = f"{where}: {problem['msg']}" if problem else (first[0] if first else type(e).__name__)
        raise ConfigError(f"{what}: {path} is not a bantam prompt artifact ({reason})") from None


def adopt(source: str, run_dir: Path) -> dict[str, Any]:
    """Copy the artifact into a new run; what state.json records about it."""
    artifact, data = read(Path(source))
    atomic_write(run_dir / RUN_COPY, data, mode=0o600)
    return {"file": RUN_COPY, "source": str(Path(source).resolve()), "sha256": hashlib.sha256(data).hexdigest(),
            "strategy": artifact.strategy, "demos": len(artifact.demos)}


def frozen(run_dir: Path, record: dict[str, Any]) -> Artifact | None:
    """The run's own copy, checked against the hash it started with (None: the run has none)."""
    if not record:
        return None
    path = run_dir / record["file"]
    artifact, data = read(path, "prompt artifact")
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ConfigError(f"{path} changed since the run started; a run keeps the prompt artifact it "
                          "started with (start a new run to use another)")
    return artifact
