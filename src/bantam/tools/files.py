"""File tools: write_file (always on; it splices: offset and del_bytes) and the opt-in read_file,
edit_file and list_files. Relative paths are from the session's folder (`ToolContext.folder`,
never the process's); the daemon calls the same functions with its agent's home as the base.

In a context with a workspace (a controlled run's tools), paths are relative to its root and
confined to it: read_file gives the whole text (clipped at the workspace's output limit, with the
facts a run keeps as evidence), list_files lists from the root, write_file writes only the
workspace's write_paths, whole files, atomically.

Every change to a file goes through fsutil's `Boundary.write`, with the boundary approval's
`check_write` returns (the sandbox's writable roots, less the protected names at any depth), so
write_file and edit_file, here and in the daemon, obey the same rules and cannot be raced.

In an editor (`bantam acp`) whose client offers it, the front end's `buffers` carry the model's
reads and writes to the editor instead (`Buffers`): the same checks are made first, then the
editor reads its buffer (unsaved changes included) or writes the file and shows the change."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import Refused, ToolError
from ..fsutil import ANYWHERE, Boundary, Change, open_confined, read_up_to
from ..sanitize import bidi_note
from . import Outcome, Tool, ToolContext
from .workspace import Workspace, sha256


class WriteFile(Tool):
    name = "write_file"
    raw_arguments = ("content",)  # file content is data: written byte for byte
    description = ("Write content to a file, replacing it whole (folders are made). Only to change part "
                   "of it: del_bytes bytes at byte offset become content (each defaults to 0).")
    parameters = {"type": "object", "required": ["path", "content"],
                  "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                                 "offset": {"type": "integer"}, "del_bytes": {"type": "integer"}}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str | Outcome:
        if ctx.front.workspace is not None:
            return write_in(ctx.front.workspace, args["path"], args.get("content", ""))
        target = str(_path(args, ctx))
        return write_file(args["path"], args["content"], args.get("offset"), args.get("del_bytes"),
                          boundary=allowed(ctx, args["path"]), target=target, buffers=_buffers(ctx))


@dataclass(frozen=True)
class Buffers:
    """An editor's view of the files (ACP's fs/read_text_file and fs/write_text_file), given the
    absolute path: read_file reads what the editor shows, unsaved changes included; write_file
    and edit_file write through it, so the editor shows the change in its buffer. A side that is
    None stays on the disk. Each raises ToolError when the editor cannot. Bantam checks every path
    first, exactly as for a read or write of its own."""
    read: Callable[[Path], str] | None = None
    write: Callable[[Path, str], None] | None = None


def _buffers(ctx: ToolContext) -> Buffers | None:
    return ctx.front.buffers if ctx.front.workspace is None else None


def change_file(boundary: Boundary, target: str | os.PathLike, change: Change, shown: str,
                buffers: Buffers | None = None) -> bytes:
    """`boundary.write(target, change)`, or through the editor when it takes writes: the path is
    checked the same way first, and the old text is the editor's. A new folder, or content that
    is not text, is written on the disk (the protocol writes text into existing folders)."""
    if buffers is None or buffers.write is None:
        return boundary.write(target, change)
    real = boundary.target(target)
    if not real.parent.is_dir():
        return boundary.write(target, change)
    if callable(change):
        change = change(_current(real, shown, buffers) if real.exists() else None)
    try:
        text = change.decode("utf-8")
    except UnicodeDecodeError:
        return boundary.write(target, change)
    buffers.write(real, text)
    return change


def _current(path: Path, shown: str, buffers: Buffers) -> bytes:
    """A file's content as the editor has it (unsaved changes included), else as on the disk."""
    if buffers.read is not None:
        try:
            return buffers.read(path).encode("utf-8")
        except ToolError:  # not text to the editor (a binary file): the file as it is on the disk
            pass
    return read_bytes(path, shown)


def allowed(ctx: ToolContext, path: str) -> Boundary:
    """The boundary a model's write or edit of `path` (placed in the session's folder) is made in,
    once the sandbox and the approvals let it go ahead (ToolError when not)."""
    if not str(path).strip():
        raise ToolError("path is empty")
    from ..approval import check_write
    # asked as the model wrote it (~/.bashrc), unless it lands elsewhere: relative, in the session's
    # folder; below /tmp, in the session's /tmp
    where = ctx.at(path)
    asked = path if Path(path).expanduser() == where else str(where)
    boundary = check_write(ctx.cfg, ctx.approvals, asked, cwd=ctx.folder, tmp=ctx.tmp)
    return replace(boundary, guarded=(*boundary.guarded, *ctx.front.guarded)) if ctx.front.guarded else boundary


