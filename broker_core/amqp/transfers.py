"""Deliveries on the wire: a message assembled from its transfer frames, and disposition frames.

A delivery may span many transfer frames (`more`); it reaches the handler once, whole. Its size is
checked against the link's max-message-size as the frames arrive, not after. Where its frames wait
meanwhile is up to the connection's owner (`PartialDelivery`); by default, in memory.
"""

from __future__ import annotations

from typing import Protocol

from . import errors
from .codec import enc_list_of_encoded, enc_uint
from .endpoints import Link
from .framing import frame

_DESC_DISPOSITION = b"\x00\x53\x15"


class PartialDelivery(Protocol):
    """A delivery whose frames are still arriving, as its link's owner keeps it (`Connection`'s
    `partials`: the broker spools large ones to disk). The engine adds each frame's payload, checks the
    size against the link's max-message-size, and once the last frame is in takes `payload()`, unless
    the owner `refused` it meanwhile (answered it already; its later frames are dropped). `discard()`
    lets go of what it holds: after completion, on abort, and when its link or connection goes."""

    delivery_id: int
    tag: bytes
    settled: bool
    message_format: int
    size: int
    refused: bool

    def add(self, payload: bytes, settled: bool) -> None: ...
    def check_size(self, link_name: str, max_message_size: int) -> None: ...
    def payload(self) -> bytes: ...
    def discard(self) -> None: ...


class Partial:
    """A delivery whose frames are still arriving, in memory (the engine's own `PartialDelivery`)."""

    __slots__ = ("chunks", "delivery_id", "message_format", "refused", "settled", "size", "tag")

    def __init__(
        self, delivery_id: int, tag: bytes, settled: bool, first: bytes, message_format: int
    ) -> None:
        self.delivery_id = delivery_id
        self.tag = tag
        self.settled = settled
        self.message_format = message_format
        self.refused = False
        self.chunks = [first]
        self.size = len(first)

    def add(self, payload: bytes, settled: bool) -> None:
        self.chunks.append(payload)
        self.size += len(payload)
        self.settled = self.settled or settled

    def check_size(self, link_name: str, max_message_size: int) -> None:
        check_size(self.size, link_name, max_message_size)

    def payload(self) -> bytes:
        return b"".join(self.chunks)

    def discard(self) -> None:
        self.chunks = []


def in_memory(link: Link, delivery_id: int, tag: bytes, settled: bool, first: bytes, fmt: int) -> Partial:
    """The engine's default for a multi-frame delivery: assembled in memory."""
    return Partial(delivery_id, tag, settled, first, fmt)


def check_size(size: int, link_name: str, max_message_size: int) -> None:
    if max_message_size and size > max_message_size:
        raise errors.ProtocolError(
            errors.MESSAGE_SIZE_EXCEEDED,
            f"message on link {link_name!r} exceeds max-message-size {max_message_size}",
        )


def disposition_frame(
    channel: int, role: bool, first: int, last: int, state: bytes | None, settled: bool = True
) -> bytes:
    """A disposition of deliveries [first, last]; `state` is an encoded delivery state (or None)."""
    fields = [b"\x41" if role else b"\x42", enc_uint(first)]
    fields.append(enc_uint(last) if last != first else b"\x40")
    fields.append(b"\x41" if settled else b"\x42")
    if state is not None:
        fields.append(state)
    return frame(channel, _DESC_DISPOSITION + enc_list_of_encoded(fields))
