"""How a configuration value is checked: the kinds of config.py's one field table, the `knob(...)`
that describes a field, and `check`, the one checker every configuration file goes through
(key=value text, flags and the environment; typed JSON and TOML values)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, TypeVar

from .errors import ConfigError


# --- kinds: how a value is checked, from text (key=value files, flags, the environment) or from a
# typed file (JSON, TOML: "5" is not a number there). Each raises ValueError with a short reason.

class Kind:
    """A string; numbers are taken as their text (chat ids are often written as numbers)."""

    def text(self, text: str) -> Any:
        return self.value(text.strip())

    def value(self, value: Any) -> Any:
        if isinstance(value, (dict, list)) or value is None:
            raise ValueError(f"expected a string, got {value!r}")
        return str(value)


class Flag(Kind):
    def text(self, text: str) -> bool:
        low = text.strip().lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        raise ValueError(f"expected true or false, got {text!r}")

    def value(self, value: Any) -> bool:
        if not isinstance(value, bool):  # a typed file's true is not a string: "on" there is a typo
            hint = " (true or false without quotes)" if isinstance(value, str) else ""
            raise ValueError(f"expected true or false, got {value!r}{hint}")
        return value


class Number(Kind):
    """An integer or a number, finite, at least `minimum` (`above`: more than it)."""

    def __init__(self, kind: type, minimum: float | None = None, above: bool = False):
        self.kind, self.minimum, self.above = kind, minimum, above
        self.expected = "an integer" if kind is int else "a number"

    def text(self, text: str) -> Any:
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise ValueError(f"expected {self.expected}, got {text!r}") from None
        return self._bounded(value, text)

    def value(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected {self.expected}, got {value!r}")
        if self.kind is int and value != int(value):
            raise ValueError(f"expected an integer, got {value!r}")
        return self._bounded(self.kind(value), value)

    def _bounded(self, value: Any, given: Any) -> Any:
        if not math.isfinite(value):  # nan, inf, 1e400
            raise ValueError(f"expected a finite number, got {given!r}")
        if self.minimum is not None and self.above and value <= self.minimum:
            raise ValueError(f"must be greater than {self.minimum:g}, got {given!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be at least {self.minimum}, got {given!r}")
        return value


class Choice(Kind):
    def __init__(self, *options: str):
        self.options = options

    def value(self, value: Any) -> str:
        text = value.strip().lower() if isinstance(value, str) else None
        if text not in self.options:
            raise ValueError(f"expected one of {', '.join(self.options)}, got {value!r}")
        return text


class Url(Kind):
    def value(self, value: Any) -> str:
        url = value.strip().rstrip("/") if isinstance(value, str) else ""
        if not url.lower().startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return url


class Names(Kind):
    """A list of strings: a JSON or TOML array, or a comma list in text."""

    def text(self, text: str) -> tuple[str, ...]:
        return self.value([n.strip() for n in text.split(",") if n.strip()])

    def value(self, value: Any) -> tuple[str, ...]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return tuple(value)


class Numbers(Kind):
    """A list of numbers of at least 0: an array, or a comma list in text."""
    each = Number(float, 0)

    def text(self, text: str) -> tuple[float, ...]:
        return tuple(self.each.text(part) for part in text.split(",") if part.strip())

    def value(self, value: Any) -> tuple[float, ...]:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected a list of numbers, got {value!r}")
        return tuple(self.each.value(v) for v in value)


@dataclass(frozen=True)
class Key:
    """One knob: its one name, how its values are checked, its unit and comment, the environment
    variable it may come from and the other names files may give it."""
    name: str
    kind: Kind
    default: Any
    comment: str
    unit: str = ""
    env: str = ""
    aliases: tuple[str, ...] = ()
    secret: bool = False  # shown as *** wherever bantam shows configuration


T = TypeVar("T")


def knob(default: T, kind: Kind, comment: str, unit: str = "", env: str = "",
        aliases: tuple[str, ...] = (), secret: bool = False) -> T:
    """A dataclass field described by a Key (its name is filled in by `keys_of`)."""
    spec = Key("", kind, default, comment, unit, env, aliases, secret)
    return field(default=default, repr=not secret, metadata={"key": spec})


def keys_of(cls: type) -> dict[str, Key]:
    """The Keys of a dataclass whose fields were written with `knob(...)`, by name."""
    return {f.name: replace(f.metadata["key"], name=f.name, default=f.default)
            for f in fields(cls) if "key" in f.metadata}


def aliases_of(table: Mapping[str, Key]) -> dict[str, str]:
    """alias -> the key's one name."""
    return {alias: k.name for k in table.values() for alias in k.aliases}


def check(spec: Key, value: Any, where: str, typed: bool = False, named: str = "") -> Any:
    """The one checker: a value as the key's kind wants it, from text (key=value files, flags, the
    environment) or, with `typed`, from a JSON or TOML file. ConfigError `where: name: reason`,
    the name as the file gave it (`named`, an alias)."""
    try:
        return spec.kind.value(value) if typed else spec.kind.text(value)
    except ValueError as e:
        raise ConfigError(f"{where}: {named or spec.name}: {e}") from None


def canonical(data: Mapping[str, Any], table: Mapping[str, Key], where: str) -> dict[str, tuple[str, Any]]:
    """The key's one name -> (the name `data` gave it, its value); an alias and its key both
    given is an error."""
    names = aliases_of(table)
    out: dict[str, tuple[str, Any]] = {}
    for given, value in data.items():
        one = names.get(given, given)
        if one in out:
            raise ConfigError(f"{where}: {given}: the same key as {out[one][0]!r}, given twice; keep one")
        out[one] = (given, value)
    return out