def write_file(path: str, content: str, offset: int | None = None, del_bytes: int | None = None, *,
               boundary: Boundary = ANYWHERE, target: str | None = None, buffers: Buffers | None = None) -> str:
    """The whole file, or a splice of it (offset, del_bytes), written within `boundary` at
    `target` (the path placed in the session's folder; default `path`, which the result names),
    through the editor's `buffers` when given."""
    if not path.strip():
        raise ToolError("path is empty")
    data = content.encode("utf-8")
    whole = offset is None and del_bytes is None
    deleted = [0]

    def spliced(old: bytes | None) -> bytes:  # run on the file as opened for the write
        new, deleted[0] = splice(old or b"", offset or 0, del_bytes or 0, data, path)
        return new
    try:
        new = change_file(boundary, target or path, data if whole else spliced, path, buffers)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e.strerror or e}") from e
    if whole:
        return f"wrote {len(data)} bytes to {path}{bidi_note(content)}"
    return (f"wrote {len(data)} bytes at offset {offset or 0} of {path} (deleted {deleted[0]}); "
            f"the file is now {len(new)} bytes{bidi_note(content)}")


def write_in(ws: Workspace, path: str, content: str) -> Outcome:
    """A whole file of the workspace's write_paths, atomically (the run's gates already asked).
    The write walks the path as written and refuses any link on it, even one made after the check."""
    real = ws.writable(path)
    data = content.encode("utf-8")
    root = ws.root.resolve()
    Boundary((root,), resolve=False, where=str(root)).write(root / ws.relative(real), data)
    return Outcome(f"wrote {len(data)} bytes to {ws.relative(real)}", facts={"sha256": sha256(data), "bytes": len(data)})


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


READ_LIMIT = 50 * 1024 * 1024  # bytes read_file reads at most
READ_LINES = 2000              # lines read_file shows by default
LIST_LIMIT = 500               # entries list_files shows


def _path(args: dict[str, Any], ctx: ToolContext) -> Path:
    """The path argument, placed in the session's folder (ToolContext.at)."""
    if not str(args.get("path", "")).strip():
        raise ToolError("path is empty")
    return ctx.at(args["path"])


class ReadFile(Tool):
    name = "read_file"
    description = ("Read a text file as numbered lines (offset: first line, from 1; limit: how many "
                   f"lines, default {READ_LINES}).")
    parameters = {
        "type": "object", "required": ["path"],
        "properties": {
            "path": {"type": "string", "description": "file to read"},
            "offset": {"type": "integer", "description": "first line, from 1"},
            "limit": {"type": "integer", "description": "how many lines"},
        },
    }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str | Outcome:
        if ctx.front.workspace is not None:
            return read_in(ctx.front.workspace, args["path"])
        path, buffers = _path(args, ctx), _buffers(ctx)
        secret, tmp = ctx.front.secret, ctx.tmp
        if buffers is not None and buffers.read is not None:
            read_bytes(path, args["path"], 0, secret, tmp)  # checked as a read from the disk, before the editor is asked
            data = buffers.read(path).encode("utf-8")[:READ_LIMIT]
        else:
            data = read_bytes(path, args["path"], refuse=secret, tmp=tmp)
        return numbered_lines(data, args["path"], args.get("offset"), args.get("limit"))


def read_in(ws: Workspace, path: str) -> Outcome:
    """A workspace file's whole text, clipped at the output limit (then not a full read)."""
    ws.regular_file(path)
    with os.fdopen(open_confined(ws.root.resolve(), path), "rb") as f:
        data = read_up_to(f, READ_LIMIT)
    if b"\0" in data[:8192]:
        raise Refused(f"{path}: not a text file")
    text, clipped = ws.clip(data)
    return Outcome(text, clipped=clipped, facts={"sha256": sha256(data), "bytes": len(data), "full_read": not clipped})


def read_bytes(path: Path, shown_as: str, limit: int = READ_LIMIT, refuse: Iterable[Path] = (),
               tmp: Path | None = None) -> bytes:
    """The model's read of `path` (ToolError when refused: sandbox.read_for_model)."""
    from ..sandbox import read_for_model
    return read_for_model(path, shown_as, limit, refuse, tmp)


def numbered_lines(data: bytes, shown_as: str, offset: int | None = None, limit: int | None = None) -> str:
    """`data` as numbered lines from `offset`, at most `limit` of them, saying what is left out."""
    if b"\0" in data[:8192]:
        raise ToolError(f"{shown_as} is a binary file ({len(data)} bytes); inspect it with a shell command")
    lines = data.decode("utf-8", "replace").splitlines()
    start = max(1, int(offset or 1))
    count = max(1, int(limit or READ_LINES))
    shown = lines[start - 1:start - 1 + count]
    text = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(shown, start))
    end = start + len(shown) - 1
    if start > 1 or end < len(lines):
        text += f"\n[lines {start}-{end} of {len(lines)}" + \
            (f"; more with offset={end + 1}]" if end < len(lines) else "]")
    return text or "(empty file)"


