"""The layers of src/bantam point one way (docs/architecture.md draws them).

Every module under src/bantam is parsed with `ast` (nothing is imported) and every import it
holds is collected: at module level, inside functions, under `if TYPE_CHECKING:` (a type is a
dependency too), relative imports resolved. A module may import its own layer and the layers
below it, never one above; and no two packages may import each other, directly or round a
longer cycle. Dynamic imports (`importlib.import_module` of a name in a table: the tool
registry, the command line's subcommands) are not seen, and need not be: those tables name
what a higher layer supplies.

Run as a script, it prints every violation: `python tests/test_layers.py`.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top. A module's layer is that of the longest name in this table that is it or a
# package holding it; a module in no layer fails the test, so a new one is placed on purpose.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # Foundations with no policy of their own, usable by anything: the exception tree, the
    # events, the value kinds, safe file writes and confinement, text hygiene, the environment
    # policy, project trust, the seccomp filter, the process reaper, state on disk (sessions,
    # the endpoint cache), the names of the tools (the registry as data), and the run slots a
    # batch's sessions compute in (the loop and the providers give theirs up while they wait).
    ("base", ("bantam.errors", "bantam.events", "bantam.kinds", "bantam.fsutil", "bantam.sanitize",
              "bantam.clip", "bantam.envpolicy", "bantam.trust", "bantam.seccomp", "bantam.reaper",
              "bantam.transcripts", "bantam.cache", "bantam.toolnames", "bantam.bundled", "bantam.slots")),
    # What a session may do, decided before anything runs: the configuration, the sandbox
    # around commands, who approves what, the limits of a turn.
    ("settings", ("bantam.config", "bantam.sandbox", "bantam.approval", "bantam.limits")),
    # One request in, one assistant message out.
    ("providers", ("bantam.providers",)),
    # What the model can call and what it is told.
    ("tools", ("bantam.tools", "bantam.prompt")),
    # The agent loop and what keeps its history inside the window.
    ("loop", ("bantam.loop", "bantam.compact")),
    # Assembly: MCP servers' tools, the session builder, and the public API (`bantam` itself
    # re-exports the core lazily).
    # `undo` records a session's turns (a guard) and restores them.
    ("assembly", ("bantam", "bantam.mcp", "bantam.session", "bantam.undo")),
    # What the front ends share: the common command-line options, renderers, the line editor.
    ("frontend-support", ("bantam.options", "bantam.render", "bantam.lineeditor")),
    # The ways in: each talks to a person (or a queue) and drives sessions.
    # `conversation` is the chat the terminal (repl) and the browser (web) share, and `slash`
    # the slash commands every chat runs (the editor's too): they drive controlled runs, /trust
    # and /mcp, so they stand among them.
    ("frontends", ("bantam.oneshot", "bantam.repl", "bantam.commands", "bantam.web", "bantam.daemon",
                   "bantam.runs", "bantam.batch", "bantam.mcpserve", "bantam.conversation", "bantam.slash",
                   "bantam.acp", "bantam.undo.cli")),
    # The entry points: the command line, which hands each subcommand to its module by name.
    ("entry", ("bantam.cli", "bantam.commandline", "bantam.__main__", "bantam.batch.__main__")),
]

# (importer, imported) -> why this upward import is right. Keep it short: each entry is a debt.
ALLOWED: dict[tuple[str, str], str] = {
    # `bantam` is the public API, which names the session builder for type checkers; the MCP
    # client reads only the version defined there, as every layer may (nothing is imported).
    ("bantam.mcp.hub", "bantam"): "the version it gives servers in its handshake",
}

# Packages whose modules stand in two layers, each with the module that does: the cycle check
# counts such a package as one node per layer. Every other package is one node, so a front end
# put back inside a lower package (as `bantam mcp` once sat in bantam.mcp, making commands ->
# mcp -> commands) is a cycle the test names. Each entry is a debt.
SPLIT: dict[str, str] = {
    "bantam.undo": "undo.cli, the `bantam undo` command",
    "bantam.batch": "batch.__main__, the `python -m bantam.batch` entry point",
}


def module_files() -> dict[str, Path]:
    """Every module under src/bantam, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((SRC / "bantam").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(imported bantam module, line) for every import in the file, wherever it stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(package, node.module, node.level)
            for alias in node.names:  # `from . import config`: the module; `from .x import f`: x
                target = f"{base}.{alias.name}"
                found.append((target if target in known else base, node.lineno))
    return sorted(((nearest(target, known), line) for target, line in found if nearest(target, known)),
                  key=lambda hit: (hit[1], hit[0]))


def resolve(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - level + 1])
    return f"{base}.{module}" if module else base


