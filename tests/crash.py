"""Crash safety: kill bantam with SIGKILL at random moments, then check that every file it owns
still loads and that resuming finishes the work. Seeded, so a failure can be replayed.

`crash_trials(kills, seed, directory)` returns (kills survived, problems); the test asserts no
problems, `python -m tests.reliability_report` counts them for docs/reliability.md.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from bantam.fsutil import JsonlLog
from bantam.tools.subagent import CHILD_NOTE
from tests.fakes.openai_server import FakeServer, text_reply, tool_reply

STEPS = 12  # tool steps each conversation takes before its answer


class Worker(FakeServer):
    """Answers from the request alone, so a resumed run picks up where the last one stopped: a
    tool call until the conversation holds STEPS results, then the answer. Each answer is slowed a
    little so kills land in every phase (waiting, streaming, running a tool, writing files)."""

    def next_response(self, body=None):
        time.sleep(0.02)
        messages = body["messages"]
        done = sum(m.get("role") == "tool" for m in messages)
        child = CHILD_NOTE in str(messages[0].get("content", ""))
        if done >= STEPS:
            return text_reply("child finished\nSTATUS: success" if child else "all steps done")
        if not child and done == 2 and "spawn_agent" in json.dumps(body.get("tools", [])):
            return tool_reply("spawn_agent", {"task": "count to twelve", "persistence": "durable"},
                              call_id=f"spawn_{done}")
        who = "child" if child else "parent"
        return tool_reply("shell_exec", {"command": f"echo {who} {done} >> steps.log"}, call_id=f"call_{done}")


def env_for(directory: Path) -> dict[str, str]:
    """HOME is the scenario's own, and with no XDG_CONFIG_HOME the user's file is the one under it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "BANTAM_", "AGENT_")) and k != "XDG_CONFIG_HOME"}
    return {**env, "HOME": str(directory / "home"), "NO_COLOR": "1"}


def configure(work: Path, url: str, tools: str) -> None:
    """The project's file names the server; the tools are the user's choice, in the user's own
    file: a project file the user has not trusted may narrow the tools, never add spawn_agent."""
    (work / ".bantam.cfg").write_text(f"endpoint={url}\nmodel=test-model\nretry_delays=0\n")
    user = work / "home" / ".config" / "bantam" / "config"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(f"tools={tools}\n")


def spawned(records: list[dict]) -> bool:
    """Did the conversation call spawn_agent?"""
    return any((c.get("function") or {}).get("name") == "spawn_agent"
               for m in records for c in m.get("tool_calls") or [])


def check_files(directory: Path) -> list[str]:
    """Every file bantam owns must load: thread logs (their torn tail healed), JSON documents."""
    problems = []
    for path in (directory / "home" / ".bantam").rglob("*"):
        if not path.is_file() or path.name.endswith(".tmp"):
            continue
        try:
            if path.suffix == ".jsonl":
                records = JsonlLog(path).read()
                problems += [f"{path.name}: {p}" for p in conversation_problems(records)]
            elif path.suffix == ".json":
                json.loads(path.read_text())
        except (ValueError, OSError) as e:
            problems.append(f"{path}: {e}")
    return problems


def conversation_problems(records: list[dict]) -> list[str]:
    """Complete steps only: every tool call answered by the results right after it, except a
    last step saved before its calls ran (a durable sub-agent's: resume runs that saved call)."""
    problems = []
    for i, m in enumerate(records):
        calls = [c["id"] for c in m.get("tool_calls") or []]
        if calls and i < len(records) - 1:
            answered = [r.get("tool_call_id") for r in records[i + 1:i + 1 + len(calls)]]
            if answered != calls:
                problems.append(f"message {i}: calls {calls} answered by {answered}")
    return problems


def crash_trials(kills: int, seed: int, directory: Path) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    survived, problems = 0, []
    with Worker() as server:
        scenario = 0
        while survived < kills and not problems:
            scenario += 1
            work = directory / f"s{scenario}"
            (work / "home").mkdir(parents=True)
            with_child = bool(scenario % 2)  # every other scenario spawns a durable sub-agent
            configure(work, server.url, "shell_exec,write_file,spawn_agent" if with_child else "shell_exec,write_file")
            args = ["--thread", "job", "-p", "do the twelve steps"]
            for _ in range(rng.randint(2, 6)):
                proc = subprocess.Popen([sys.executable, "-m", "bantam", *args], cwd=work, env=env_for(work),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0.05, 1.2))
                finished = proc.poll() is not None
                if not finished:
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                survived += not finished
                problems += [f"scenario {scenario}: {p}" for p in check_files(work)]
                thread = work / "home" / ".bantam" / "threads" / "job.jsonl"
                if JsonlLog(thread).read():  # the request reached the disk: from now on, resume
                    args = ["--thread", "job"]
                if finished or problems or survived >= kills:
                    break
            final = subprocess.run([sys.executable, "-m", "bantam", *args], cwd=work, env=env_for(work),
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
            history = JsonlLog(work / "home" / ".bantam" / "threads" / "job.jsonl").read()
            if final.returncode not in (0, 2) or history[-1].get("content") != "all steps done":
                problems.append(f"scenario {scenario}: resume ended with exit {final.returncode}, last "
                                f"message {history[-1] if history else None}: {final.stderr[-300:]}")
            elif spawned(history) != with_child:
                problems.append(f"scenario {scenario}: spawn_agent "
                                + ("never called" if with_child else "called though not offered"))
    return survived, problems