class EditFile(Tool):
    name = "edit_file"
    # file content is data both ways: the text to find as the file has it (CRLF, a zero-width
    # joiner), the replacement written byte for byte
    raw_arguments = ("old_string", "new_string")
    description = ("Replace old_string by new_string in a file. old_string must be unique in the file "
                   "unless replace_all is set.")
    parameters = {
        "type": "object", "required": ["path", "old_string", "new_string"],
        "properties": {
            "path": {"type": "string", "description": "file to edit"},
            "old_string": {"type": "string", "description": "exact text to find"},
            "new_string": {"type": "string", "description": "its replacement"},
            "replace_all": {"type": "boolean", "description": "replace every occurrence"},
        },
    }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.front.workspace is not None:  # a controlled run writes whole files only
            raise Refused("edit_file is not offered in a controlled run's workspace; use write_file")
        path = _path(args, ctx)
        return edit_file(path, args["path"], args["old_string"], args["new_string"],
                         bool(args.get("replace_all")), boundary=allowed(ctx, args["path"]), buffers=_buffers(ctx))


def edit_file(path: Path, shown_as: str, old: str, new: str, replace_all: bool = False, *,
              boundary: Boundary = ANYWHERE, buffers: Buffers | None = None) -> str:
    """Replace `old` by `new` in the file, written within `boundary` (like write_file)."""
    count = [0]

    def edited(data: bytes | None) -> bytes:  # run on the file as opened for the write
        if data is None:
            raise ToolError(f"cannot read {shown_as}: No such file or directory")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ToolError(f"cannot read {shown_as}: {e}") from e
        count[0] = text.count(old) if old else 0
        if count[0] == 0:
            raise ToolError(f"old_string was not found in {shown_as}" if old else "old_string is empty")
        if count[0] > 1 and not replace_all:
            raise ToolError(f"old_string occurs {count[0]} times in {shown_as}: add context to make it "
                            "unique, or set replace_all")
        return text.replace(old, new).encode("utf-8")
    try:
        change_file(boundary, path, edited, shown_as, buffers)
    except OSError as e:
        raise ToolError(f"cannot edit {shown_as}: {e.strerror or e}") from e
    return f"replaced {count[0] if replace_all else 1} occurrence(s) in {shown_as}{bidi_note(new)}"


class ListFiles(Tool):
    name = "list_files"
    description = f"List the files under a directory (default: the project's), with sizes; at most {LIST_LIMIT}."
    parameters = {"type": "object", "properties": {"path": {"type": "string", "description": "directory"}}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str | Outcome:
        if ctx.front.workspace is not None:
            return list_in(ctx.front.workspace, args.get("path") or ".")
        base = _path({"path": args.get("path") or "."}, ctx)
        left_out = self._own_folders(base, args.get("path") or ".", ctx.tmp)
        if base.is_file():
            return f"{args.get('path')} ({base.stat().st_size} bytes)"
        if not base.is_dir():
            raise ToolError(f"{args.get('path')}: no such directory")
        found = listing(base, base, hidden=False)
        lines = [line for line in found if not line.startswith(left_out)]
        if len(found) > LIST_LIMIT:
            return "\n".join(lines[:LIST_LIMIT]) + f"\n[more than {LIST_LIMIT} files; list a subdirectory]"
        return "\n".join(lines) or "(no files)"

    @staticmethod
    def _own_folders(base: Path, shown: str, tmp: Path | None) -> tuple[str, ...]:
        """The folders of bantam's own (fsutil.guarded_dirs) below `base`, as the listing's line
        prefixes to leave out; ToolError (one line) when `base` leads into one, by any link: their
        names and sizes are bantam's, as read_file and commands keep their contents. Clipped tool
        output, which the model is pointed to, and the session's `tmp` stay listable."""
        from ..sandbox import guarded_dirs, readable_own
        real = Path(os.path.realpath(base))
        if any(real.is_relative_to(p) for p in readable_own(tmp)):
            return ()
        for own in guarded_dirs():
            if real.is_relative_to(own):
                raise ToolError(f"not listed: {shown} leads into {own}, bantam's own files (keys and settings)")
        return tuple(f"{own.relative_to(real).as_posix()}/" for own in guarded_dirs() if own.is_relative_to(real))


def listing(base: Path, shown_from: Path, hidden: bool, most: int | None = LIST_LIMIT) -> list[str]:
    """The files under `base` with sizes (links as links), relative to `shown_from`, sorted; past
    `most`, one more and no further, so a caller can say there are more."""
    lines: list[str] = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if (hidden or not d.startswith(".")) and d != "__pycache__")
        for name in sorted(files):
            full = Path(folder, name)
            rel = full.relative_to(shown_from).as_posix()
            lines.append(f"{rel} -> (symlink)" if full.is_symlink() else f"{rel} ({full.lstat().st_size} bytes)")
            if most is not None and len(lines) > most:
                return lines
    return lines


def list_in(ws: Workspace, path: str) -> Outcome:
    """The files under a workspace folder, shown from the workspace's root (a file lists itself)."""
    base = ws.locate(path, existing=True)
    if base.is_file():  # like `ls FILE`: the file itself
        return Outcome(f"{ws.relative(base)} ({base.stat().st_size} bytes)", facts={"files": 1})
    lines = listing(base, ws.root.resolve(), hidden=True, most=None)  # all counted: the run's evidence
    text, clipped = ws.clip("\n".join(lines[:LIST_LIMIT]).encode() or b"(no files)")
    return Outcome(text, clipped=clipped or len(lines) > LIST_LIMIT, facts={"files": len(lines)})
