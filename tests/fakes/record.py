"""Record what the real servers send, for the fast wire tests: `python -m tests.fakes.record`.

Starts llama-cpp-python's server on the bundled model (and litellm's proxy in front of it, when
installed), runs bantam through a recording proxy for each case, and writes
tests/fakes/recorded/NAME.json. Takes a few minutes on two cores.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.fakes.real_servers import (LITELLM_KEY, Recorder, litellm_executable, start_litellm,
                                      start_llama_server)

TASK = "Run the shell command `echo bantam-was-here` and tell me what it printed."
FORCED = '{"type": "function", "function": {"name": "shell_exec"}}'
TOOL = {"type": "function", "function": {"name": "shell_exec", "description": "run a command",
                                         "parameters": {"type": "object", "required": ["command"],
                                                        "properties": {"command": {"type": "string"}}}}}


def bantam(work: Path, endpoint: str, *settings: str, key: str = "") -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "bantam", "-p", TASK, "--endpoint", endpoint, "--model", "smollm2",
            "--set", "tools=shell_exec", "--set", "temperature=0", "--set", "retry_delays=0",
            "--set", "max_al_iterations=2", "--set", "max_tokens=48"]
    for s in settings:
        args += ["--set", s]
    env = {**os.environ, "HOME": str(work), "OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key}
    result = subprocess.run(args, cwd=work, capture_output=True, text=True, env=env, timeout=1200)
    print(result.stderr[-2000:], flush=True)
    return result


def post(recorder: Recorder, path: str, body: dict, headers: dict | None = None) -> None:
    recorder.forward("POST", path, {"Content-Type": "application/json", **(headers or {})},
                     json.dumps(body).encode())


def record_llama(work: Path, base: str) -> None:
    cases = {"llama_json_tools": ("stream=false", "tool_choice=auto"),
             "llama_stream_tools": ("stream=true", f"tool_choice={FORCED}")}
    for name, settings in cases.items():
        recorder = Recorder(base)
        bantam(work, recorder.base + "/v1", *settings)
        print(name, "->", recorder.save(name))
        recorder.close()
    recorder = Recorder(base)
    step = [{"role": "user", "content": "run echo hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "shell_exec", "arguments": '{"command": "echo hi"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "hi\n\nexit: 0"}]
    post(recorder, "/v1/chat/completions", {"model": "smollm2", "messages": step, "tools": [TOOL],
                                            "max_tokens": 8})  # the 500 that `null` content gets
    post(recorder, "/v1/chat/completions", {"model": "smollm2", "max_tokens": 8,
                                            "messages": [{"role": "user", "content": "word " * 5000}]})
    print("llama_refusals ->", recorder.save("llama_refusals"))
    recorder.close()


def record_litellm(work: Path, base: str) -> None:
    cases = {"litellm_anthropic_stream_tools": ("provider=anthropic", "stream=true", f"tool_choice={{\"type\": \"tool\", \"name\": \"shell_exec\"}}"),
             "litellm_anthropic_json_tools": ("provider=anthropic", "stream=false", "tool_choice={\"type\": \"auto\"}"),
             "litellm_openai_stream_tools": ("provider=openai", "stream=true", f"tool_choice={FORCED}")}
    for name, settings in cases.items():
        recorder = Recorder(base)
        bantam(work, recorder.base + "/v1", *settings, key=LITELLM_KEY)
        print(name, "->", recorder.save(name))
        recorder.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        llama = start_llama_server(work)
        try:
            record_llama(work, llama.base)
            if litellm_executable() and "--no-litellm" not in sys.argv:
                proxy = start_litellm(work, llama.base + "/v1")
                try:
                    record_litellm(work, proxy.base)
                finally:
                    proxy.stop()
        finally:
            llama.stop()


if __name__ == "__main__":
    main()
