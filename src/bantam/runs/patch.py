"""Partial repairs (`[runtime] repair_edit = "lines"` or `"function"`): a write step on a file that
exists may replace named lines or one function instead of reproducing the whole file, so a small
model can repair a 300-line file. The answer names the part on a line before its code fence:

    lines 12-30          lines 12 to 30 (1-based, inclusive, as numbered in the prompt)
    function fib         the whole `def fib` (or `class fib`), decorators included; Python, via ast

The result is the whole new file: it is written by write_file, through the same gates as any write.
"""
from __future__ import annotations

import ast
import re

from ..errors import ParseError

HEADER = re.compile(r"^\s*(?:replace\s+)?(?:lines?\s+(\d+)\s*(?:-|to)\s*(\d+)|(?:function|def|class|method)\s+"
                    r"([A-Za-z_][\w.]*))\s*:?\s*$", re.I)


def header(answer: str) -> tuple[int, int] | str | None:
    """What the answer replaces: (first, last) lines, a function name, or None (the whole file)."""
    for line in answer.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            return None
        if match := HEADER.match(line):
            if match.group(3):
                return match.group(3)
            return int(match.group(1)), int(match.group(2))
    return None


def apply(current: str, target: tuple[int, int] | str, body: str, path: str) -> str:
    """`current` with `target` replaced by `body`; ParseError (back to the model) when the target
    is not in the file."""
    lines = current.splitlines(keepends=True)
    if isinstance(target, str):
        first, last = function_lines(current, target, path)
        body = indented(body, lines[first - 1])
    else:
        first, last = target
        if not 1 <= first <= last <= len(lines):
            raise ParseError(f"lines {first}-{last} are not in {path} (it has {len(lines)} lines)")
    new = body if body.endswith("\n") or not body else body + "\n"
    return "".join(lines[:first - 1]) + new + "".join(lines[last:])


def function_lines(source: str, name: str, path: str) -> tuple[int, int]:
    """The lines of the first def or class called `name` (`Class.method` also works)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ParseError(f"{path} is not valid Python ({e.msg}, line {e.lineno}); replace lines or the "
                         "whole file instead") from None
    wanted = name.split(".")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == wanted[-1]:
            if len(wanted) > 1 and not _inside(tree, node, wanted[-2]):
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return first, node.end_lineno or node.lineno
    raise ParseError(f"no function or class {name!r} in {path}")


def _inside(tree: ast.AST, node: ast.AST, owner: str) -> bool:
    return any(isinstance(c, ast.ClassDef) and c.name == owner and node in c.body for c in ast.walk(tree))


def indented(body: str, original_first_line: str) -> str:
    """A method given without its class's indentation gets it back."""
    indent = original_first_line[:len(original_first_line) - len(original_first_line.lstrip())]
    first = next((line for line in body.splitlines() if line.strip()), "")
    if not indent or first.startswith(indent):
        return body
    return "".join(indent + line if line.strip() else line for line in body.splitlines(keepends=True))
