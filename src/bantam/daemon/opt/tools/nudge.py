"""NUDGE, the subconscious's voice: a one-shot trigger in the primary's triggers/.

The primary's trigger thread fires it as "[trigger subconscious-<name>] <message>" and, because
of the prefix, shows it to the operator too. The subconscious never writes the primary's
messages.jsonl itself, so the primary's stream cannot be corrupted from here.
"""
import json
import re
import time

from bantam.errors import ToolError
from bantam.fsutil import atomic_write


def nudge(args, agent):
    name = re.sub(r"[^a-z0-9]+", "-", str(args.get("name") or "note").lower()).strip("-")[:40] or "note"
    folder = agent.dir.home / agent.settings.primary_dir / "triggers"
    if not folder.is_dir():
        raise ToolError(f"{folder} does not exist: is primary_dir right in config.json?")
    path = folder / f"subconscious-{name}.json"
    spec = {"next": time.time(), "message": str(args["message"])}
    atomic_write(path, json.dumps(spec).encode("utf-8"), mode=0o600)
    return f"nudge written to {agent.dir.rel(path)}; the primary gets it at its next trigger scan"


TOOLS = [("NUDGE", nudge,
          "Send the primary agent a short corrective note. It arrives as "
          "[trigger subconscious-<name>] <message>, and the operator sees it too.",
          {"type": "object", "required": ["message"], "properties": {
              "name": {"type": "string", "description": "a short slug naming the nudge"},
              "message": {"type": "string", "description": "what the primary should hear"}}})]
