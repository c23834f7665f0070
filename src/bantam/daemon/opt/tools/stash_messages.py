"""PRUNE, the subconscious's scissors: a one-shot trigger carrying a STASH_MESSAGE directive.

The primary's loop intercepts "STASH_MESSAGE: <start> <end>" before calling its model and
collapses those lines of its messages.jsonl into a stashed summary pointer.
"""
import json
import time

from bantam.errors import ToolError
from bantam.fsutil import atomic_write


def prune(args, agent):
    start, end = int(args["start"]), int(args["end"])
    if start < 1 or end < start:
        raise ToolError(f"expected 1 <= start <= end, got {start} {end}")
    folder = agent.dir.home / agent.settings.primary_dir / "triggers"
    if not folder.is_dir():
        raise ToolError(f"{folder} does not exist: is primary_dir right in config.json?")
    path = folder / f"subconscious-prune-{time.time_ns()}.json"
    spec = {"next": time.time(), "message": f"STASH_MESSAGE: {start} {end}"}
    atomic_write(path, json.dumps(spec).encode("utf-8"), mode=0o600)
    return f"prune of lines {start}-{end} written to {agent.dir.rel(path)}"


TOOLS = [("PRUNE", prune,
          "Collapse lines start..end (numbered from 1) of the primary's messages.jsonl into a "
          "stashed summary, to clear stale or harmful context.",
          {"type": "object", "required": ["start", "end"], "properties": {
              "start": {"type": "integer", "description": "first line, from 1"},
              "end": {"type": "integer", "description": "last line, inclusive"}}})]
