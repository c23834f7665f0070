"""The evaluated KV state of a conversation's fixed prefix, saved on disk between processes.

Every conversation starts with the same system prompt and tool list: a few hundred tokens that a
small CPU model needs about half a second to read. Within one process the KV cache keeps them; a
new process (every one-shot `bantam -p`) would read them again. So the state of llama.cpp's
sequence 0 right after the prefix is saved under `~/.bantam/cache/kv/`, named by a hash of
everything that decides it (model file, context size, the KV cache's type, llama.cpp version, the
prefix's tokens), and loaded at the next start instead of evaluating the prefix. Its size is the
cache's per token (12 KB for SmolLM2-135M in q8_0, local.CACHE_TYPES) times the prefix's tokens; it
is mapped into memory, and llama.cpp copies it from there.

Files are written atomically, checked on load (magic, the token list itself), bounded in number
and total size (oldest used first out), and any that cannot be read or applied is ignored with a
notice: the prefix is then simply evaluated as it would be without this cache.
"""
from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import struct
from array import array
from pathlib import Path
from typing import Any

from ..fsutil import atomic_write, bantam_home, private_dir

MAGIC = b"BKV1"
MAX_FILES = 16
MAX_BYTES = 512 * 1024 * 1024
MIN_PREFIX = 32   # a prefix shorter than this is read faster than a file


def directory() -> Path:
    return bantam_home() / "cache" / "kv"


def key(model: Path, n_ctx: int, prefix: list[int], cache_type: str = "f16") -> str:
    """`cache_type`: the KV cache's element types (a state saved as one is no use to another)."""
    import llama_cpp
    st = model.stat()
    head = f"{model.resolve()}:{st.st_size}:{st.st_mtime_ns}:{n_ctx}:{cache_type}:{llama_cpp.__version__}:"
    return hashlib.sha256(head.encode() + array("i", prefix).tobytes()).hexdigest()[:40]


def restore(llama: Any, path: Path, prefix: list[int]) -> bool:
    """Load the saved state of `prefix` into sequence 0 of a context; False if there is none.
    Raises OSError or ValueError when a file exists but cannot be used."""
    import llama_cpp
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return False
    n = len(prefix)
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise ValueError(f"{path} is not a saved prefix state of this prompt")
        # Mapped, not read: llama.cpp copies the state straight from the page cache (a 31 MB file
        # read into a buffer first took 27-36 ms, mapped 13-21, on a busy 2-core machine). A
        # private, copy-on-write mapping, only to hand ctypes a writable buffer: nothing writes.
        # The file is replaced whole (atomic_write), never cut in place, so it cannot shrink under
        # the mapping.
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    try:
        if data[:4] != MAGIC or struct.unpack("<I", data[4:8])[0] != n:
            raise ValueError(f"{path} is not a saved prefix state of this prompt")
        if array("i", data[8: 8 + 4 * n]).tolist() != prefix:
            raise ValueError(f"{path} holds another prompt")
        start = 8 + 4 * n
        state = size - start
        llama.reset()
        llama._ctx.kv_cache_seq_rm(-1, 0, -1)
        buffer = (ctypes.c_uint8 * state).from_buffer(data, start)  # a view: the state is not copied again
        try:
            accepted = llama_cpp.llama_state_seq_set_data(llama.ctx, buffer, state, 0) == state
        finally:
            del buffer  # the mapping closes only without views of it
        if not accepted:
            llama._ctx.kv_cache_seq_rm(-1, 0, -1)
            raise ValueError(f"llama.cpp refused the saved state in {path}")
    finally:
        data.close()
    llama.input_ids[:n] = prefix
    llama.n_tokens = n
    if hasattr(llama, "_requires_eval"):
        llama._requires_eval = True
    os.utime(path)  # recently used: last to be evicted
    return True


def save(llama: Any, path: Path, prefix: list[int]) -> None:
    """Evaluate `prefix` from an empty context and save sequence 0's state to `path`."""
    llama.reset()
    llama.eval(prefix)
    state = sequence_state(llama)
    if not state:
        return
    private_dir(path.parent)
    body = MAGIC + struct.pack("<I", len(prefix)) + array("i", prefix).tobytes() + state
    atomic_write(path, body, mode=0o600)
    _evict(path.parent)


def sequence_state(llama: Any) -> bytes:
    """llama.cpp's state of sequence 0 (its KV cells), as llama_state_seq_set_data takes it back."""
    import llama_cpp
    size = llama_cpp.llama_state_seq_get_size(llama.ctx, 0)
    buffer = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(llama.ctx, buffer, size, 0)
    return bytes(buffer)[:written]


def _evict(folder: Path) -> None:
    """Keep at most MAX_FILES files and MAX_BYTES in all; the least recently used go first."""
    files = []
    for entry in os.scandir(folder):
        if entry.name.endswith(".kv") and entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            files.append((st.st_mtime, st.st_size, entry.path))
    files.sort(reverse=True)
    total = 0
    for i, (_, size, name) in enumerate(files):
        total += size
        if i >= MAX_FILES or total > MAX_BYTES:
            try:
                os.unlink(name)
            except OSError:
                pass
