"""One meaning per name: no two classes of src/bantam share a name, and no two modules' names differ
only by a plural 's' (session.py, the builder, beside sessions.py, saved conversations, read as one).
Names already shared are listed below, to be renamed and removed from the lists; none may be added."""
import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "bantam"

# Known and not yet renamed: each list only shrinks.
SHARED_CLASSES = {"Request", "Choice", "Result", "Guard", "Hub", "TurnBuilder", "Step", "Commands", "Plan", "Action"}
PLURAL_PAIRS = {("prompt", "prompts"), ("provider", "providers")}


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_two_classes_share_a_name():
    defined = defaultdict(list)
    for path in modules():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                defined[node.name].append(path.relative_to(SRC).as_posix())
    shared = {name: places for name, places in defined.items() if len(places) > 1}
    assert not {name: shared[name] for name in set(shared) - SHARED_CLASSES}, \
        "a class name that means two things: give each a name that says what it is"
    assert not SHARED_CLASSES - set(shared), "renamed: drop it from SHARED_CLASSES"


def test_no_module_name_is_another_plus_s():
    names = {path.stem for path in modules() if path.stem != "__init__"}
    names |= {path.parent.name for path in modules() if path.parent != SRC}
    pairs = {(name, name + "s") for name in names if name + "s" in names}
    assert pairs == PLURAL_PAIRS, "a module whose name is another's plural: name it for what it holds"
