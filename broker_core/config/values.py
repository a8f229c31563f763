"""Scalar conversions with Artemis's spelling rules.

Each converter raises `BadValue(message, expected)` so the caller can report the element and line.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)

# Artemis's ByteUtil.convertTextBytes: a number with an optional K/M/G, an optional "i" and an optional
# "B", case-insensitive, all binary multiples (so 10M == 10MB == 10MiB == 10485760).
_SIZE = re.compile(r"^\s*(\d+)\s*(?:([kmg])i?)?b?\s*$", re.IGNORECASE)
_MULTIPLIER = {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_INT = re.compile(r"^[+-]?\d+$")
_SIZE_EXPECTED = "a byte size such as 1048576, 10K, 10M, 10MB, 10MiB or 1G"


class BadValue(ValueError):
    def __init__(self, message: str, expected: str) -> None:
        super().__init__(message)
        self.message = message
        self.expected = expected


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise BadValue(f"bad boolean {text!r}", "true or false")


def parse_int(text: str, minimum: int | None = None, maximum: int | None = None) -> int:
    stripped = text.strip()
    if not _INT.match(stripped):
        raise BadValue(f"bad integer {text!r}", _int_expectation(minimum, maximum))
    value = int(stripped)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise BadValue(f"integer {value} out of range", _int_expectation(minimum, maximum))
    return value


def _int_expectation(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer {minimum}-{maximum}"
    if minimum is not None:
        return f"an integer >= {minimum}"
    return "an integer"


def parse_float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise BadValue(f"bad number {text!r}", "a decimal number such as 2.0") from None


def parse_size(text: str, allow_unlimited: bool = True) -> int:
    """A byte size; -1 (unlimited/unset) is allowed where Artemis allows it."""
    stripped = text.strip()
    if allow_unlimited and stripped == "-1":
        return -1
    match = _SIZE.match(stripped)
    if not match:
        expected = _SIZE_EXPECTED + (" (or -1)" if allow_unlimited else "")
        raise BadValue(f"bad size {text!r}", expected)
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _MULTIPLIER[unit]


def parse_enum(text: str, enum_type: type[E]) -> E:
    wanted = text.strip().upper()
    for member in enum_type:
        if str(member.value).upper() == wanted:
            return member
    choices = "/".join(str(m.value) for m in enum_type)
    raise BadValue(f"unknown value {text!r}", f"one of {choices}")


def split_list(text: str) -> tuple[str, ...]:
    """A comma-separated list, trimmed, empty items dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def parse_sent_password(text: str) -> str:
    """A password this broker sends to another (a broker connection's, the cluster password): as written,
    or masked two-way as Artemis's `artemis mask` writes it, `ENC(<hex>)`. A one-way hash cannot be sent."""
    from broker_core.security.masked import MaskError, decode, is_one_way, masked

    inner = masked(text)
    if inner is None:
        return text
    expected = "the password itself, or ENC(<hex>) as `artemis mask PASSWORD` writes it (default key)"
    if is_one_way(inner):
        raise BadValue("a one-way hash (ENC(n:salt:hash)) cannot be sent to another broker", expected)
    try:
        return decode(inner)
    except MaskError as exc:
        raise BadValue(f"ENC(...) password not readable: {exc}", expected) from None
