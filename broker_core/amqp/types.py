"""AMQP values that plain Python types cannot tell apart: symbols, typed integers, described values,
arrays (OASIS AMQP 1.0, part 1). Subclasses of str, int and list, so they stay plain Python classes
when the codec is compiled (`broker_core/compiled.py`); the codec re-exports them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class DecodeError(ValueError):
    """The bytes are not a valid AMQP encoding (maps onto `amqp:decode-error`)."""


class Symbol(str):
    """An AMQP symbol (ASCII); a str subclass so it compares equal to the same text."""

    __slots__ = ()


class _TypedInt(int):
    __slots__ = ()


class UByte(_TypedInt):
    __slots__ = ()


class UShort(_TypedInt):
    __slots__ = ()


class UInt(_TypedInt):
    __slots__ = ()


class ULong(_TypedInt):
    __slots__ = ()


class Byte(_TypedInt):
    __slots__ = ()


class Short(_TypedInt):
    __slots__ = ()


class Int(_TypedInt):
    __slots__ = ()


class Timestamp(_TypedInt):
    """Milliseconds since the Unix epoch."""

    __slots__ = ()


class Described:
    """A described value whose descriptor we do not map onto a class of our own."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Described) and other.descriptor == self.descriptor and other.value == self.value
        )

    def __hash__(self) -> int:
        return hash((self.descriptor, repr(self.value)))

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"


class Array(list[Any]):
    """An AMQP array: every element has the same type, given as a one-byte constructor code."""

    __slots__ = ("code",)

    def __init__(self, code: int, items: Iterable[Any] = ()) -> None:
        super().__init__(items)
        self.code = code
