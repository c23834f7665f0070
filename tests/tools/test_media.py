"""read_image and read_pdf: real files in a temporary directory, a real local server as the model."""
from __future__ import annotations

import base64
import io
import json
import os
import struct
import zlib
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from bantam import config, loop
from bantam.config import Config
from bantam.errors import APIError, ToolError
from bantam.events import Retry, Text
from bantam.providers.openai import OpenAIProvider
from bantam.tools import ToolContext, make_toolbox
from bantam.tools.media import IMAGE_LIMIT, PDF_TEXT_LIMIT, ReadImage, ReadPdf
from tests.conftest import base_cfg, run_bantam, write_cfg
from tests.fakes.openai_server import json_reply, text_reply, tool_reply


# --- real files, built from the standard library -------------------------------------------------

def png_bytes(width: int = 2, height: int = 2) -> bytes:
    """A real, decodable RGB PNG: signature, IHDR, zlib-compressed IDAT, IEND, each with its CRC."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))  # filter 0, red pixels
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


# A JPEG header (SOI, JFIF APP0 segment), some bytes, EOI: what the magic-byte check looks at.
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + bytes(range(64)) + b"\xff\xd9"


def pdf_bytes(pages: list[str]) -> bytes:
    """A minimal valid PDF written by hand: one Helvetica text line per page and an exact xref."""
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode()]
    font = 3 + 2 * n
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode() if text else b""
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def encrypted_pdf(user_password: str) -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(pdf_bytes(["Top secret plans"])))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --- helpers -------------------------------------------------------------------------------------

def context(server, events: list | None = None, **cfg_values) -> ToolContext:
    cfg = Config(endpoint=server.url, model="test-model", retry_delays=(0, 0), **cfg_values)
    return ToolContext(cfg, OpenAIProvider(cfg), "SYSTEM", (events if events is not None else []).append)


def side_request(server, index: int = 0) -> dict:
    return server.chat_requests()[index].body


# --- the real files are what they claim to be ----------------------------------------------------

def test_fixtures_are_real_files():
    png = png_bytes(3, 2)
    assert struct.unpack(">II", png[16:24]) == (3, 2)
    rows = zlib.decompress(png[41:41 + struct.unpack(">I", png[33:37])[0]])
    assert len(rows) == 2 * (1 + 3 * 3)
    reader = PdfReader(io.BytesIO(pdf_bytes(["Hello from page one", "Second page"])))
    assert [p.extract_text() for p in reader.pages] == ["Hello from page one", "Second page"]


# --- read_image ------------------------------------------------------------------------------------

def test_read_image_sends_one_tool_free_request_with_the_png(server, home):
    png = png_bytes()
    Path("pic.png").write_bytes(png)
    server.add(text_reply("A small red square."))
    events: list = []
    answer = ReadImage().run({"path": "pic.png"}, context(server, events))
    assert answer == "A small red square."
    body = side_request(server)
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Describe this image in detail."},
        {"type": "image_url", "image_url": {"url": url}}]}]
    assert "tools" not in body and len(server.chat_requests()) == 1
    assert not [e for e in events if isinstance(e, Text)]  # the side answer is a result, not stdout text


def test_read_image_jpeg_by_magic_bytes_with_a_question(server, home):
    Path("photo.png").write_bytes(JPEG)  # the extension lies; the bytes decide
    server.add(text_reply("Two cats."))
    answer = ReadImage().run({"path": "photo.png", "question": "How many cats?"}, context(server, []))
    assert answer == "Two cats."
    text, image = side_request(server)["messages"][0]["content"]
    assert text == {"type": "text", "text": "How many cats?"}
    assert image["image_url"]["url"] == "data:image/jpeg;base64," + base64.b64encode(JPEG).decode()


def test_read_image_retries_a_failed_request(server, home):
    Path("pic.png").write_bytes(png_bytes())
    server.add(json_reply({"error": {"message": "overloaded"}}, status=503), text_reply("Red."))
    events: list = []
    assert ReadImage().run({"path": "pic.png"}, context(server, events)) == "Red."
    assert len(server.chat_requests()) == 2
    assert [e for e in events if isinstance(e, Retry)]  # retries still show, as for any request


def test_api_error_becomes_a_tool_error_with_its_cause(server, home):
    Path("pic.png").write_bytes(png_bytes())
    server.add(json_reply({"error": {"message": "this model does not support image input"}}, status=400))
    box = make_toolbox(("read_image",), context(server, []))
    outcome = box.execute("read_image", json.dumps({"path": "pic.png"}))
    assert outcome.is_error
    assert outcome.content.startswith("error: the model could not read pic.png:")
    assert "does not support image input" in outcome.content
    assert isinstance(outcome.error, ToolError) and isinstance(outcome.error.__cause__, APIError)


def test_empty_answer_is_an_error(server, home):
    Path("pic.png").write_bytes(png_bytes())
    server.add(text_reply(""))
    outcome = make_toolbox(("read_image",), context(server, [])).execute("read_image", '{"path": "pic.png"}')
    assert outcome.is_error and "empty answer about pic.png" in outcome.content


def test_read_image_through_the_loop(server, home):
    png = png_bytes()
    Path("pic.png").write_bytes(png)
    server.add(tool_reply("read_image", {"path": "pic.png", "question": "What colour is it?"}),
               text_reply("Red, all of it."),
               text_reply("The picture is red."))
    events: list = []
    ctx = context(server, events)
    messages = [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "look at pic.png"}]
    turn = loop.run(ctx.provider, messages, make_toolbox(("read_image",), ctx),
                    loop.Limits(retry_delays=(0,)), events.append)
    assert turn.text == "The picture is red."
    first, side, last = (r.body for r in server.chat_requests())
    assert [t["function"]["name"] for t in first["tools"]] == ["read_image"]
    assert "tools" not in side
    assert side["messages"][0]["content"][0]["text"] == "What colour is it?"
    assert side["messages"][0]["content"][1]["image_url"]["url"].endswith(base64.b64encode(png).decode())
    assert last["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "Red, all of it."}
    assert "".join(e.text for e in events if isinstance(e, Text)) == "The picture is red."
    assert "base64" not in json.dumps(messages)  # the image never enters the conversation


# --- read_pdf --------------------------------------------------------------------------------------

def test_read_pdf_sends_the_text_and_the_question(server, home):
    Path("doc.pdf").write_bytes(pdf_bytes(["Quarterly revenue was 42 million", "Costs fell by 3 percent"]))
    server.add(text_reply("Revenue 42M, costs down 3%."))
    answer = ReadPdf().run({"path": "doc.pdf", "question": "What was the revenue?"}, context(server, []))
    assert answer == "Revenue 42M, costs down 3%."
    body = side_request(server)
    assert "tools" not in body and len(body["messages"]) == 1
    prompt = body["messages"][0]["content"]
    assert ("--- page 1 ---\nQuarterly revenue was 42 million\n--- page 2 ---\nCosts fell by 3 percent"
            in prompt)
    assert prompt.endswith("What was the revenue?")


def test_read_pdf_default_question(server, home):
    Path("doc.pdf").write_bytes(pdf_bytes(["Hello"]))
    server.add(text_reply("A greeting."))
    ReadPdf().run({"path": "doc.pdf"}, context(server, []))
    assert side_request(server)["messages"][0]["content"].endswith("Summarize this document.")


def test_read_pdf_with_an_empty_user_password_is_read(server, home):
    Path("locked.pdf").write_bytes(encrypted_pdf(""))  # owner-locked only: opens without a password
    server.add(text_reply("Plans."))
    assert ReadPdf().run({"path": "locked.pdf"}, context(server, [])) == "Plans."
    assert "Top secret plans" in side_request(server)["messages"][0]["content"]


def test_read_pdf_caps_the_text(server, home):
    line = "x" * 40_000
    Path("big.pdf").write_bytes(pdf_bytes([line] * 4))
    server.add(text_reply("Lots of x."))
    ReadPdf().run({"path": "big.pdf"}, context(server, []))
    prompt = side_request(server)["messages"][0]["content"]
    assert "--- page 3 ---" in prompt and "--- page 4 ---" not in prompt
    assert prompt.count("x") < PDF_TEXT_LIMIT + 200
    assert "text cut at 100000 characters" in prompt
    assert "of page 3 and 1 more page(s) of 4 were left out" in prompt


# --- bad input: refused with a clear message, and no request sent -----------------------------------

ABSENT, DIRECTORY, FIFO = "<absent>", "<directory>", "<fifo>"


def _write(name: str, data: bytes | str) -> None:
    if data == DIRECTORY:
        Path(name).mkdir()
    elif data == FIFO:
        os.mkfifo(name)  # opening it would block forever: it must be refused before that
    elif data != ABSENT:
        Path(name).write_bytes(data)


GIF = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
BAD_INPUT = [
    ("read_image", "nothing.png", ABSENT, "nothing.png does not exist"),
    ("read_image", "folder", DIRECTORY, "folder is a directory"),
    ("read_image", "pipe.png", FIFO, "pipe.png is not a regular file"),
    ("read_image", "empty.png", b"", "empty.png is empty"),
    ("read_image", "anim.png", GIF, "anim.png is not a PNG or JPEG image (it is a GIF)"),
    ("read_image", "notes.png", b"just some text\n",
     "notes.png is not a PNG or JPEG image (its first bytes are b'just som')"),
    ("read_image", "doc.jpg", b"%PDF-1.4\n", "doc.jpg is not a PNG or JPEG image (it is a PDF: use read_pdf)"),
    ("read_pdf", "nothing.pdf", ABSENT, "nothing.pdf does not exist"),
    ("read_pdf", "folder", DIRECTORY, "folder is a directory"),
    ("read_pdf", "empty.pdf", b"", "empty.pdf is empty"),
    ("read_pdf", "notes.pdf", b"not a pdf at all\n",
     "notes.pdf is not a PDF (its first bytes are b'not a pd')"),
    ("read_pdf", "cut.pdf", pdf_bytes(["Hello"])[:200],
     "cut.pdf could not be parsed as a PDF (damaged or truncated?)"),
    ("read_pdf", "junk.pdf", b"%PDF-1.4\n" + bytes(range(256)) * 4, "junk.pdf could not be parsed as a PDF"),
    ("read_pdf", "locked.pdf", encrypted_pdf("secret"), "locked.pdf is encrypted with a password"),
    ("read_pdf", "scan.pdf", pdf_bytes(["", ""]), "scan.pdf has no extractable text (2 page(s)"),
]


@pytest.mark.parametrize("tool, name, data, message", BAD_INPUT, ids=[f"{t}:{n}" for t, n, *_ in BAD_INPUT])
def test_bad_input_is_a_clear_error(server, home, tool, name, data, message):
    _write(name, data)
    box = make_toolbox((tool,), context(server, []))
    outcome = box.execute(tool, json.dumps({"path": name}))
    assert outcome.is_error and isinstance(outcome.error, ToolError)
    assert outcome.content.startswith("error: ") and message in outcome.content
    assert "\n" not in outcome.content
    assert server.chat_requests() == []


def test_pypdf_errors_are_chained(server, home):
    _write("cut.pdf", pdf_bytes(["Hello"])[:200])
    outcome = make_toolbox(("read_pdf",), context(server, [])).execute("read_pdf", '{"path": "cut.pdf"}')
    assert type(outcome.error.__cause__).__module__.startswith("pypdf")


def test_too_large_image(server, home):
    with open("huge.png", "wb") as f:  # sparse: the PNG signature, then a hole past the limit
        f.write(png_bytes())
        f.truncate(IMAGE_LIMIT + 1)
    outcome = make_toolbox(("read_image",), context(server, [])).execute("read_image", '{"path": "huge.png"}')
    assert outcome.is_error and "huge.png is too large (20.0 MB; the limit is 20 MB)" in outcome.content
    assert server.chat_requests() == []


def test_missing_path_argument(server, home):
    outcome = make_toolbox(("read_pdf",), context(server, [])).execute("read_pdf", "{}")
    assert outcome.is_error and "missing required argument 'path'" in outcome.content


@pytest.mark.parametrize("tool, name, data", [("read_image", "pic.png", png_bytes()),
                                               ("read_pdf", "doc.pdf", pdf_bytes(["Hello"]))])
def test_no_provider(home, tool, name, data):
    _write(name, data)
    box = make_toolbox((tool,), ToolContext(Config(), None))
    outcome = box.execute(tool, json.dumps({"path": name}))
    assert outcome.is_error and f"no model is available to read {name}" in outcome.content


# --- enabled from the configuration ------------------------------------------------------------------

def test_enabled_by_the_tools_key(server, home):
    write_cfg(home, **base_cfg(server, tools="shell_exec,write_file,read_image,read_pdf"))
    cfg = config.load(environ={})
    box = make_toolbox(cfg.tools, ToolContext(cfg, OpenAIProvider(cfg)))
    names = [s["function"]["name"] for s in box.schemas()]
    assert names == ["shell_exec", "write_file", "read_image", "read_pdf"]


def test_cli_prints_only_the_final_answer(server, home):
    """The side request's answer is a tool result (stderr trace), never answer text on stdout."""
    write_cfg(home, **base_cfg(server, tools="read_pdf"))
    Path("doc.pdf").write_bytes(pdf_bytes(["The launch is on Tuesday"]))
    server.add(tool_reply("read_pdf", {"path": "doc.pdf", "question": "When is the launch?"}),
               text_reply("SIDE-ANSWER: Tuesday."),
               text_reply("The launch is on Tuesday."))
    r = run_bantam("-p", "when is the launch? see doc.pdf", cwd=home)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "The launch is on Tuesday.\n"
    assert "[tool result: read_pdf]\nSIDE-ANSWER: Tuesday." in r.stderr
    assert "The launch is on Tuesday" in server.chat_requests()[1].body["messages"][0]["content"]
