"""The chat channel: Telegram's Bot API, long-polled. One operator, one chat (and topic).

In: `poll_forever` long-polls getUpdates and appends "[telegram <message_id>] <text>" for
messages from the configured chat (and thread); anything else is ignored and logged. Files sent
with a message are saved in inbound/. The update cursor is kept in tg_poll.offset, written after
the message is in the conversation (at-least-once). Out: `send_text` (split at chat_msg_max)
puts each piece in the outbox (outbox/<seq>.json, one file a message), which one thread sends in
order, oldest first, retrying through any outage with a delay that doubles up to
outbox_retry_max_s; a file is removed only once Telegram has acknowledged it, so every message is
sent at least once, across restarts too, and never again after its acknowledgement (only a crash
between the two sends one twice). A message Telegram refuses as bad (HTTP 400) is moved to
outbox/failed/ so the rest are not held up. `send_file` (SEND_ATTACHMENT) is sent at once, and
the tool reports a failure to the agent. The base URL is configurable, so tests talk to a local
fake Bot API server. The token is part of every URL; errors are redacted before they reach LIFE.md.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..config import Config
from ..errors import APIError, ProviderError
from ..events import Retry
from ..fsutil import atomic_write
from ..providers.http import BODY_CAP, load_httpx, make_client, read_capped, redact
from ..providers.retry import with_retries
from .settings import Settings

if TYPE_CHECKING:
    from .layout import AgentDir

# SEND_ATTACHMENT: Bot API method and field by file extension; anything else is a document
MEDIA = {**dict.fromkeys(("jpg", "jpeg", "png", "webp"), ("sendPhoto", "photo")),
         **dict.fromkeys(("ogg", "oga", "opus"), ("sendVoice", "voice")),
         **dict.fromkeys(("mp4", "mov", "webm", "mkv"), ("sendVideo", "video")),
         **dict.fromkeys(("mp3", "m4a", "wav", "flac", "aac"), ("sendAudio", "audio"))}
FILE_KINDS = ("document", "voice", "audio", "video", "animation")  # inbound files, beside photo
FILE_CAP = 50 * 1024 * 1024  # an inbound file (the Bot API serves at most 20 MB)
SEND_DELAYS = (1.0, 2.0, 5.0)  # an attachment is worth a few quick retries, not minutes of them
SEND_TIMEOUT = 30.0            # seconds for one send: a stalled server must not hold the outbox
POLL_RETRY_MAX_S = 300.0       # a getUpdates that keeps failing is tried again at least this often


class Telegram:
    def __init__(self, s: Settings, cfg: Config, agent_dir: Path | AgentDir, log: Callable[[str, str], None],
                 say: Callable[[str], None] = lambda text: None):
        self.token = s.telegram_token
        self.chat_id, self.thread_id = s.telegram_chat_id, s.telegram_thread_id
        self.api = f"{s.telegram_api_base.rstrip('/')}/bot{self.token}"
        self.files = f"{s.telegram_api_base.rstrip('/')}/file/bot{self.token}"
        self.poll_s, self.max_chars = s.telegram_poll_s, s.chat_msg_max
        self.inbound, self.offset_file = agent_dir / "inbound", agent_dir / "tg_poll.offset"
        self.log, self.say = log, say  # say: a line on the terminal, for what needs the user
        self.cfg = cfg
        self.client = make_client(cfg)
        self.outbox = Outbox(agent_dir / "outbox", self._send_queued, log, s.outbox_retry_max_s)

    # --- in ---------------------------------------------------------------------------------

    def poll_forever(self, stop: Any, deliver: Callable[[str], None]) -> None:
        """A getUpdates that keeps failing (a wrong token, Telegram down) is tried again further
        and further apart, up to POLL_RETRY_MAX_S, and said once, also on the terminal, until it
        works again: a wrong token logged every few seconds fills LIFE.md and tells nobody."""
        offset = self._read_offset()
        delay, failing = 0.0, ""
        while not stop.is_set():
            try:
                updates = with_retries(lambda: self.call("getUpdates", {
                    "offset": offset, "timeout": int(self.poll_s), "allowed_updates": ["message"]},
                    timeout=self.poll_s + 15), self._on_retry, self.cfg.retry_delays)
            except ProviderError as e:
                delay = min(max(self.poll_s, 5.0, delay * 2), POLL_RETRY_MAX_S)
                if str(e) != failing:
                    failing = str(e)
                    self._poll_failed(e)
                stop.wait(delay)
                continue
            if failing:
                self.log("telegram", "getUpdates works again")
                self.say("telegram: getUpdates works again")
                delay, failing = 0.0, ""
            for update in updates if isinstance(updates, list) else []:
                self.receive(update, deliver)
                offset = int(update.get("update_id", offset - 1)) + 1
                try:
                    atomic_write(self.offset_file, f"{offset}\n".encode(), mode=0o600)
                except OSError as e:  # the poll goes on; a restart may deliver this one again
                    self.log("telegram", f"could not save the update cursor: {e}")

    def _poll_failed(self, e: ProviderError) -> None:
        refused = isinstance(e, APIError) and e.status in (401, 404)  # the Bot API's answers to a bad token
        hint = "; check telegram_token in config.json" if refused else ""
        text = (f"getUpdates failed: {e}{hint}; no chat until it works: retrying, at most every "
                f"{POLL_RETRY_MAX_S:g} s (said again only if the error changes)")
        self.log("telegram", text)
        self.say(f"telegram: {text}")

    def receive(self, update: dict, deliver: Callable[[str], None]) -> None:
        msg = update.get("message")
        if not isinstance(msg, dict):
            return
        chat = str((msg.get("chat") or {}).get("id"))
        thread = msg.get("message_thread_id")
        if chat != self.chat_id:
            self.log("telegram", f"ignored a message from chat {chat}"
                     + (f" topic {thread}" if thread else "") + " (not the configured chat)")
            return
        if self.thread_id and str(thread) != self.thread_id:
            where = f"topic {thread}" if thread else "the general topic"
            self.log("telegram", f"ignored a message in {where} of chat {chat} (not the configured "
                                 f"topic {self.thread_id})")
            return
        text = msg.get("text") or msg.get("caption") or ""
        saved = self._download(msg)
        content = f"[telegram {msg.get('message_id')}] {text}".rstrip()
        if saved:
            content += f"\n[file received: {saved}]"
        deliver(content)
        self.log("telegram", f"in: {content}")

    def _download(self, msg: dict) -> str:
        """Save an attached file in inbound/; its path as the agent names it, or ""."""
        item = next((msg[k] for k in FILE_KINDS if isinstance(msg.get(k), dict)), None)
        if item is None and isinstance(msg.get("photo"), list) and msg["photo"]:
            item = msg["photo"][-1]  # the largest size
        if not item or not item.get("file_id"):
            return ""
        try:
            info = self.call("getFile", {"file_id": item["file_id"]})
            with self.client.stream("GET", f"{self.files}/{info['file_path']}") as response:
                response.raise_for_status()
                content = read_capped(response, FILE_CAP, "the telegram file server")
        except (ProviderError, KeyError, TypeError, load_httpx().HTTPError) as e:
            self.log("telegram", f"could not fetch a file: {redact(str(e), self.token)}")
            return ""
        name = item.get("file_name") or os.path.basename(str(info["file_path"]))
        target = self.inbound / f"{msg.get('message_id')}-{os.path.basename(name)}"
        try:
            atomic_write(target, content, mode=0o600)
        except OSError as e:  # (a full disk): the message still arrives, without its file
            self.log("telegram", f"could not save a file: {e}")
            return ""
        return os.path.relpath(target, self.inbound.parent.parent)

    def _read_offset(self) -> int:
        try:
            return int(self.offset_file.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _on_retry(self, event: Any) -> None:
        if isinstance(event, Retry):
            self.log("telegram", f"retry {event.attempt} in {event.delay:g}s: {event.message}")

    # --- out --------------------------------------------------------------------------------

    def send_text(self, text: str) -> None:
        """Queue `text` (in pieces of at most chat_msg_max) in the outbox."""
        for piece in split(text, self.max_chars):
            self.outbox.put({"method": "sendMessage", "params": {**self._target(), "text": piece}})

    def _send_queued(self, item: dict) -> None:
        self.call(str(item["method"]), dict(item["params"]), timeout=SEND_TIMEOUT)

    def send_file(self, name: str, body: bytes, caption: str = "") -> str:
        method, field = MEDIA.get(Path(name).suffix.lower().lstrip("."), ("sendDocument", "document"))
        data = {**self._target(), **({"caption": caption} if caption else {})}
        with_retries(lambda: self.call(method, data, files={field: (name, body)}),
                     self._on_retry, SEND_DELAYS)
        return method

    def _target(self) -> dict[str, Any]:
        target: dict[str, Any] = {"chat_id": self.chat_id}
        if self.thread_id:
            target["message_thread_id"] = self.thread_id
        return target

    def call(self, method: str, params: dict, files: dict | None = None,
             timeout: float | None = None) -> Any:
        """One Bot API call; ProviderError (retryable for network trouble, 429, 5xx) on failure."""
        httpx = load_httpx()
        body: dict[str, Any] = {"files": files, "data": params} if files else {"json": params}
        try:
            with self.client.stream("POST", f"{self.api}/{method}", timeout=timeout, **body) as r:
                raw = read_capped(r, BODY_CAP, "telegram")
        except httpx.HTTPError as e:
            raise ProviderError(redact(f"telegram {method}: {e or type(e).__name__}", self.token)) from None
        return self._result(method, r, raw)

    def _result(self, method: str, r: Any, raw: bytes) -> Any:
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        if r.status_code < 400 and isinstance(body, dict) and body.get("ok"):
            return body.get("result")
        description = body.get("description") if isinstance(body, dict) else None
        retry_after = ((body.get("parameters") or {}).get("retry_after")
                       if isinstance(body, dict) else None)
        shown = description or raw[:200].decode("utf-8", "replace")
        raise APIError(redact(f"telegram {method}: HTTP {r.status_code}: {shown}", self.token), status=r.status_code,
                       retryable=r.status_code == 429 or r.status_code >= 500,
                       retry_after=retry_after)

    def close(self) -> None:
        self.client.close()


class Outbox:
    """outbox/<seq>.json, sent oldest first by `send_forever`; see the module's docstring."""

    def __init__(self, folder: Path, send: Callable[[dict], None], log: Callable[[str, str], None],
                 max_delay: float):
        self.folder, self.send, self.log, self.max_delay = folder, send, log, max_delay
        self.folder.mkdir(mode=0o700, exist_ok=True)
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.last = 0

    def put(self, item: dict) -> None:
        with self.lock:  # names sort in the order messages were queued, also across restarts
            self.last = max(self.last + 1, time.time_ns())
            atomic_write(self.folder / f"{self.last:020d}.json",
                         json.dumps(item, ensure_ascii=False).encode("utf-8"), mode=0o600)
        self.wake.set()

    def waiting(self) -> list[Path]:
        return sorted(self.folder.glob("*.json"))

    def send_forever(self, stop: threading.Event) -> None:
        delay, failing_since = 0.0, 0.0
        while not stop.is_set():
            self.wake.clear()
            queued = self.waiting()
            if not queued:
                self.wake.wait(60.0)
                continue
            try:
                self.send(json.loads(queued[0].read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError) as e:  # unreadable: set it aside
                self._set_aside(queued[0], f"unreadable: {e}")
                continue
            except ProviderError as e:
                if isinstance(e, APIError) and e.status == 400:  # this message can never go
                    self._set_aside(queued[0], str(e))
                    continue
                if not failing_since:
                    failing_since = time.monotonic()
                    self.log("telegram", f"send failed: {e}; {len(queued)} message(s) wait in "
                                         "the outbox and are retried until Telegram takes them")
                delay = min(max(1.0, delay * 2, e.retry_after or 0.0), self.max_delay)
                stop.wait(delay)
                continue
            except Exception as e:  # a bug must not end the outbox: the file stays for later
                if stop.is_set():  # the client was closed under it at shutdown
                    return
                self.log("telegram", f"outbox: {type(e).__name__}: {e}")
                stop.wait(max(1.0, delay))
                continue
            queued[0].unlink(missing_ok=True)  # acknowledged: never sent again
            if failing_since:
                self.log("telegram", f"sending again after {time.monotonic() - failing_since:.0f} s "
                                     "of failures")
            delay, failing_since = 0.0, 0.0

    def _set_aside(self, path: Path, why: str) -> None:
        failed = self.folder / "failed"
        failed.mkdir(mode=0o700, exist_ok=True)
        os.replace(path, failed / path.name)
        self.log("telegram", f"outbox/{path.name} was not sent ({why}); moved to outbox/failed/")


def split(text: str, limit: int) -> list[str]:
    """Pieces of at most `limit` characters, cut at a newline where one is near."""
    pieces = []
    while len(text) > limit:
        cut = text.rfind("\n", limit // 2, limit)
        cut = cut if cut > 0 else limit
        pieces.append(text[:cut])
        text = text[cut:].lstrip("\n")
    return pieces + ([text] if text else [])
