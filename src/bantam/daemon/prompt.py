"""The request the daemon sends, rebuilt fresh every step:

    system:  <soul> SOUL.md, <harness> how this harness works, <subconscious> (when a
             subconscious/ sibling exists), <memory> MEMORY.md (middle elided past memory_limit)
    then the conversation (messages.jsonl), then the LIFE.md tail as a trailing harness message.

The tail and the clock ride at the end, not in the system prompt, so the long prefix stays the
same from step to step and the provider's prompt cache keeps working.
"""
from __future__ import annotations

from pathlib import Path

from ..clip import clip_middle
from ..errors import Refused
from ..fsutil import read_inside
from . import templates
from .bus import system_message
from .layout import AgentDir, life_tail, secret_files, stamp
from .settings import Settings

SOURCE = Path(__file__).resolve().parent
OWN_FILE_LIMIT = 4 << 20  # bytes of SOUL.md or MEMORY.md read (the memory is clipped far below this)


def system_prompt(agent: AgentDir, s: Settings, chat: bool) -> str:
    parts = [f"<soul>\n{_read(agent, 'SOUL.md', s).strip()}\n</soul>",
             f"<harness>\n{harness(agent, s, chat)}</harness>"]
    sub = agent.subconscious()
    if sub is not None:
        parts.append(f"<subconscious>{templates.SUBCONSCIOUS_LINE.format(sub=agent.rel(sub))}</subconscious>")
    parts.append(f"<memory>\n{memory(agent, s)}\n</memory>")
    return "\n\n".join(parts)


def harness(agent: AgentDir, s: Settings, chat: bool) -> str:
    heartbeat = "" if agent.is_subconscious or not s.heartbeat_s else (
        f" A heartbeat trigger wakes you every {s.heartbeat_s:g} s, less often while you are idle.")
    return templates.HARNESS.format(
        source=SOURCE, dir=agent.rel(), memory_limit=s.memory_limit, cmd_timeout=s.cmd_timeout,
        trigger_tick=s.trigger_tick, heartbeat=heartbeat, tool_timeout=s.tool_timeout,
        tool_output_limit=s.tool_output_limit, context_window=s.context_window,
        chat=" (Telegram)" if chat else " (none is configured: replies stay in messages.jsonl)")


def memory(agent: AgentDir, s: Settings) -> str:
    limit = s.memory_limit
    return clip_middle(_read(agent, "MEMORY.md", s).strip(), limit, (
        f"{agent.rel()}/MEMORY.md is over memory_limit ({limit}). Move detail into "
        f"{agent.rel()}/memory/<name>.md files and keep one short pointer line per memory here"))[0]


def life_message(agent: AgentDir, s: Settings) -> dict:
    now = stamp("%Y-%m-%d %H:%M:%S %Z")
    tail = life_tail(agent, s.life_tail, s.primary_dir)
    return system_message(f"[now {now}] The end of {agent.rel()}/LIFE.md:\n{tail or '(empty)'}")


def _read(agent: AgentDir, name: str, s: Settings) -> str:
    """One of the agent's own text files, which the model writes: through the one read path, so
    a link to config.json (its keys), out of the folder or into /proc is refused, and said so."""
    try:
        data = read_inside(agent.root, name, OWN_FILE_LIMIT, shown=agent.rel(agent / name),
                           refuse=secret_files(agent, s.primary_dir))
    except Refused as e:
        return f"({e})"
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")