def nearest(target: str, known: set[str]) -> str:
    """The bantam module an import names (`bantam.tools.shell.run_shell` -> `bantam.tools.shell`)."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target


def layer_of(module: str) -> int | None:
    best, found = -1, None
    for index, (_, names) in enumerate(LAYERS):
        for prefix in names:
            # `bantam` names the package's own __init__ only, not everything below it
            inside = module.startswith(prefix + ".") and prefix != "bantam"
            if (module == prefix or inside) and len(prefix) > best:
                best, found = len(prefix), index
    return found


def unit_of(module: str, packages: set[str]) -> str:
    """What the cycle check counts as one node: a subpackage of bantam, or a top-level module; a
    package in SPLIT is one node per layer its modules stand in."""
    package = ".".join(module.split(".")[:2])
    if package not in packages:
        return module
    own, here = layer_of(package), layer_of(module)
    split = package in SPLIT and here is not None and here != own
    return f"{package}[{LAYERS[here][0]}]" if split and here is not None else package


def spanning() -> list[str]:
    """The packages whose modules stand in more than one layer, and are not in SPLIT."""
    layers: dict[str, set[int]] = {}
    for name in module_files():
        package, here = ".".join(name.split(".")[:2]), layer_of(name)
        if package != "bantam" and here is not None:
            layers.setdefault(package, set()).add(here)
    return sorted(p for p, found in layers.items() if len(found) > 1 and p not in SPLIT)


def graph() -> list[tuple[str, str, int]]:
    """Every (importer, imported, line) between two different bantam modules."""
    files = module_files()
    known = set(files)
    return [(name, target, line) for name, path in files.items()
            for target, line in imports(name, path, known) if target != name]


def unplaced() -> list[str]:
    return [name for name in module_files() if layer_of(name) is None]


def upward() -> list[str]:
    """`importer -> imported (line N)` for every import of a higher layer."""
    found = []
    for importer, imported, line in graph():
        low, high = layer_of(importer), layer_of(imported)
        if low is None or high is None or high <= low or (importer, imported) in ALLOWED:
            continue
        found.append(f"{importer} ({LAYERS[low][0]}) -> {imported} ({LAYERS[high][0]}) (line {line})")
    return sorted(set(found))


def package_cycles() -> list[str]:
    """One line per cycle between packages (or top-level modules): its shortest round, each hop
    with the import that makes it. Cut one hop and run again: a larger knot shows its next round."""
    packages = {name for name, path in module_files().items() if path.name == "__init__.py"}
    edges: dict[str, dict[str, str]] = {}  # unit -> unit -> the first import between them
    for importer, imported, line in sorted(graph()):
        a, b = unit_of(importer, packages), unit_of(imported, packages)
        if a != b and (importer, imported) not in ALLOWED:
            edges.setdefault(a, {}).setdefault(b, f"{importer} -> {imported} (line {line})")
    found, covered = [], set()
    for start in sorted(edges):
        if start in covered:
            continue
        cycle = shortest_round(start, edges)
        if cycle:
            covered.update(cycle)
            hops = [edges[a][b] for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
            found.append(" -> ".join(cycle + cycle[:1]) + ": " + "; ".join(hops))
    return found


def shortest_round(start: str, edges: dict[str, dict[str, str]]) -> list[str]:
    """The nodes of a shortest path from `start` back to itself (breadth first), or []."""
    paths = {start: [start]}
    todo = [start]
    for node in todo:
        for nxt in sorted(edges.get(node, {})):
            if nxt == start:
                return paths[node]
            if nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                todo.append(nxt)
    return []


def test_every_module_has_a_layer() -> None:
    assert not unplaced(), f"place these modules in LAYERS (tests/test_layers.py): {unplaced()}"


def test_no_import_runs_upward() -> None:
    violations = upward()
    assert not violations, "imports from a lower layer to a higher one:\n" + "\n".join(violations)


def test_a_package_stands_in_one_layer() -> None:
    """A lower package that holds a front end is the start of a cycle (a front end imports what
    sits above the package); put the front end in a package of its own, or name it in SPLIT."""
    assert not spanning(), f"packages with modules in two layers: {spanning()}"


def test_no_cycle_between_packages() -> None:
    cycles = package_cycles()
    assert not cycles, "packages that import each other:\n" + "\n".join(cycles)


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A module-level, a function-level, a relative and a TYPE_CHECKING import are all found."""
    source = ("from __future__ import annotations\nimport bantam.loop\nfrom ..config import Config\n"
              "if TYPE_CHECKING:\n    from ..tools.shell import ShellResult\n"
              "def f():\n    from .. import compact\n    from . import Reply\n")
    path = tmp_path / "x.py"
    path.write_text(source)
    known = {"bantam", "bantam.loop", "bantam.config", "bantam.tools", "bantam.tools.shell", "bantam.compact",
             "bantam.providers", "bantam.providers.x"}
    assert imports("bantam.providers.x", path, known) == [
        ("bantam.loop", 2), ("bantam.config", 3), ("bantam.tools.shell", 5), ("bantam.compact", 7),
        ("bantam.providers", 8)]


