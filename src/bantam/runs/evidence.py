"""Evidence: what an observation proves, kept in the state apart from the plan.

Complete reads (with their hash), the checks that passed (bound to the hash of the files they
checked), excerpts of the required inputs, and, with keep_best, the best tested attempt so far.
The completion gate reads these; the model cannot write them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import context
from .context import excerpt
from .gates import normal
from .state import Best, Observation

if TYPE_CHECKING:
    from .loop import Run

INPUTS_KEPT = 4  # required inputs whose excerpts stay in the state


def record_evidence(run: Run, obs: Observation) -> None:
    st, tools = run.state, run.config.tools
    path, facts = normal(obs.arguments.get("path", "")), obs.facts  # ./a.txt is a.txt
    if obs.tool == "read_file" and obs.ok and facts.get("full_read"):
        st.reads[path] = facts["sha256"]
        if path in st.require_read[:INPUTS_KEPT]:
            st.inputs[path] = excerpt(obs.output, context.INPUT_EXCERPT)
    if obs.tool == "shell" and obs.ok and obs.arguments.get("command") in tools.required_verifications:
        st.verifications[obs.arguments["command"]] = facts["files_hash"]
    checked = obs.tool == "shell" and obs.arguments.get("command") in tools.required_verifications
    if checked and run.config.runtime.keep_best and facts.get("report"):
        keep_best(run, obs)


def keep_best(run: Run, obs: Observation) -> None:
    report, st = obs.facts["report"], run.state
    if st.best is not None and report.get("passed", 0) <= st.best.passed:
        return
    files = {}
    for path in run.config.tools.write_paths:
        data = run.workspace.text_of(path)
        if data is not None:
            name = f"best-{obs.call_id}-{path.replace('/', '_')}"
            files[path] = run.store.artifact(name, data.decode("utf-8", "replace"))
    st.best = Best(passed=int(report.get("passed", 0)), total=int(report.get("total", 0)), files=files)
    run.emit("best", f"best tested attempt so far: {st.best.passed}/{st.best.total}")


def evidence_note(obs: Observation) -> str:
    facts = obs.facts
    if obs.tool == "read_file":
        return f"read in full: {facts.get('bytes')} bytes, sha256 {str(facts.get('sha256'))[:12]}"
    if obs.tool == "write_file":
        return f"wrote {facts.get('bytes')} bytes, sha256 {str(facts.get('sha256'))[:12]}"
    if obs.tool == "shell":
        return f"exit 0 on files {facts.get('files_hash')}"
    return "done"
