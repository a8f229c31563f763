"""Views of what the scripted peer receives (performatives, message sections, deliveries) and LinkReply.

`parse_frame` lives here rather than in codec.py because it builds a `Frame`: keeping it next to the
class lets codec.py stay free of imports from this package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tests.support.peer.codec import FIELDS, composite_fields, decode_one, descriptor_code


@dataclass
class Frame:
    """One received performative; `fields` by spec name with proton types, absent fields are None."""

    code: int
    channel: int
    fields: dict[str, Any]
    raw: list[Any]
    payload: bytes = b""

    @property
    def name(self) -> str:
        return FIELDS[self.code][0] if self.code in FIELDS else hex(self.code)

    def __getitem__(self, key: str) -> Any:
        return self.fields.get(key)

    def terminus(self, which: str) -> dict[str, Any] | None:
        """`source` / `target` of an attach as a field dict."""
        return composite_fields(self.fields[which])

    @property
    def state(self) -> str | None:
        """Outcome name of a disposition or transfer state ("accepted", ...)."""
        code = descriptor_code(self.fields.get("state"))
        return None if code is None else FIELDS[code][0]


def parse_frame(channel: int, body: bytes) -> Frame:
    value, used = decode_one(body)
    code = descriptor_code(value)
    if code is None:
        raise ValueError(f"frame body is not a described performative: {value!r}")
    raw = list(value.value) if isinstance(value.value, list) else [value.value]
    names = FIELDS.get(code, ("", ()))[1]
    fields = {name: (raw[i] if i < len(raw) else None) for i, name in enumerate(names)}
    return Frame(code, channel, fields, raw, bytes(body[used:]))


@dataclass
class Section:
    code: int
    value: Any  # the section's value (a proton object), without the descriptor
    raw: bytes


def decode_sections(payload: bytes) -> list[Section]:
    out, pos = [], 0
    while pos < len(payload):
        value, used = decode_one(payload[pos:])
        code = descriptor_code(value)
        out.append(Section(code if code is not None else -1, value.value, bytes(payload[pos : pos + used])))
        pos += used
    return out


class Settles(Protocol):
    """The connection a delivery came on (a `PeerConnection`), typed structurally so that this module
    need not import connection.py, which imports this one."""

    def settle(self, transfer: TransferRecord, outcome: str = "accepted", channel: int = 0) -> None: ...


@dataclass
class TransferRecord:
    link: str
    handle: int
    delivery_id: int
    delivery_tag: bytes
    message_format: int
    settled: bool
    payload: bytes
    frames: int
    connection: Settles

    @property
    def sections(self) -> list[Section]:
        return decode_sections(self.payload)

    def section(self, code: int) -> Any:
        for s in self.sections:
            if s.code == code:
                return s.value
        return None

    @property
    def delivery_annotations(self) -> Any:
        return self.section(0x71)

    @property
    def message_annotations(self) -> Any:
        return self.section(0x72)

    @property
    def amqp_value(self) -> Any:
        return self.section(0x77)


@dataclass
class LinkReply:
    """How the server answers one attach and treats the link's deliveries."""

    offered_capabilities: Sequence[str] | None = None
    properties: dict[str, Any] | None = None  # keys sent as symbols, values as given (str -> string)
    refuse: bool = False  # answer with a null terminus, then detach with the error below
    error_condition: str = "amqp:not-found"
    error_description: str = "refused by the scripted peer"
    credit: int = 1000
    outcome: str = "accepted"  # accepted | released | rejected | modified | hold (no disposition)

    @classmethod
    def mirror_target(cls, node_id: str, **overrides: Any) -> LinkReply:
        """What an Artemis mirror target answers (never offering core tunnelling)."""
        kwargs: dict[str, Any] = {
            "offered_capabilities": ["amq.mirror"],
            "properties": {"x-opt-amq-bkr-id": node_id},
        }
        kwargs.update(overrides)
        return cls(**kwargs)


Reply = LinkReply | Callable[[Frame], LinkReply]
