"""AMQP 1.0 performatives, terminus, outcome and SASL frame bodies as small value objects.

Each class declares its descriptor code and, in field order, the encoder of every field; trailing
null fields are omitted on the wire as the spec allows. Decoding fills fields positionally, so a peer
that sends fewer fields gets the defaults. Link-level `offered_capabilities` / `desired_capabilities`
are ordinary fields here: that is the gap in proton's C engine the Artemis mirror needs filled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .codec import (
    DESCRIBED_TYPES,
    Symbol,
    enc_binary,
    enc_bool,
    enc_fields,
    enc_list_of_encoded,
    enc_string,
    enc_symbol,
    enc_symbols,
    enc_ubyte,
    enc_uint,
    enc_ulong,
    enc_ushort,
    encode,
)

Enc = Callable[[Any], bytes]


def _enc_any(v: Any) -> bytes:
    return encode(v)


def _enc_map(v: dict[Any, Any]) -> bytes:
    return encode(v)


class Composite:
    """Base: a described list with a fixed field order."""

    __slots__ = ()

    DESCRIPTOR: ClassVar[int]
    ENCODERS: ClassVar[tuple[Enc, ...]]

    def encode_amqp(self) -> bytes:
        values = [getattr(self, f.name) for f in fields(self)]  # type: ignore[arg-type]
        n = len(values)
        while n and values[n - 1] is None:
            n -= 1
        items = [b"\x40" if values[i] is None else self.ENCODERS[i](values[i]) for i in range(n)]
        return b"\x00" + enc_ulong(self.DESCRIPTOR) + enc_list_of_encoded(items)

    @classmethod
    def from_list(cls, value: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"{cls.__name__} must be a described list")
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        kwargs = {names[i]: v for i, v in enumerate(value[: len(names)]) if v is not None}
        return cls(**kwargs)


def _register(cls: type[Composite]) -> type[Composite]:
    DESCRIBED_TYPES[cls.DESCRIPTOR] = cls.from_list
    return cls


# ------------------------------------------------------------------------------------ error, termini


@_register
@dataclass(slots=True)
class Error(Composite):
    DESCRIPTOR = 0x1D
    condition: str = ""
    description: str | None = None
    info: dict[Any, Any] | None = None
    ENCODERS = (enc_symbol, enc_string, enc_fields)


@_register
@dataclass(slots=True)
class Source(Composite):
    DESCRIPTOR = 0x28
    address: str | None = None
    durable: int | None = None
    expiry_policy: str | None = None
    timeout: int | None = None
    dynamic: bool | None = None
    dynamic_node_properties: dict[Any, Any] | None = None
    distribution_mode: str | None = None
    filter: dict[Any, Any] | None = None
    default_outcome: Any = None
    outcomes: Any = None
    capabilities: Any = None
    ENCODERS = (
        enc_string,
        enc_uint,
        enc_symbol,
        enc_uint,
        enc_bool,
        enc_fields,
        enc_symbol,
        _enc_map,
        _enc_any,
        enc_symbols,
        enc_symbols,
    )


@_register
@dataclass(slots=True)
class Target(Composite):
    DESCRIPTOR = 0x29
    address: str | None = None
    durable: int | None = None
    expiry_policy: str | None = None
    timeout: int | None = None
    dynamic: bool | None = None
    dynamic_node_properties: dict[Any, Any] | None = None
    capabilities: Any = None
    ENCODERS = (enc_string, enc_uint, enc_symbol, enc_uint, enc_bool, enc_fields, enc_symbols)


@_register
@dataclass(slots=True)
class Coordinator(Composite):
    """The target of a transaction controller's link (part 4.5.1): declares and discharges go to it."""

    DESCRIPTOR = 0x30
    capabilities: Any = None
    ENCODERS = (enc_symbols,)


# ------------------------------------------------------------------------------------- transactions
# Part 4.5. A controller sends `Declare` and `Discharge` as the amqp-value body of a message on its
# coordinator link; the coordinator answers a declare with the `Declared` state, and a transactional
# transfer or disposition carries `TransactionalState`. Clients write the descriptors as codes or as
# their symbolic names (python-qpid-proton sends `amqp:declare:list`): both are registered.


@_register
@dataclass(slots=True)
class Declare(Composite):
    DESCRIPTOR = 0x31
    global_id: Any = None  # a distributed transaction's id: not supported here
    ENCODERS = (_enc_any,)


