"""Deliveries on the wire: a message assembled from its transfer frames, and disposition frames.

A delivery may span many transfer frames (`more`); it reaches the handler once, whole. Its size is
checked against the link's max-message-size as the frames arrive, not after.
"""

from __future__ import annotations

from . import errors
from .codec import enc_list_of_encoded, enc_uint
from .framing import frame

_DESC_DISPOSITION = b"\x00\x53\x15"


class Partial:
    """A delivery whose frames are still arriving."""

    __slots__ = ("chunks", "delivery_id", "message_format", "settled", "size", "tag")

    def __init__(
        self, delivery_id: int, tag: bytes, settled: bool, first: bytes, message_format: int
    ) -> None:
        self.delivery_id = delivery_id
        self.tag = tag
        self.settled = settled
        self.message_format = message_format
        self.chunks = [first]
        self.size = len(first)

    def add(self, payload: bytes, settled: bool) -> None:
        self.chunks.append(payload)
        self.size += len(payload)
        self.settled = self.settled or settled

    def check_size(self, link_name: str, max_message_size: int) -> None:
        if max_message_size and self.size > max_message_size:
            raise errors.ProtocolError(
                errors.MESSAGE_SIZE_EXCEEDED,
                f"message on link {link_name!r} exceeds max-message-size {max_message_size}",
            )

    def payload(self) -> bytes:
        return b"".join(self.chunks)


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
