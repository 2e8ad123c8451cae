"""Reading the string options Spark hands to a source or sink, with clear errors.

Spark passes every option as a string in a case-insensitive map; these helpers turn
them into typed values or raise `OptionInvalid` naming the option.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.errors import OptionInvalid

TRUE_WORDS = frozenset({"true", "1", "yes"})
FALSE_WORDS = frozenset({"false", "0", "no"})


def get_option(options: Mapping[str, str], name: str) -> str | None:
    """The option's value, matching its name without regard to case (as Spark does)."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def required_option(options: Mapping[str, str], name: str, hint: str = "") -> str:
    value = get_option(options, name)
    if value is None or not value.strip():
        raise OptionInvalid(name, "is required" + (f" ({hint})" if hint else ""))
    return value.strip()


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = get_option(options, name)
    if value is None:
        return default
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise OptionInvalid(name, f"must be true or false, not {value!r}")


def int_option(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1, maximum: int | None = None) -> int | None:
    """An integer option within [minimum, maximum]; `default` when absent."""
    value = get_option(options, name)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionInvalid(name, f"must be an integer, not {value!r}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise OptionInvalid(name, f"must be {bound}, not {number}")
    return number
