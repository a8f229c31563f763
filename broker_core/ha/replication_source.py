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
What each replica's link goes through (copying, synchronized, fenced off when it goes, dropped when it
lags past call-timeout, handed over to on a clean stop) is replication_states.py's feed table; this module
carries its actions out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core.amqp.performatives import Accepted, Attach
from broker_core.errors import NotAllowed, ResourceLocked, Unauthorized
from broker_core.journal.records import PageRemoved, PageWritten
from broker_core.journal.replication import ReplicationSnapshot
from broker_core.paging.pagefile import page_name
from broker_core.persistence import Callback
from broker_core.services import OutgoingLink

from . import replication_wire as wire
from .replication_states import Feed, FeedAction, FeedEvent, feed_step

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.journal.writer import Entry
    from broker_core.server import Server
    from broker_core.services import Peer

log = logging.getLogger("broker.ha")

SNAPSHOT_CHUNK = 256 * 1024  # bytes of frames per snapshot packet
GROUP_NAME = "group-name"  # a backup's attach property: the group-name it replicates within


class ReplicationBarrier:
    """Holds confirmations until the backup has their batch (a persistence barrier)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        # (the batch it is in, release, since when it waits), in order
        self._waiting: deque[tuple[int, Callback, float]] = deque()

    def wait(self, release: Callback) -> bool:
        self._waiting.append((self.server.persistence.flushes + 1, release, time.monotonic()))
        return True

    @property
    def pending(self) -> int:
        return len(self._waiting)

    def oldest_wait(self) -> float:
        """Seconds the oldest held confirmation has waited (0 when none waits)."""
        return time.monotonic() - self._waiting[0][2] if self._waiting else 0.0

    def covered(self, tag: int) -> None:
        """The backup has every batch up to `tag`."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= tag:
            waiting.popleft()[1]()

    def release_all(self) -> None:
        waiting, self._waiting = self._waiting, deque()
        for _, release, _since in waiting:
            release()


@dataclass(frozen=True)
class ReplicationSettings:
    """What the replication service reads of the configuration (the reference's defaults)."""

    sync_timeout_ms: int = 30000  # initial-replication-sync-timeout
    call_timeout_ms: int = 30000  # the cluster connection's call-timeout: how long a replica may lag
    group_name: str | None = None  # a backup of another group-name is refused
    connection_ttl_override: int = -1  # when set, a replica silent for this long is gone


