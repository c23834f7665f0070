"""OCR_IMAGE: the text in an image, laid out in ASCII, for models that cannot see images.

Needs `pip install rapidocr-onnxruntime` (it brings opencv); without it no tool is offered, so
the model is never handed a tool that can only fail.
"""
import importlib.util

from bantam.errors import ToolError


def ocr_image(args, agent):
    from rapidocr_onnxruntime import RapidOCR
    path = agent.dir.home / args["path"]
    if not path.is_file():
        raise ToolError(f"{args['path']} is not a file")
    found, _ = RapidOCR()(str(path))
    if not found:
        return "(no text found)"
    return layout([(box[0][1], box[0][0], text) for box, text, _score in found])


def layout(items, cell=12.0):
    """Text placed on a character grid by its top-left corner: rows by y, columns by x."""
    rows: dict = {}
    for y, x, text in sorted(items):
        row = rows.setdefault(round(y / (cell * 2)), [])
        row.append((int(x / cell), text))
    lines = []
    for _, row in sorted(rows.items()):
        line = ""
        for column, text in sorted(row):
            line += " " * max(1 if line else 0, column - len(line)) + text
        lines.append(line)
    return "\n".join(lines)


TOOLS = [("OCR_IMAGE", ocr_image, "Read the text in an image file (OCR), laid out as in the image.",
          {"type": "object", "required": ["path"],
           "properties": {"path": {"type": "string", "description": "the image file"}}})] \
    if importlib.util.find_spec("rapidocr_onnxruntime") else []
