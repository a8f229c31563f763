"""The primary's side of replication: the service a backup attaches to, and the barrier it puts on every
confirmation once the backup is synchronized.

Seed 001 §2.2 and spec A4, in our terms. A backup (authenticated as the cluster user) attaches a link
from `REPLICATION_ADDRESS`; the primary then
1. takes a snapshot of its journal's live state between two batches (journal/replication.py) and taps
   every batch written after it;
2. sends `hello` (its node id and activation sequence), the snapshot's frames, and its committed page
   files, while traffic goes on (nothing waits for the backup yet);
3. sends `synchronized`: once the backup has it, the backup holds everything up to there, and from then on
   every confirmation (a durable send's Accepted, an acknowledgement's settlement, a mirror target's
   Accepted) also waits for the backup to have the batch it is in (the barrier), as Artemis's
   `OperationContext` waits for the replication response;
4. streams each tapped batch (`live`, with the page bytes it commits) in order.
A synchronized backup that goes away could be about to activate (this server paused, its lock lost), so
the confirmations waiting at the barrier stay held until the coordinator has *fenced* it: moved the
activation sequence on while still holding the lock, which leaves the backup's copy stale for ever. Then
they go out and the primary goes on alone; if the fence fails, they never go out and the server stops.
An unsynchronized backup could not have activated: its going releases nothing, as nothing waited for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core.amqp.performatives import Accepted, Attach
from broker_core.errors import ResourceLocked, Unauthorized
from broker_core.journal.records import PageRemoved, PageWritten
from broker_core.journal.replication import ReplicationSnapshot
from broker_core.paging.pagefile import page_name
from broker_core.persistence import Callback
from broker_core.services import OutgoingLink

from . import replication_wire as wire

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.journal.writer import Entry
    from broker_core.server import Server
    from broker_core.services import Peer

log = logging.getLogger("broker.ha")

SNAPSHOT_CHUNK = 256 * 1024  # bytes of frames per snapshot packet


class ReplicationBarrier:
    """Holds confirmations until the backup has their batch (a persistence barrier)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._waiting: deque[tuple[int, Callback]] = deque()  # (the batch it is in, release), in order

    def wait(self, release: Callback) -> bool:
        self._waiting.append((self.server.persistence.flushes + 1, release))
        return True

    @property
    def pending(self) -> int:
        return len(self._waiting)

    def covered(self, tag: int) -> None:
        """The backup has every batch up to `tag`."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= tag:
            waiting.popleft()[1]()

    def release_all(self) -> None:
        waiting, self._waiting = self._waiting, deque()
        for _, release in waiting:
            release()


class ReplicationService:
    """The `SenderService` at `REPLICATION_ADDRESS`: one backup at a time."""

    def __init__(
        self,
        server: Server,
        post: Callable[[Callback], None],
        on_change: Callable[[bool, str], None],
        activation_sequence: Callable[[], int],
        fence: Callable[[Callable[[bool], None]], None],
        sync_timeout_ms: int,
        group_name: str | None = None,
    ) -> None:
        self.server = server
        self.post = post  # run on the loop, from the journal's writer thread
        self.on_change = on_change  # (synchronized, the replica's role): a replica synchronized, or lost
        self.activation_sequence = activation_sequence
        self.fence = fence  # fence(done): make a lost synchronized backup stale, then done(ok)
        self.sync_timeout = sync_timeout_ms / 1000  # initial-replication-sync-timeout
        self.group_name = group_name
        self.feed: ReplicaFeed | None = None
        self.closing = False  # stopping cleanly: a replica that goes now is not fenced off

    @property
    def synchronized(self) -> bool:
        return self.feed is not None and self.feed.synchronized

    def attach_sender(self, peer: Peer, link: Link, attach: Attach, address: str) -> Attach:
        if not peer.cluster_member:
            log.warning("%s: replication refused to user %s: not the cluster user", peer.name, peer.user)
            raise Unauthorized("replication needs the cluster user and password")
        if self.feed is not None:
            raise ResourceLocked("a backup is replicating from this server already")
        journal = self.server.journal
        if journal is None or not self.server.persistence.enabled:
            raise Unauthorized("nothing to replicate: persistence is disabled")
        conn = peer.conn
        if conn.remote_idle_timeout_ms:
            conn.idle_timeout_ms = conn.remote_idle_timeout_ms  # its connection-ttl: a silent backup is gone
        feed = self.feed = ReplicaFeed(self, peer, link)
        link.context = OutgoingLink(feed.send, feed.settled, feed.detached)
        journal.start_replication(feed.snapshot_ready, feed.tap)
        log.info("AMQ221025: replication to backup %s started", peer.name)
        return Attach(
            name=link.name,
            role=False,
            snd_settle_mode=0,
            rcv_settle_mode=0,
            source=attach.source,
            target=attach.target,
            initial_delivery_count=0,
        )

    def ended(self, feed: ReplicaFeed) -> None:
        if self.feed is feed:
            self.feed = None

    def stopping(self, failover: bool) -> None:
        """This server stops cleanly: tell the backup whether to take over, before the connection goes.
        What waits at the barrier now waits for good (the connections close before it could be sent)."""
        self.closing = True
        if self.feed is not None:
            self.feed.say_stopping(failover)

    async def hand_over(self, timeout: float) -> bool | None:
        """Stopping cleanly, its clients gone: wait, at most `timeout` seconds, until the synchronized
        backup has every batch written so far, then tell it to take over. Whether it had them all in
        time (what it lacks was never confirmed: confirmations wait for it); None without a synchronized
        backup (nobody to hand over to: the server simply stops)."""
        feed = self.feed
        if feed is None or not feed.synchronized:
            self.stopping(failover=False)
            return None
        journal = self.server.journal
        self.server.persistence.flush()
        if journal is not None:
            journal.flush()  # everything handed over is written, so tapped: `last_tag` is final
        complete = await feed.caught_up(timeout)
        self.stopping(failover=True)
        return complete


class ReplicaFeed:
    """One backup's link: the snapshot, then the live batches, each as credit allows."""

    def __init__(self, service: ReplicationService, peer: Peer, link: Link) -> None:
        self.service = service
        self.server = service.server
        self.peer = peer
        self.link = link
        self.role = (
            link.name.split(":")[1] if link.name.count(":") >= 2 else "backup"
        )  # replication:ROLE:NAME
        self.synchronized = False
        self.barrier = ReplicationBarrier(self.server)
        self._sync: Iterator[tuple[object, bytes]] | None = None  # the snapshot's packets, as credit allows
        self._copied = False  # the snapshot's files were read
        self._live: deque[tuple[int, bytes]] = deque()  # (tag, packet), from the writer thread
        self._page_ends: dict[int, int] = {}  # how far each page was sent
        self._paging = Path(self.server.config.paging_directory)
        self._tag = 0
        self._closed = False
        self._sync_timer: asyncio.TimerHandle | None = None
        self.last_tag = 0  # the last batch tapped (writer thread)
        self.covered_tag = 0  # the last batch the backup has
        self._catching_up: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------- journal (writer thread)

    def tap(self, entries: list[Entry]) -> None:
        """Every batch written since the snapshot: its frames and the page bytes its records commit."""
        for entry in entries:
            chunks = []
            for record in entry.records:
                if type(record) is PageWritten:
                    assert isinstance(record, PageWritten)
                    chunk = self._page_chunk(record.page, record.end)
                    if chunk is not None:
                        chunks.append(chunk)
                elif type(record) is PageRemoved:
                    assert isinstance(record, PageRemoved)
                    self._page_ends.pop(record.page, None)
            self._live.append((entry.tag, wire.live(entry.tag, chunks, entry.data)))
            self.last_tag = entry.tag
        self.service.post(self.send)

    def _page_chunk(self, page: int, end: int) -> wire.PageChunk | None:
        start = self._page_ends.get(page, 0)
        if end <= start:
            return None
        try:
            fd = os.open(self._paging / page_name(page), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None  # removed since: a later PageRemoved says so
        try:
            data = os.pread(fd, end - start, start)
        finally:
            os.close(fd)
        self._page_ends[page] = start + len(data)
        return wire.PageChunk(page, start, data)

    # --------------------------------------------------------------------------- loop thread

    def snapshot_ready(self, snapshot: ReplicationSnapshot) -> None:
        self._page_ends.update({page: 0 for page in snapshot.pages})
        self._sync = self._sync_packets(snapshot)
        self.send()

    def _sync_packets(self, snapshot: ReplicationSnapshot) -> Iterator[tuple[object, bytes]]:
        server, service = self.server, self.service
        hello = wire.hello(server.node_id, service.activation_sequence(), server.name, service.group_name)
        yield "sync", hello
        for frames in snapshot.frames(SNAPSHOT_CHUNK):
            yield "sync", wire.message(wire.SNAPSHOT, frames)
        self._copied = True
        journal = server.journal
        if journal is not None:
            journal.snapshot_copied()
        for page, end in snapshot.pages.items():
            chunk = self._page_chunk(page, end)
            if chunk is not None:
                yield "sync", wire.page(chunk)
        yield "synchronized", wire.message(wire.SYNCHRONIZED, b"{}")

    def send(self) -> None:
        """Send what the link's credit allows: the snapshot first, then the live batches in order."""
        link, conn = self.link, self.peer.conn
        if self._closed or conn.closed:
            return
        sent = False
        while link.credit > 0 and self._sync is not None:
            item = next(self._sync, None)
            if item is None:
                self._sync = None
                break
            self._deliver(item[1], item[0])
            sent = True
        while link.credit > 0 and self._sync is None and self._live and self._copied:
            tag, packet = self._live.popleft()
            self._deliver(packet, tag)
            sent = True
        if sent:
            self.peer.write_out()

    def say_stopping(self, failover: bool) -> None:
        if self._closed or self.peer.conn.closed or self._sync is not None:
            return  # not synchronized: the backup could not take over anyway
        self._live.clear()
        self._deliver(wire.message(wire.STOPPING, json.dumps({"failover": failover}).encode()), "stopping")
        self.peer.write_out()

    def _deliver(self, packet: bytes, context: Any) -> None:
        if context == "synchronized":
            self._sync_timer = asyncio.get_running_loop().call_later(
                self.service.sync_timeout, self._sync_timed_out
            )
        self._tag += 1
        self.peer.conn.send_delivery(self.link, self._tag.to_bytes(8, "big"), packet, False, _Sent(context))

    # ------------------------------------------------------------------ the link (OutgoingLink)

    def settled(self, delivery: object, state: object) -> None:
        if not isinstance(delivery, _Sent):
            return
        if not isinstance(state, Accepted):
            log.error("replication: the backup refused a packet (%s); replication stops", state)
            self._end(f"the backup refused a packet ({state})")
            return
        what = delivery.context
        if what == "synchronized" and not self.synchronized:
            if self._sync_timer is not None:
                self._sync_timer.cancel()
            self.synchronized = True
            self.server.persistence.add_barrier(self.barrier)
            log.info(
                "AMQ221024: %s %s is synchronized with this server (%s)",
                self.role,
                self.peer.name,
                self.server.name,
            )
            self.service.on_change(True, self.role)
        elif isinstance(what, int):
            self.covered_tag = max(self.covered_tag, what)
            self.barrier.covered(what)
            self._check_caught_up()

    async def caught_up(self, timeout: float) -> bool:
        """Wait until the backup has every batch tapped so far (at most `timeout` seconds, and not past
        the link's end); whether it has them all."""
        target = self.last_tag
        if self.covered_tag < target and not self._closed:
            self._catching_up = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._catching_up), timeout)
            self._catching_up = None
        return self.covered_tag >= target

    def _check_caught_up(self) -> None:
        waiting = self._catching_up
        if waiting is not None and not waiting.done() and (self.covered_tag >= self.last_tag or self._closed):
            waiting.set_result(None)

    def detached(self) -> None:
        self._end("the backup went away")

    def _sync_timed_out(self) -> None:
        self._end(
            f"the backup did not confirm the end of the initial synchronization within "
            f"{self.service.sync_timeout * 1000:.0f} ms (initial-replication-sync-timeout)"
        )
        if not self.peer.conn.closed:
            self.peer.conn.fail("amqp:resource-limit-exceeded", "initial replication sync timeout")
            self.peer.write_out()

    def _end(self, why: str) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sync_timer is not None:
            self._sync_timer.cancel()
        server = self.server
        journal = server.journal
        if journal is not None:
            journal.stop_replication(self.tap)
            if not self._copied:
                journal.snapshot_copied()
        was = self.synchronized
        self.synchronized = False
        self._check_caught_up()
        self.service.ended(self)
        log.warning("AMQ222092: replication to backup %s stopped: %s", self.peer.name, why)
        if self.service.closing:
            return  # this server stops: its clients' confirmations in doubt, the replica free to take over
        if was:
            self.service.fence(self._fenced)  # the confirmations at the barrier wait for the fence
            self.service.on_change(False, self.role)
        else:
            self._release()

    def _fenced(self, ok: bool) -> None:
        if ok:
            log.info("AMQ221035: backup %s fenced off; this server goes on alone", self.peer.name)
            self._release()
        else:
            log.critical(
                "AMQ222330: backup %s may have activated (it could not be fenced off): %d confirmation(s) "
                "held back for good; this server stops",
                self.peer.name,
                self.barrier.pending,
            )

    def _release(self) -> None:
        self.server.persistence.remove_barrier(self.barrier)
        self.barrier.release_all()


class _Sent:
    __slots__ = ("context",)

    def __init__(self, context: Any) -> None:
        self.context = context
