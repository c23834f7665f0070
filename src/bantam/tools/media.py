"""read_image and read_pdf: show a picture or a document to the model, get its answer.

Both are opt-in: `tools=shell_exec,write_file,read_image,read_pdf`. The file is checked here, then
sent in ONE tool-free side request through the session's provider, and the model's answer is the
tool result. The image or text never enters the conversation, so it is paid for once, not on every
later request. Images go out as OpenAI content parts; each provider translates them to its wire.

A failed side request (ProviderError, after the usual retries) becomes a ToolError with the cause
chained: the model hears "the model could not read x.png: 400 ... does not support images" and can
work around it, while a dead endpoint still stops the turn at the loop's own next request.
"""
from __future__ import annotations

import base64
import io
import logging
from pathlib import Path
from typing import Any

from ..errors import ProviderError, ToolError
from ..events import Usage, quiet
from ..providers.retry import with_retries
from . import Tool, ToolContext

IMAGE_LIMIT = 20 * 1024 * 1024   # bytes: OpenAI's per-image limit (others refuse sooner, as ToolErrors)
PDF_LIMIT = 100 * 1024 * 1024    # bytes of PDF we are willing to parse
PDF_TEXT_LIMIT = 100_000         # characters of extracted text the model is shown
IMAGE_QUESTION = "Describe this image in detail."
PDF_QUESTION = "Summarize this document."
IMAGE_MAGIC = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif"}
SENDABLE = ("image/png", "image/jpeg")  # what read_image sends to any provider
# Formats worth naming when refused, so the model knows what to do instead.
OTHER_TYPES = {b"GIF8": "it is a GIF", b"BM": "it is a BMP", b"II*\x00": "it is a TIFF",
               b"MM\x00*": "it is a TIFF", b"%PDF": "it is a PDF: use read_pdf"}

_PATH = {"type": "string", "description": "the file to read"}


