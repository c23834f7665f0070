"""Daemon soak: a steady stream of Telegram messages and triggers while the model server fails at
random and Telegram drops sends, for --minutes (default 10). Is anything lost or sent twice?

    .venv/bin/python bench/bench_soak.py --write      # from the repository root; --minutes N

The model is tests/fakes' server on 127.0.0.1, failing on purpose: every request has a 10%
chance of HTTP 500, 5% of a stall longer than the daemon's timeout, 5% of a connection cut
mid-answer; and every 40-80 s it goes down for 5-25 s (connection refused). It answers a turn
with "reply to #a #b ...", naming every Telegram message since the agent's previous answer.
Telegram (tests/fakes) loses every send during a 10 s outage each minute. A message arrives every
--every seconds (default 2); two triggers repeat (a clock every 5 s, a command every 7 s).
Half-way through, the daemon is killed with SIGKILL and started again.

At the end (after the failures stop and the daemon catches up) it counts: messages in; replies
out; messages never covered by a reply that reached Telegram (lost); replies that reached
Telegram more than once (duplicated); the daemon's peak RSS and CPU time (/proc, children
included). Prints markdown; --write puts it in bench/RESULTS.md between this script's markers.
"""
from __future__ import annotations

import argparse
import collections
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_core import machine, write_results  # noqa: E402
from bench.bench_daemon import cpu_seconds, rss_mb  # noqa: E402
from tests.fakes import faults  # noqa: E402
from tests.fakes.openai_server import FakeServer, json_reply, text_reply  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402

PY = sys.executable
BEGIN, END = "<!-- bench_soak:begin -->", "<!-- bench_soak:end -->"
TIMEOUT = 2.0  # the daemon's request timeout; a stall is longer
TELEGRAM_ID = re.compile(r"\[telegram (\d+)\]")


class Flaky(FakeServer):
    def __init__(self, rng: random.Random):
        super().__init__()
        self.rng = rng
        self.failing = True
        self.served = collections.Counter()

    def next_response(self, body=None):
        roll = self.rng.random()
        if self.failing and roll < 0.10:
            self.served["500"] += 1
            return json_reply({"error": {"message": "internal error"}}, status=500)
        if self.failing and roll < 0.15:
            self.served["stall"] += 1
            r = text_reply("too late")
            r.delay = TIMEOUT + 1
            return r
        if self.failing and roll < 0.20:
            self.served["cut"] += 1
            return faults.fault("reset")
        self.served["answer"] += 1
        ids = []
        for m in reversed(body["messages"][1:-1]):  # the conversation, without the LIFE tail
            if m.get("role") == "assistant" and not m.get("tool_calls"):
                break
            ids += TELEGRAM_ID.findall(str(m.get("content")))
        return text_reply("reply to " + " ".join(f"#{i}" for i in sorted(ids, key=int)) if ids else "ok")


