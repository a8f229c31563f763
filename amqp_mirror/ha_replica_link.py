"""The link policy of a replication connection (amqp_mirror/ha_replication.py): one receiving link
from the active server's stream into the replica, each packet settled once applied, credit kept up."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core.amqp.codec import Symbol
from broker_core.amqp.performatives import ACCEPTED_BYTES, Attach, Source, Target
from broker_core.ha.replica import Replica
from broker_core.ha.replication_source import GROUP_NAME
from broker_core.ha.replication_wire import REPLICATION_ADDRESS, ReplicationFormatError
from connections.policies import ConnectError, LinkHost, LinkRole

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link

log = logging.getLogger("broker.ha")

REPLICA_CREDIT = 100


class ReplicaPolicy:
    """The link policy of a replication connection: one receiving link from the primary's stream."""

    def __init__(
        self,
        replica: Replica,
        name: str,
        group_name: str | None = None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.replica = replica
        self.name = name
        self.group_name = group_name  # said in the attach: a primary of another group refuses it
        self.on_lost = on_lost
        self._streaming = False
        self._pending = 0

    def install(self) -> None:
        pass

    def attach_all(self, conn: LinkHost) -> None:
        attach = Attach(
            name=self.name,
            role=True,
            snd_settle_mode=0,
            rcv_settle_mode=0,
            source=Source(address=REPLICATION_ADDRESS),
            target=Target(),
            properties={Symbol(GROUP_NAME): self.group_name} if self.group_name is not None else None,
        )
        conn.attach(attach, LinkRole(self))
        self._pending = 1

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        self._pending = 0
        answer = link.remote_attach
        if answer is None or answer.source is None:
            raise ConnectError("the server refused replication (another backup, another group-name, or the "
                               "cluster user and password)")  # fmt: skip
        self._streaming = True
        engine = conn.conn
        if engine is not None:
            engine.flow(link, credit=REPLICA_CREDIT)
            conn.mark_dirty()

    def local_queue_added(self, conn: LinkHost, queue: Any) -> None:
        pass

    def on_delivery(
        self, conn: LinkHost, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        engine, session = conn.conn, link.session

        def applied() -> None:
            if conn.conn is engine and engine is not None and not link.closed_locally:
                session.incoming_unsettled.pop(delivery_id, None)
                engine.settle_incoming(session, delivery_id, delivery_id, ACCEPTED_BYTES)
                if link.credit <= REPLICA_CREDIT // 2:
                    engine.flow(link, credit=REPLICA_CREDIT)
                conn.mark_dirty()

        try:
            self.replica.apply(payload, applied)
        except (ReplicationFormatError, OSError, ValueError) as exc:
            log.error("AMQ222329: replication packet not applied (%s); replicating again from the start", exc)
            if engine is not None:
                engine.close("amqp:internal-error", f"replication packet not applied: {exc}")
                conn.mark_dirty()

    def on_outcome(self, conn: LinkHost, link: Link, context: Any, state: Any) -> None:
        pass

    def outcomes_done(self, conn: LinkHost) -> None:
        pass

    def on_flow(self, conn: LinkHost, link: Link) -> None:
        pass

    def detached_all(self, conn: LinkHost) -> None:
        self._pending = 0
        if self._streaming:
            self._streaming = False
            self.on_lost()

    def pending(self) -> int:
        return self._pending