class ReadImage(Tool):
    name = "read_image"
    description = ("Look at a PNG or JPEG image file with the vision model and return its answer "
                   "to a question about the image (by default, a detailed description).")
    parameters = {"type": "object", "required": ["path"], "properties": {
        "path": _PATH,
        "question": {"type": "string", "description": "what to find out from the image"}}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        path = args["path"]
        data = read_bytes(path, IMAGE_LIMIT, ctx)
        url = f"data:{image_type(data, path)};base64,{base64.b64encode(data).decode('ascii')}"
        parts: list[dict[str, Any]] = [{"type": "text", "text": _question(args, IMAGE_QUESTION)},
                 {"type": "image_url", "image_url": {"url": url}}]
        return ask_model(ctx, parts, path)


class ReadPdf(Tool):
    name = "read_pdf"
    description = ("Extract the text of a PDF file and return the model's answer to a question "
                   f"about it (by default, a summary). Only the first {PDF_TEXT_LIMIT} characters "
                   "of text are read; scanned pages without a text layer have no text.")
    parameters = {"type": "object", "required": ["path"], "properties": {
        "path": _PATH,
        "question": {"type": "string", "description": "what to find out from the document"}}}

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        path = args["path"]
        text = pdf_text(read_bytes(path, PDF_LIMIT, ctx), path)
        # The document first and the question last: models follow a question after a long text best.
        prompt = f"<document name={path!r}>\n{text}\n</document>\n\n{_question(args, PDF_QUESTION)}"
        return ask_model(ctx, prompt, path)


def _question(args: dict[str, Any], default: str) -> str:
    return (args.get("question") or "").strip() or default


def read_bytes(path: str, limit: int, ctx: ToolContext) -> bytes:
    """The whole file (placed by `ctx.at`: a relative `path` from the session's folder), refused
    with a clear message if it is missing, odd, empty or over `limit` (read through
    sandbox.read_for_model)."""
    from ..sandbox import read_for_model
    if not path.strip():
        raise ToolError("path is empty")
    target = ctx.at(path)
    data = read_for_model(target, path, limit + 1, tmp=ctx.tmp)  # bounded even if the file grows while we read it
    if len(data) > limit:
        raise ToolError(f"{path} is too large ({_size(target)}; the limit is {limit // 2**20} MB)")
    if not data:
        raise ToolError(f"{path} is empty")
    return data


def _size(target: Path) -> str:
    try:
        return f"{target.stat().st_size / 2**20:.1f} MB"
    except OSError:
        return "size unknown"


def sniff_image(data: bytes) -> str | None:
    """The image MIME type from the magic bytes (PNG, JPEG, GIF, WebP), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in IMAGE_MAGIC.items() if data.startswith(magic)), None)


def image_type(data: bytes, path: str) -> str:
    """A sendable MIME type from the magic bytes: a GIF renamed .png is still a GIF."""
    mime = sniff_image(data)
    if mime in SENDABLE:
        return mime
    found = next((name for magic, name in OTHER_TYPES.items() if data.startswith(magic)),
                 f"its first bytes are {data[:8]!r}")
    raise ToolError(f"{path} is not a PNG or JPEG image ({found}); only PNG and JPEG can be sent, "
                    "so convert other images to PNG first")


def pdf_text(data: bytes, path: str, limit: int = PDF_TEXT_LIMIT) -> str:
    """The text of every page under a `--- page N ---` header, cut at `limit` characters."""
    from pypdf import PdfReader  # imported only when a PDF is read
    from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError
    if b"%PDF-" not in data[:1024]:  # the header may follow a little junk, by the spec
        raise ToolError(f"{path} is not a PDF (its first bytes are {data[:8]!r})")
    _silence_pypdf_logging()
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):  # an empty user password opens many
            raise ToolError(f"{path} is encrypted with a password; it cannot be read")
        return _pages_text(reader, path, limit)
    except FileNotDecryptedError as e:
        raise ToolError(f"{path} is encrypted with a password; it cannot be read") from e
    except DependencyError as e:  # AES decryption needs the optional `cryptography` package
        raise ToolError(f"{path} cannot be decrypted: {e}") from e
    # pypdf raises its own errors for damage it recognises, and plain Python ones from deep inside
    # for damage it does not; either way the file could not be parsed.
    except (PyPdfError, ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as e:
        raise ToolError(f"{path} could not be parsed as a PDF (damaged or truncated?): "
                        f"{type(e).__name__}: {e}") from e


def _pages_text(reader: Any, path: str, limit: int) -> str:
    pages = len(reader.pages)
    if not pages:
        raise ToolError(f"{path} has no pages")
    parts: list[str] = []
    used, found = 0, False
    for number, page in enumerate(reader.pages, 1):
        text = (page.extract_text() or "").strip()
        found = found or bool(text)
        part = f"--- page {number} ---\n{text}\n"
        if used + len(part) > limit:
            room = limit - used
            parts.append(part[:room])
            parts.append(f"\n[... text cut at {limit} characters: {len(part) - room} more characters "
                         f"of page {number} and {pages - number} more page(s) of {pages} were left out]")
            break
        parts.append(part)
        used += len(part)
    if not found:
        raise ToolError(f"{path} has no extractable text ({pages} page(s); scanned images, perhaps: "
                        "convert the pages to PNG and use read_image)")
    return "".join(parts).rstrip("\n")


def _silence_pypdf_logging() -> None:
    """pypdf logs warnings ("EOF marker not found") that Python would print on stderr over the
    session's own output; a NullHandler keeps them quiet unless the application configures logging."""
    logger = logging.getLogger("pypdf")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def ask_model(ctx: ToolContext, content: str | list[dict[str, Any]], path: str) -> str:
    """One tool-free request with retries; its text is the tool result, not answer text for stdout."""
    provider = ctx.provider
    if provider is None:
        raise ToolError(f"no model is available to read {path}")
    messages = [{"role": "user", "content": content}]
    on_event = quiet(ctx.on_event)  # retries and notices still show; the answer does not stream as text

    def call() -> str:
        reply = provider.complete(messages, [], on_event)
        # A side request counts in the turn's usage as a sub-agent's does: its tokens and one
        # request, beside the conversation (how full the context is stays as it was).
        used = reply.usage or Usage()
        ctx.add_child_usage(Usage(used.prompt_tokens, used.completion_tokens, used.cached_tokens,
                                  estimated=used.estimated, requests=1, cache_write_tokens=used.cache_write_tokens))
        return (reply.message.get("content") or "").strip()
    try:
        answer = with_retries(call, on_event, ctx.cfg.retry_delays)
    except ProviderError as e:
        raise ToolError(f"the model could not read {path}: {e}") from e
    if not answer:
        raise ToolError(f"the model gave an empty answer about {path}")
    return answer
