"""Settings declared with their type and range in one place, and checked at start.

Every field of MessageStoreConfig, ha.HASettings and app.BrokerSettings is declared with
`setting(default, low, high)` (numbers: inclusive bounds) or `setting(default, choices=...)`
(strings); the field's annotation is its type. `check_fields()` checks every field of a settings
object against its declaration and raises ConfigInvalid naming the setting, so a zero period
(a busy loop) or a string where a number belongs (an error in a service loop, every pass) is
refused before anything starts. Relations between settings stay in each class's `validate()`.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigInvalid

BOUNDS_KEY = "tidemq.bounds"


@dataclass(frozen=True)
class Bounds:
    """What a setting may hold: inclusive numeric bounds, or the allowed strings."""

    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] | None = None

    def describe(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if self.low is not None and self.high is not None:
            return f"in {self.low}..{self.high}"
        if self.low is not None:
            return f">= {self.low}"
        return "any value"


def setting(
    default: Any = dataclasses.MISSING,
    low: int | None = None,
    high: int | None = None,
    *,
    choices: tuple[str, ...] | None = None,
    factory: Any = None,
) -> Any:
    """A dataclass field with its bounds; `factory` instead of `default` for a computed default."""
    assert low is None or high is None or low <= high, "a setting's range must not be empty"
    metadata = {BOUNDS_KEY: Bounds(low, high, choices)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def bounds_of(settings_class: type, name: str) -> Bounds:
    """The declared bounds of one setting (KeyError when it declares none)."""
    for f in dataclasses.fields(settings_class):
        if f.name == name:
            bounds: Bounds = f.metadata[BOUNDS_KEY]
            return bounds
    raise KeyError(name)


def declared_settings(settings_class: type) -> list[dataclasses.Field[Any]]:
    """The fields that are settings (nested settings objects are not: they check themselves)."""
    return [f for f in dataclasses.fields(settings_class) if BOUNDS_KEY in f.metadata]


def check_fields(settings: Any, section: str) -> None:
    """Raise ConfigInvalid for the first setting whose value has the wrong type or is out of range."""
    for f in declared_settings(type(settings)):
        value = getattr(settings, f.name)
        bounds = f.metadata[BOUNDS_KEY]
        problem = _type_problem(str(f.type), value) or _range_problem(bounds, value)
        if problem == "an integer" and bounds.low is not None:
            problem += " " + bounds.describe()  # say the range with the type: one correction, not two
        if problem:
            raise ConfigInvalid(f"{section} setting {f.name} must be {problem}, not {value!r}")


def _type_problem(annotation: str, value: Any) -> str | None:
    optional = annotation.endswith(" | None")
    kind = annotation.removesuffix(" | None")
    if value is None:
        return None if optional else f"a {kind}"
    if kind == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if kind == "bool":
        return None if isinstance(value, bool) else "true or false"
    if kind == "str":
        return None if isinstance(value, str) else "a string"
    if kind == "list[str]":
        return None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "a list of strings"
    if isinstance(value, enum.Enum) and type(value).__name__ == kind:
        return None
    return f"a {kind}"


def _range_problem(bounds: Bounds, value: Any) -> str | None:
    if value is None or isinstance(value, bool | enum.Enum):
        return None
    if bounds.choices is not None:
        return None if value in bounds.choices else bounds.describe()
    if isinstance(value, int):
        if (bounds.low is not None and value < bounds.low) or (bounds.high is not None and value > bounds.high):
            return "an integer " + bounds.describe()
    return None