class Daemon:
    def __init__(self, home: Path):
        self.home = home
        self.proc = self.start()
        self.peak_rss, self.cpu = 0.0, 0.0

    def start(self) -> subprocess.Popen:
        return subprocess.Popen([PY, "-m", "bantam", "daemon"], cwd=self.home, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def sample(self) -> None:
        try:
            self.peak_rss = max(self.peak_rss, rss_mb(self.proc.pid))
        except (OSError, ValueError):
            pass

    def kill_and_restart(self) -> None:
        self.cpu += cpu_seconds(self.proc.pid)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = self.start()

    def stop(self) -> None:
        self.cpu += cpu_seconds(self.proc.pid)
        self.proc.terminate()
        self.proc.wait(30)


def outages(model: Flaky, tg: FakeTelegram, rng: random.Random, stop: threading.Event) -> collections.Counter:
    seen: collections.Counter = collections.Counter()
    last_tg = time.monotonic()
    while not stop.wait(rng.uniform(40, 80)):
        model.go_down()
        seen["model down"] += 1
        stop.wait(rng.uniform(5, 25))
        model.come_back()
        if time.monotonic() - last_tg > 60:
            tg.drop_sends = True
            seen["telegram down"] += 1
            stop.wait(10)
            tg.drop_sends = False
            last_tg = time.monotonic()
    return seen


def soak(minutes: float, every: float, seed: int) -> dict:
    rng = random.Random(seed)
    with Flaky(rng) as model, FakeTelegram() as tg, tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        agent = home / "agent"
        (agent / "triggers").mkdir(parents=True)
        (agent / "config.json").write_text(json.dumps({
            "api_base": model.url, "model": "test-model", "telegram_token": tg.token,
            "telegram_chat_id": "42", "telegram_api_base": tg.url, "telegram_poll_s": 2,
            "timeout": TIMEOUT, "retry_delays": [0.5, 1], "retry_turn_s": 1, "retry_turn_max_s": 8,
            "outbox_retry_max_s": 5, "trigger_tick": 1, "heartbeat_s": 0}))
        now = time.time()
        (agent / "triggers" / "clock.json").write_text(json.dumps(
            {"next": now, "repeat_s": 5, "message": "clock tick"}))
        (agent / "triggers" / "computed.json").write_text(json.dumps(
            {"cmd": "date +%s", "repeat_s": 7}))
        daemon = Daemon(home)
        stop = threading.Event()
        chaos: dict = {}
        thread = threading.Thread(target=lambda: chaos.update(outages(model, tg, rng, stop)), daemon=True)
        thread.start()
        sent_ids: list[int] = []
        t0 = time.monotonic()
        end = t0 + minutes * 60
        killed = False
        while time.monotonic() < end:
            sent_ids.append(tg.push_text(chat_id=42, text=f"message {len(sent_ids) + 1}"))
            daemon.sample()
            if not killed and time.monotonic() > t0 + minutes * 30:
                daemon.kill_and_restart()
                killed = True
            time.sleep(every)
        stop.set()
        thread.join()
        model.failing = False
        if tg.drop_sends:
            tg.drop_sends = False
        deadline = time.monotonic() + 180  # catching up: every message answered, outbox empty
        while time.monotonic() < deadline:
            covered = {int(i) for t in tg.texts() for i in re.findall(r"#(\d+)", t)}
            if set(sent_ids) <= covered and not list((agent / "outbox").glob("*.json")):
                break
            daemon.sample()
            time.sleep(0.5)
        catch_up = time.monotonic() - end
        daemon.stop()
        texts = [t for t in tg.texts() if t.startswith("reply to")]
        covered = {int(i) for t in texts for i in re.findall(r"#(\d+)", t)}
        counts = collections.Counter(texts)
        life = (agent / "LIFE.md").read_text()
    return {"minutes": minutes, "in": len(sent_ids), "replies": len(texts),
            "lost": sorted(set(sent_ids) - covered), "duplicated": {t: n for t, n in counts.items() if n > 1},
            "rss": daemon.peak_rss, "cpu": daemon.cpu, "served": dict(model.served), "chaos": chaos,
            "retries": life.count("the turn is unanswered"), "catch_up": catch_up,
            "triggers": life.count("trigger: clock fired") + life.count("trigger: computed fired")}


def report(r: dict) -> str:
    served = ", ".join(f"{k} {v}" for k, v in sorted(r["served"].items()))
    chaos = ", ".join(f"{k} {v}x" for k, v in sorted(r["chaos"].items()))
    return "\n".join([
        f"## Daemon soak: messages, triggers and failures for {r['minutes']:g} minutes", "",
        f"`bantam daemon` with Telegram for {r['minutes']:g} min: a message every 2 s, a clock trigger "
        "every 5 s and a command trigger every 7 s, while the fake model server fails at random "
        "(10% HTTP 500, 5% stalls past the 2 s timeout, 5% cut connections, and down for 5-25 s "
        "every 40-80 s) and the fake Telegram drops every send for 10 s about once a minute; "
        "SIGKILL and restart half-way.", "",
        "Command: `.venv/bin/python bench/bench_soak.py --write`", "", f"Machine: {machine()}", "",
        "| measure | value |", "|---|---:|",
        f"| messages in | {r['in']} |", f"| replies out (reached Telegram) | {r['replies']} |",
        f"| messages never answered on Telegram (lost) | {len(r['lost'])} |",
        f"| replies delivered more than once | {len(r['duplicated'])} |",
        f"| trigger fires | {r['triggers']} |",
        f"| unanswered turns retried by the daemon | {r['retries']} |",
        f"| catching up after the failures stopped | {r['catch_up']:.0f} s |",
        f"| peak RSS | {r['rss']:.1f} MB |",
        f"| CPU time (user + system, children included) | {r['cpu']:.1f} s "
        f"({r['cpu'] / (r['minutes'] * 60) * 100:.1f}% of one core) |", "",
        f"Model server: {served}. Outages: {chaos}. There are fewer replies than messages "
        "because one reply answers every message that arrived since the previous one (the fake "
        "model names them, `reply to #a #b`); lost counts messages named in no reply that reached "
        "Telegram, duplicated counts replies Telegram received more than once.",
        *([f"Lost: {r['lost']}."] if r["lost"] else []),
        *([f"Duplicated: {r['duplicated']}."] if r["duplicated"] else [])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between messages (default 2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = ap.parse_args()
    section = report(soak(args.minutes, args.every, args.seed))
    print(section)
    if args.write:
        write_results(section, BEGIN, END)


if __name__ == "__main__":
    main()
