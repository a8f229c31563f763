"""Deliveries still arriving, as the broker keeps them: in memory while small, then in a spool file.

A delivery may span many transfer frames, and a producer may leave one unfinished on every link it has.
So, as Artemis streams AMQP messages larger than the acceptor's `amqpMinLargeMessageSize` (100 KiB by
default; -1: never) to its large-messages directory, a delivery that grows past it goes on in a file in
`<large-messages-directory>`, frame by frame: what is in flight costs the broker disk, not memory.
What a delivery keeps in memory counts against `global-max-size`, and while the broker is over it a
delivery goes to its file from its next frame on, whatever its size.

Its owner judges the delivery as it grows (a size its address would refuse, a disk past its limits):
refused, it is answered at once (`amqp:resource-limit-exceeded`) and the rest of its frames are dropped
as they come. The file goes when the delivery completes (it is read back whole and routed as any other
message), is aborted or refused, or its link or connection goes; files left by a crash go at start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from .amqp.transfers import check_size
from .errors import BrokerError, ResourceLimitExceeded
from .usage import Budget

SUFFIX = ".partial"

# What the owner of a delivery says of its size so far (and whether it is on disk): None, or why it
# must be refused.
Judge = Callable[[int, bool], BrokerError | None]


class Spool:
    """The spool files of one server, in its large-messages directory."""

    def __init__(
        self, directory: Path, budget: Budget, wrote: Callable[[int], None], log: logging.Logger
    ) -> None:
        self.directory = directory
        self.budget = budget
        self.wrote = wrote  # the disk's estimate: bytes added (negative: freed) there
        self.log = log
        self.next = 0
        self.files = 0  # spool files open now
        self.bytes = 0  # bytes in them

    def clear_leftovers(self) -> None:
        """At start: spool files of deliveries a crash cut short (none of them was Accepted)."""
        if not self.directory.is_dir():
            return
        removed = 0
        for path in self.directory.iterdir():
            if path.name.endswith(SUFFIX):
                path.unlink(missing_ok=True)
                removed += 1
        if removed:
            self.log.info(
                "large messages: removed %d spool files of deliveries cut short by a stop or a crash in %s",
                removed,
                self.directory,
            )

    def create(self) -> tuple[int, Path]:
        """A new, empty spool file: its descriptor and path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            self.next += 1
            path = self.directory / f"delivery-{self.next:012d}{SUFFIX}"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue
            self.files += 1
            return fd, path


class SpooledDelivery:
    """One delivery whose frames are still arriving (the engine's `PartialDelivery`)."""

    __slots__ = (
        "_chunks",
        "_fd",
        "_held",
        "_judge",
        "_on_disk",
        "_path",
        "_refuse",
        "_spool",
        "_threshold",
        "delivery_id",
        "message_format",
        "refused",
        "settled",
        "size",
        "tag",
    )

    def __init__(
        self,
        spool: Spool,
        threshold: int,
        judge: Judge | None,
        refuse: Callable[[SpooledDelivery, BrokerError], None],
        delivery_id: int,
        tag: bytes,
        settled: bool,
        first: bytes,
        message_format: int,
    ) -> None:
        self._spool = spool
        self._threshold = threshold  # spool past this size (-1: never)
        self._judge = judge
        self._refuse = refuse
        self.delivery_id = delivery_id
        self.tag = tag
        self.settled = settled
        self.message_format = message_format
        self.refused = False
        self.size = 0
        self._chunks: list[bytes] = []
        self._held = 0  # bytes in `_chunks`, counted against the global budget
        self._fd = -1
        self._path: Path | None = None
        self._on_disk = 0
        self.add(first, settled)

    def add(self, payload: bytes, settled: bool) -> None:
        self.settled = self.settled or settled
        if self.refused:
            return  # answered already: the rest of its frames are dropped
        self.size += len(payload)
        budget = self._spool.budget
        if self._fd < 0 and self._threshold >= 0 and (self.size > self._threshold or budget.over(0)):
            self._spill()
            if self.refused:
                return
        judge = self._judge
        error = judge(self.size, self._fd >= 0) if judge is not None else None
        if error is not None:
            self.refuse(error)
            return
        if self._fd >= 0:
            self._write(payload)
            return
        self._chunks.append(payload)
        self._held += len(payload)
        budget.hold(len(payload))

    def check_size(self, link_name: str, max_message_size: int) -> None:
        check_size(self.size, link_name, max_message_size)

    def payload(self) -> bytes:
        """The whole delivery (read back from its file if it has one)."""
        if self._fd < 0:
            return b"".join(self._chunks)
        try:
            data = os.pread(self._fd, self._on_disk, 0)
            while len(data) < self._on_disk:  # a short read: rare on a regular file
                more = os.pread(self._fd, self._on_disk - len(data), len(data))
                if not more:
                    raise OSError(f"{self._path} ends at {len(data)} of {self._on_disk} bytes")
                data += more
        except OSError as exc:
            self.refuse(
                ResourceLimitExceeded(f"the delivery could not be read back from its spool file: {exc}")
            )
            return b""
        return data

    def refuse(self, error: BrokerError) -> None:
        """Answer the delivery with `error` now and drop what it holds; later frames are dropped."""
        if self.refused:
            return
        self.refused = True
        self.discard()
        self._refuse(self, error)

    def discard(self) -> None:
        """Let go of what the delivery holds: its memory, its file. (Once; it may be called again.)"""
        if self._held:
            self._release()
        if self._fd >= 0:
            spool = self._spool
            os.close(self._fd)
            self._fd = -1
            if self._path is not None:
                self._path.unlink(missing_ok=True)
            spool.files -= 1
            spool.bytes -= self._on_disk
            spool.wrote(-self._on_disk)

    def _spill(self) -> None:
        """From now on in a file: what was kept in memory goes there first."""
        spool = self._spool
        try:
            self._fd, self._path = spool.create()
        except OSError as exc:
            self.refuse(ResourceLimitExceeded(f"the delivery could not be spooled: {exc.strerror or exc}"))
            return
        chunks, self._chunks = self._chunks, []
        self._release()
        for chunk in chunks:
            self._write(chunk)

    def _write(self, data: bytes) -> None:
        if self.refused:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._spool.log.warning(
                "large messages: a delivery of %d bytes so far could not be spooled (%s): refused",
                self.size,
                exc.strerror or exc,
            )
            self.refuse(ResourceLimitExceeded(f"the delivery could not be spooled: {exc.strerror or exc}"))
            return
        self._on_disk += len(data)
        self._spool.bytes += len(data)
        self._spool.wrote(len(data))

    def _release(self) -> None:
        held, self._held = self._held, 0
        self._spool.budget.release(held)
