"""write_file: overwrite a file, or splice bytes into it (seed 001's semantics)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ToolError
from ..fsutil import atomic_write
from ..sanitize import bidi_note


class WriteFile:
    name = "write_file"
    raw_arguments = ("content",)  # file content is data: written byte for byte
    description = (
        "Write a file. With neither offset nor del_bytes, the whole file is replaced by content "
        "(parent directories are created). With offset and/or del_bytes, del_bytes bytes at byte "
        "offset are replaced by content (prefix + content + suffix); offset defaults to 0 and "
        "del_bytes to 0, so content alone at an offset is an insertion.")
    parameters = {
        "type": "object", "required": ["path", "content"],
        "properties": {
            "path": {"type": "string", "description": "file to write"},
            "content": {"type": "string", "description": "text to write (may be empty)"},
            "offset": {"type": "integer", "description": "byte offset where the splice starts"},
            "del_bytes": {"type": "integer", "description": "bytes to delete at offset first"},
        },
    }

    def run(self, args: dict[str, Any], ctx: Any = None) -> str:
        if ctx is not None:
            from ..approval import check_write
            check_write(ctx.cfg, ctx.approvals, args["path"])
        return write_file(args["path"], args["content"], args.get("offset"), args.get("del_bytes"))


def write_file(path: str, content: str, offset: int | None = None, del_bytes: int | None = None) -> str:
    target = Path(path).expanduser()
    if not path.strip():
        raise ToolError("path is empty")
    if target.is_dir():
        raise ToolError(f"{path} is a directory")
    data = content.encode("utf-8")
    try:
        if offset is None and del_bytes is None:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data)
            return f"wrote {len(data)} bytes to {path}{bidi_note(content)}"
        new, deleted = splice(_read(target), offset or 0, del_bytes or 0, data, path)
        target.parent.mkdir(parents=True, exist_ok=True)  # only once the splice is known to be valid
        atomic_write(target, new)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e.strerror or e}") from e
    return (f"wrote {len(data)} bytes at offset {offset or 0} of {path} (deleted {deleted}); "
            f"the file is now {len(new)} bytes{bidi_note(content)}")


def _read(target: Path) -> bytes:
    try:
        return target.read_bytes()
    except FileNotFoundError:
        return b""


def splice(old: bytes, offset: int, del_bytes: int, data: bytes, path: str) -> tuple[bytes, int]:
    """prefix + data + suffix; returns the new bytes and how many bytes were deleted."""
    if offset < 0 or del_bytes < 0:
        raise ToolError("offset and del_bytes must not be negative")
    if offset > len(old):
        raise ToolError(f"offset {offset} is past the end of {path} ({len(old)} bytes)")
    deleted = min(del_bytes, len(old) - offset)
    new = old[:offset] + data + old[offset + deleted:]
    if _is_utf8(old) and not _is_utf8(new):
        raise ToolError(f"offset {offset} / del_bytes {del_bytes} would split a multi-byte "
                        f"character in {path}; offsets count bytes, not characters")
    return new, deleted


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