@_register
@dataclass(slots=True)
class Discharge(Composite):
    DESCRIPTOR = 0x32
    txn_id: bytes = b""
    fail: bool | None = None  # true: roll back
    ENCODERS = (enc_binary, enc_bool)


@_register
@dataclass(slots=True)
class Declared(Composite):
    DESCRIPTOR = 0x33
    txn_id: bytes = b""
    ENCODERS = (enc_binary,)


@_register
@dataclass(slots=True)
class TransactionalState(Composite):
    DESCRIPTOR = 0x34
    txn_id: bytes = b""
    outcome: Any = None  # the outcome the delivery gets if the transaction commits (None: enlisted only)
    ENCODERS = (enc_binary, _enc_any)


DESCRIBED_TYPES["amqp:declare:list"] = Declare.from_list
DESCRIBED_TYPES["amqp:discharge:list"] = Discharge.from_list
DESCRIBED_TYPES["amqp:declared:list"] = Declared.from_list
DESCRIBED_TYPES["amqp:transactional-state:list"] = TransactionalState.from_list


# ------------------------------------------------------------------------------------------ outcomes


@_register
@dataclass(slots=True)
class Received(Composite):
    DESCRIPTOR = 0x23
    section_number: int = 0
    section_offset: int = 0
    ENCODERS = (enc_uint, enc_ulong)


@_register
@dataclass(slots=True)
class Accepted(Composite):
    DESCRIPTOR = 0x24
    ENCODERS = ()


@_register
@dataclass(slots=True)
class Rejected(Composite):
    DESCRIPTOR = 0x25
    error: Error | None = None
    ENCODERS = (_enc_any,)


@_register
@dataclass(slots=True)
class Released(Composite):
    DESCRIPTOR = 0x26
    ENCODERS = ()


@_register
@dataclass(slots=True)
class Modified(Composite):
    DESCRIPTOR = 0x27
    delivery_failed: bool | None = None
    undeliverable_here: bool | None = None
    message_annotations: dict[Any, Any] | None = None
    ENCODERS = (enc_bool, enc_bool, enc_fields)


ACCEPTED_BYTES = Accepted().encode_amqp()
RELEASED_BYTES = Released().encode_amqp()


# ------------------------------------------------------------------------------------- performatives


@_register
@dataclass(slots=True)
class Open(Composite):
    DESCRIPTOR = 0x10
    container_id: str = ""
    hostname: str | None = None
    max_frame_size: int | None = None
    channel_max: int | None = None
    idle_time_out: int | None = None
    outgoing_locales: Any = None
    incoming_locales: Any = None
    offered_capabilities: Any = None
    desired_capabilities: Any = None
    properties: dict[Any, Any] | None = None
    ENCODERS = (
        enc_string,
        enc_string,
        enc_uint,
        enc_ushort,
        enc_uint,
        enc_symbols,
        enc_symbols,
        enc_symbols,
        enc_symbols,
        enc_fields,
    )


@_register
@dataclass(slots=True)
class Begin(Composite):
    DESCRIPTOR = 0x11
    remote_channel: int | None = None
    next_outgoing_id: int = 0
    incoming_window: int = 0
    outgoing_window: int = 0
    handle_max: int | None = None
    offered_capabilities: Any = None
    desired_capabilities: Any = None
    properties: dict[Any, Any] | None = None
    ENCODERS = (enc_ushort, enc_uint, enc_uint, enc_uint, enc_uint, enc_symbols, enc_symbols, enc_fields)


@_register
@dataclass(slots=True)
class Attach(Composite):
    DESCRIPTOR = 0x12
    name: str = ""
    handle: int = 0
    role: bool = False  # False: the sender of this attach is the link's sender; True: its receiver
    snd_settle_mode: int | None = None
    rcv_settle_mode: int | None = None
    source: Any = None
    target: Any = None
    unsettled: dict[Any, Any] | None = None
    incomplete_unsettled: bool | None = None
    initial_delivery_count: int | None = None
    max_message_size: int | None = None
    offered_capabilities: Any = None
    desired_capabilities: Any = None
    properties: dict[Any, Any] | None = None
    ENCODERS = (
        enc_string,
        enc_uint,
        enc_bool,
        enc_ubyte,
        enc_ubyte,
        _enc_any,
        _enc_any,
        _enc_map,
        enc_bool,
        enc_uint,
        enc_ulong,
        enc_symbols,
        enc_symbols,
        enc_fields,
    )