class ReplicationService:
    """The `SenderService` at `REPLICATION_ADDRESS`: one backup at a time."""

    def __init__(
        self,
        server: Server,
        post: Callable[[Callback], None],
        on_change: Callable[[bool, str], None],
        activation_sequence: Callable[[], int],
        fence: Callable[[Callable[[bool], None]], None],
        settings: ReplicationSettings = ReplicationSettings(),
    ) -> None:
        self.server = server
        self.post = post  # run on the loop, from the journal's writer thread
        self.on_change = on_change  # (synchronized, the replica's role): a replica synchronized, or lost
        self.activation_sequence = activation_sequence
        self.fence = fence  # fence(done): make a lost synchronized backup stale, then done(ok)
        self.settings = settings
        self.sync_timeout = settings.sync_timeout_ms / 1000
        self.call_timeout = settings.call_timeout_ms / 1000
        self.group_name = settings.group_name
        self.feed: ReplicaFeed | None = None
        self.dropped_lagging = 0  # replicas dropped for lagging past call-timeout (a metric)

    @property
    def synchronized(self) -> bool:
        return self.feed is not None and self.feed.synchronized

    def attach_sender(self, peer: Peer, link: Link, attach: Attach, address: str) -> Attach:
        if not peer.cluster_member:
            log.warning("%s: replication refused to user %s: not the cluster user", peer.name, peer.user)
            raise Unauthorized("replication needs the cluster user and password")
        theirs = (attach.properties or {}).get(GROUP_NAME)
        if theirs is not None and theirs != self.group_name:
            ours = self.group_name
            log.info("replication refused to %s: its group-name %r, not %r", peer.name, theirs, ours)
            raise NotAllowed(f"group-name {theirs!r} does not match this server's {self.group_name!r}")
        if self.feed is not None:
            other = self.feed.peer.name
            log.info("replication refused to %s: %s replicates from this server already", peer.name, other)
            raise ResourceLocked("a backup is replicating from this server already")
        journal = self.server.journal
        if journal is None or not self.server.persistence.enabled:
            raise Unauthorized("nothing to replicate: persistence is disabled")
        conn = peer.conn
        override = self.settings.connection_ttl_override
        if override > 0:
            conn.idle_timeout_ms = override  # connection-ttl-override: the server's word, not the backup's
        elif conn.remote_idle_timeout_ms:
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
        feed = self.feed
        if feed is not None:
            feed.on(FeedEvent.SERVER_STOPPING)
            feed.say_stopping(failover)

    async def hand_over(self, timeout: float) -> bool | None:
        """Stopping cleanly, its clients gone: wait, at most `timeout` seconds, until the synchronized
        backup has every batch written so far, then tell it to take over. Whether it had them all in
        time (what it lacks was never confirmed: confirmations wait for it); None without a synchronized
        backup (nobody to hand over to: the server simply stops)."""
        feed = self.feed
        if feed is None or not feed.synchronized:
            self.stopping(failover=False)
            return None
        feed.on(FeedEvent.SERVER_STOPPING)  # a replica that goes from now on is not fenced: it takes over
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
        self.state = Feed.COPYING
        self.held = False  # its barrier is on the server's confirmations (it was synchronized)
        self.barrier = ReplicationBarrier(self.server)
        self._lag_timer: asyncio.TimerHandle | None = None
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

    @property
    def synchronized(self) -> bool:
        return self.held and self.state in (Feed.SYNCHRONIZED, Feed.STOPPING)

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
            self.on(FeedEvent.LINK_LOST, f"the backup refused a packet ({state})")
            return
        what = delivery.context
        if what == "synchronized":
            self.on(FeedEvent.COPY_CONFIRMED)
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
        self.on(FeedEvent.LINK_LOST, "the backup went away")

    def _sync_timed_out(self) -> None:
        self.on(
            FeedEvent.COPY_TIMED_OUT,
            f"the backup did not confirm the end of the initial synchronization within "
            f"{self.service.sync_timeout * 1000:.0f} ms (initial-replication-sync-timeout)",
        )

    def _watch_lag(self) -> None:
        """While synchronized: a confirmation held for this replica past call-timeout drops it."""
        self._lag_timer = None
        if self.state != Feed.SYNCHRONIZED:
            return
        waited = self.barrier.oldest_wait()
        if waited > self.service.call_timeout:
            self.on(
                FeedEvent.LAGGING,
                f"a confirmation has waited {waited * 1000:.0f} ms for it (call-timeout "
                f"{self.service.call_timeout * 1000:.0f} ms)",
            )
            return
        every = min(1.0, max(self.service.call_timeout / 4, 0.01))
        self._lag_timer = asyncio.get_running_loop().call_later(every, self._watch_lag)

    # ------------------------------------------------------------------ the feed table's actions

    def on(self, event: FeedEvent, why: str = "") -> None:
        step = feed_step(self.state, event)
        self.state = step.state
        for action in step.actions:
            self._act(action, why)

    def _act(self, action: FeedAction, why: str) -> None:
        name = self.peer.name
        if action == FeedAction.HOLD_CONFIRMATIONS:
            if self._sync_timer is not None:
                self._sync_timer.cancel()
            self.held = True
            self.server.persistence.add_barrier(self.barrier)
            log.info(
                "AMQ221024: %s %s is synchronized with this server (%s)", self.role, name, self.server.name
            )
            self.service.on_change(True, self.role)
            self._watch_lag()
        elif action == FeedAction.SAY_LAGGING:
            self.service.dropped_lagging += 1
            log.warning(
                "AMQ222207: backup %s is not responding promptly (%s): it is disconnected and fenced off, "
                "and this server goes on alone",
                name,
                why,
            )
        elif action == FeedAction.DISCONNECT:
            self._detach()
            if not self.peer.conn.closed:
                self.peer.conn.fail("amqp:resource-limit-exceeded", why)
                self.peer.write_out()
        elif action == FeedAction.SAY_ENDED:
            self._detach()
            log.warning("AMQ222092: replication to backup %s stopped: %s", name, why)
        elif action == FeedAction.FENCE:
            self._detach()
            self.service.fence(self._fenced)  # the confirmations at the barrier wait for the fence
            self.service.on_change(False, self.role)
        elif action == FeedAction.RELEASE:
            log.info("AMQ221035: backup %s fenced off; this server goes on alone", name)
            self.server.persistence.remove_barrier(self.barrier)
            self.barrier.release_all()
        elif action == FeedAction.HALT:
            log.critical(
                "AMQ222330: backup %s may have activated (it could not be fenced off): %d confirmation(s) "
                "held back for good; this server stops",
                name,
                self.barrier.pending,
            )

    def _fenced(self, ok: bool) -> None:
        self.on(FeedEvent.FENCED if ok else FeedEvent.FENCE_FAILED)

    def _detach(self) -> None:
        """The link's end, whatever ends it: the journal stops tapping for it (once)."""
        if self._closed:
            return
        self._closed = True
        for timer in (self._sync_timer, self._lag_timer):
            if timer is not None:
                timer.cancel()
        journal = self.server.journal
        if journal is not None:
            journal.stop_replication(self.tap)
            if not self._copied:
                journal.snapshot_copied()
        self._check_caught_up()
        self.service.ended(self)


class _Sent:
    __slots__ = ("context",)

    def __init__(self, context: Any) -> None:
        self.context = context