def test_loading_the_configuration_imports_nothing_above_it(tmp_path: Path) -> None:
    """At run time too: choosing the bundled model (nothing configured) and checking tools=
    against the registry load no provider and no tool module."""
    import subprocess
    import sys
    (tmp_path / ".bantam.cfg").write_text("tools=shell_exec\n")  # within the defaults: applied, untrusted
    code = ("import sys; from bantam import config; config.load(); "
            "print(' '.join(m for m in sys.modules if m.startswith('bantam')))")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    settings = next(i for i, (name, _) in enumerate(LAYERS) if name == "settings")
    above = [m for m in r.stdout.split() if m != "bantam" and (layer_of(m) or 0) > settings]
    assert not above, f"config.load() imported {above}"


if __name__ == "__main__":
    for line in unplaced() + upward() + package_cycles():
        print(line)


def test_the_architecture_page_draws_every_layer_as_the_table_has_it():
    """docs/architecture.md's drawing of the layers names every entry of LAYERS on its layer's
    lines, and its source tree names every module and package, so the page describes the structure
    as it is (a module added, moved or renamed fails here until the page says so)."""
    page = (SRC.parent / "docs" / "architecture.md").read_text()
    drawing = page.split("## Layers", 1)[1].split("```")[1]
    rows: dict[str, str] = {}
    label = ""
    for line in drawing.splitlines():
        head = line[:13].strip()
        if head and head != "│" and not head.startswith("support"):
            label = head
        rows[label] = rows.get(label, "") + " " + line[13:]
    rows["frontend-support"] = rows.pop("frontend-", "")
    missing = []
    for layer, names in LAYERS:
        for name in names:
            short = name.removeprefix("bantam.").replace(".", "/")
            if name == "bantam":
                short = "bantam/__init__.py"
            if not re.search(rf"(?<![\w/]){re.escape(short)}(?![\w])", rows.get(layer, "")):
                missing.append(f"{short} (layer {layer})")
    assert missing == [], missing
    tree = page.split("## Source tree", 1)[1].split("```")[1]
    for path in sorted((SRC / "bantam").iterdir()):
        if path.name.startswith("__") and path.name != "__init__.py" or path.name == "__pycache__":
            continue
        shown = path.name + ("/" if path.is_dir() else "")
        if shown != "__init__.py":
            assert shown in tree, f"{shown} is not in docs/architecture.md's source tree"