@_register
@dataclass(slots=True)
class Flow(Composite):
    DESCRIPTOR = 0x13
    next_incoming_id: int | None = None
    incoming_window: int = 0
    next_outgoing_id: int = 0
    outgoing_window: int = 0
    handle: int | None = None
    delivery_count: int | None = None
    link_credit: int | None = None
    available: int | None = None
    drain: bool | None = None
    echo: bool | None = None
    properties: dict[Any, Any] | None = None
    ENCODERS = (
        enc_uint,
        enc_uint,
        enc_uint,
        enc_uint,
        enc_uint,
        enc_uint,
        enc_uint,
        enc_uint,
        enc_bool,
        enc_bool,
        enc_fields,
    )


@_register
@dataclass(slots=True)
class Transfer(Composite):
    DESCRIPTOR = 0x14
    handle: int = 0
    delivery_id: int | None = None
    delivery_tag: bytes | None = None
    message_format: int | None = None
    settled: bool | None = None
    more: bool | None = None
    rcv_settle_mode: int | None = None
    state: Any = None
    resume: bool | None = None
    aborted: bool | None = None
    batchable: bool | None = None
    ENCODERS = (
        enc_uint,
        enc_uint,
        enc_binary,
        enc_uint,
        enc_bool,
        enc_bool,
        enc_ubyte,
        _enc_any,
        enc_bool,
        enc_bool,
        enc_bool,
    )


@_register
@dataclass(slots=True)
class Disposition(Composite):
    DESCRIPTOR = 0x15
    role: bool = False
    first: int = 0
    last: int | None = None
    settled: bool | None = None
    state: Any = None
    batchable: bool | None = None
    ENCODERS = (enc_bool, enc_uint, enc_uint, enc_bool, _enc_any, enc_bool)


@_register
@dataclass(slots=True)
class Detach(Composite):
    DESCRIPTOR = 0x16
    handle: int = 0
    closed: bool | None = None
    error: Error | None = None
    ENCODERS = (enc_uint, enc_bool, _enc_any)


@_register
@dataclass(slots=True)
class End(Composite):
    DESCRIPTOR = 0x17
    error: Error | None = None
    ENCODERS = (_enc_any,)


@_register
@dataclass(slots=True)
class Close(Composite):
    DESCRIPTOR = 0x18
    error: Error | None = None
    ENCODERS = (_enc_any,)


# ---------------------------------------------------------------------------------------------- SASL


@_register
@dataclass(slots=True)
class SaslMechanisms(Composite):
    DESCRIPTOR = 0x40
    sasl_server_mechanisms: Any = field(default_factory=list)
    ENCODERS = (enc_symbols,)


@_register
@dataclass(slots=True)
class SaslInit(Composite):
    DESCRIPTOR = 0x41
    mechanism: str = ""
    initial_response: bytes | None = None
    hostname: str | None = None
    ENCODERS = (enc_symbol, enc_binary, enc_string)

    def __repr__(self) -> str:  # never show credentials
        size = len(self.initial_response or b"")
        return f"SaslInit(mechanism={self.mechanism!r}, initial_response=<{size} bytes>)"


@_register
@dataclass(slots=True)
class SaslChallenge(Composite):
    DESCRIPTOR = 0x42
    challenge: bytes = b""
    ENCODERS = (enc_binary,)


@_register
@dataclass(slots=True)
class SaslResponse(Composite):
    DESCRIPTOR = 0x43
    response: bytes = b""
    ENCODERS = (enc_binary,)

    def __repr__(self) -> str:
        return f"SaslResponse(<{len(self.response)} bytes>)"


@_register
@dataclass(slots=True)
class SaslOutcome(Composite):
    DESCRIPTOR = 0x44
    code: int = 0
    additional_data: bytes | None = None
    ENCODERS = (enc_ubyte, enc_binary)


def symbols(value: Any) -> tuple[str, ...]:
    """Normalise a `multiple="true"` symbol field (absent, one symbol, or an array) to a tuple."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


__all__ = [
    "ACCEPTED_BYTES",
    "RELEASED_BYTES",
    "Accepted",
    "Attach",
    "Begin",
    "Close",
    "Coordinator",
    "Declare",
    "Declared",
    "Detach",
    "Discharge",
    "Disposition",
    "End",
    "Error",
    "Flow",
    "Modified",
    "Open",
    "Received",
    "Rejected",
    "Released",
    "SaslChallenge",
    "SaslInit",
    "SaslMechanisms",
    "SaslOutcome",
    "SaslResponse",
    "Source",
    "Symbol",
    "Target",
    "TransactionalState",
    "Transfer",
    "symbols",
]
