"""An ACP session's modes and configuration options: what the editor's mode picker and model
dropdown offer, and the configuration keys each choice stands for.

A mode is a pair of bantam's own keys, the sandbox and the approval rule, set for this session
as flags (they win over the files, and they outlast a model switch); the plan mode also tells
the model to plan. A choice makes a new session configuration (conversation.EditorSession
rebuilds its session), never an edit of the running one. The model dropdown lists the
endpoint's models (the list `bantam models` prints), fetched once the editor has the session.

    ask        every write and every command waits for the editor's answer (approval=always),
               in the workspace sandbox; a rejected one is not written or not run
    workspace  commands in the sandbox, writing only the project folder (the default)
    read-only  commands in the sandbox, writing nothing
    plan       no writes and no commands that change anything (the read-only sandbox, and
               approval=never, so nothing crosses it); the model is told to plan
    off        no sandbox
"""
from __future__ import annotations

from typing import NamedTuple


class Mode(NamedTuple):
    name: str
    description: str
    keys: dict[str, str]  # configuration keys this mode sets (the others keep the user's values)


MODES = {
    "ask": Mode("Ask before edits", "every file write and every command waits for your answer "
                "(commands run in the Workspace sandbox)", {"sandbox": "workspace", "approval": "always"}),
    "workspace": Mode("Workspace", "commands run in the sandbox and may write only the project folder",
                      {"sandbox": "workspace"}),
    "read-only": Mode("Read only", "commands run in the sandbox and may write nothing", {"sandbox": "read-only"}),
    "plan": Mode("Plan", "the model looks and plans: no file is written and commands may change nothing",
                 {"sandbox": "read-only", "approval": "never"}),
    "off": Mode("Full access (no sandbox)", "commands run with your full rights", {"sandbox": "off"}),
}
MODE_KEYS = ("sandbox", "approval")
PLAN_NOTE = ("\n\nPlan mode: the user wants a plan, not changes. Read files and run commands that only "
             "look (they run in a read-only sandbox; writes are refused), then answer with a short, "
             "concrete, numbered plan: which files change and how, and how to check the result. The "
             "user switches the mode to have it carried out.")


def mode_of(sandbox: str, approval: str) -> str:
    """The mode a configuration is in, when nobody chose one yet."""
    if sandbox == "workspace" and approval == "always":
        return "ask"
    return sandbox if sandbox in MODES else "workspace"


def flags_for(mode: str, given: dict[str, str], flags: dict[str, str]) -> dict[str, str]:
    """`flags` with `mode`'s keys; a key the mode does not set goes back to what was given at
    start (`given`, the options after `bantam acp`), or to the configuration files."""
    chosen = {k: v for k, v in flags.items() if k not in MODE_KEYS}
    chosen.update({k: given[k] for k in MODE_KEYS if k in given})
    chosen.update(MODES[mode].keys)
    return chosen


def modes(current: str) -> dict:
    return {"currentModeId": current, "availableModes": [{"id": key, "name": m.name, "description": m.description}
                                                         for key, m in MODES.items()]}


def options(mode: str, model: str, models: list[str]) -> list[dict]:
    """The session's configuration options: the mode (as the mode picker has it) and the model
    (the endpoint's list once known; the current one always among them)."""
    names = models if model in models else [model, *models]
    return [{"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": mode,
             "options": [{"value": key, "name": m.name, "description": m.description} for key, m in MODES.items()]},
            {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": model,
             "options": [{"value": name, "name": name} for name in names]}]
