"""Every exception bantam defines derives from the one tree in errors.py, so a front end that
catches BantamError catches every error bantam raises on purpose (issue 29)."""
import importlib
import inspect
import pkgutil

import bantam
from bantam.errors import BantamError

# Exceptions that stay outside the tree, each with the reason.
ALLOWED = {
    # A private signal from json's parse_constant hook, caught two lines from where it is raised;
    # it never leaves config.py.
    "bantam.config._NotFinite",
}


def bantam_modules() -> list:
    """Every module under src/bantam that imports here; one whose optional dependency (llama.cpp,
    starlette, redis, dspy...) is missing is skipped, as bantam itself only imports it on demand."""
    modules = []
    for info in pkgutil.walk_packages(bantam.__path__, "bantam."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI when imported
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            continue
    return modules


def defined_exceptions(module) -> list[type]:
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Exception) and obj.__module__ == module.__name__]


def test_every_exception_bantam_defines_derives_from_bantam_error():
    modules = bantam_modules()
    assert len(modules) > 50  # the walk found the package, not an empty stub
    found = {f"{c.__module__}.{c.__qualname__}": c for m in modules for c in defined_exceptions(m)}
    assert "bantam.runs.loop.Paused" in found and "bantam.batch.redisq.QueueError" in found
    outside = sorted(name for name, c in found.items()
                     if not issubclass(c, BantamError) and name not in ALLOWED)
    assert outside == [], f"exceptions outside errors.BantamError's tree: {outside}"


def test_the_allow_list_names_only_real_exceptions():
    """A stale entry would hide a new exception of the same name later."""
    for name in ALLOWED:
        module, _, cls = name.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), cls), Exception)
