"""What an active server of a cluster says of itself to the other members, and the votes it casts: the
`SenderService` at `CLUSTER_ADDRESS`.

A member (amqp_mirror/ha_cluster.py) attaches a receiving link from `CLUSTER_ADDRESS` as the cluster
user; the answering attach carries, in its properties, this server's node id and the connector the
others reach it at, its activation sequence and whether it activated by winning a vote, and the newest
activation sequence it has seen per node id: it is active with that node id for as long as the link
lives (the connection goes with the server). A vote is the same attach with a question in its
properties (quorum.py's `Question`, the node id asked about, the asker's connector and activation
sequence); the answer's properties carry the vote.
Nothing is ever sent on the link: the attach exchange is the whole conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from broker_core.amqp.codec import Symbol
from broker_core.amqp.performatives import Attach
from broker_core.errors import Unauthorized
from broker_core.services import OutgoingLink, Peer

from .quorum import Promise, Question, answer, promised

if TYPE_CHECKING:
    from broker_core.amqp.connection import Link
    from broker_core.config.model import BrokerConfig

log = logging.getLogger("broker.ha")

CLUSTER_ADDRESS = "$amqp-mirror.cluster"
NODE_ID = Symbol("node-id")  # the answering server's node id (the node it is active with)
CONNECTOR = Symbol("connector")  # host:port, as the other members reach it
GROUP_NAME = Symbol("group-name")
QUESTION = Symbol("question")  # a vote: quorum.Question's value
ASKED_NODE = Symbol("asked-node-id")
ASKER_CONNECTOR = Symbol("asker-connector")
ASKER_SEQUENCE = Symbol("asker-activation-sequence")
VOTE = Symbol("vote")  # the answer: True or False
SEQUENCE = Symbol("activation-sequence")  # the answering server's, as it is active
BY_VOTE = Symbol("activated-by-vote")  # True: it took over by winning a vote
NEWEST = Symbol("newest-activations")  # node id -> the newest activation sequence it has seen active


def own_connector(config: BrokerConfig) -> str:
    """host:port of this server as the others reach it: its cluster connection's connector-ref, else its
    first acceptor."""
    cluster = config.cluster_connection()
    ref = cluster.connector_ref if cluster is not None else None
    for connector in config.connectors:
        if connector.name == ref:
            return f"{connector.host}:{connector.port}"
    acceptor = config.acceptors[0] if config.acceptors else None
    return f"{acceptor.host}:{acceptor.port}" if acceptor is not None else config.name


def _nothing() -> None:
    pass


def _nothing_settled(context: object, state: object) -> None:
    pass


class ClusterService:
    """Answers the members' attaches: who this server is, and its votes."""

    def __init__(
        self,
        name: str,
        node_id: str,
        connector: str,
        group_name: str | None,
        topology: Callable[[], Mapping[str, str]],
        on_vote: Callable[[Question, bool], None],
        voter: bool = True,
        sequence: Callable[[], int] = lambda: 0,
        by_vote: Callable[[], bool] = lambda: False,
        newest: Callable[[], Mapping[str, int]] = dict,
        promises: Callable[[], dict[str, Promise]] = dict,
    ) -> None:
        self.name = name
        self.node_id = node_id
        self.connector = connector
        self.group_name = group_name
        self.topology = topology  # node id -> the connector active with it, as this server sees it
        self.on_vote = on_vote  # counted for the metrics
        # a server outside quorum voting (primary-only: it says who it is, for a scale-down) casts none
        self.voter = voter
        self.sequence = sequence  # this server's activation sequence
        self.by_vote = by_vote
        self.newest = newest  # node id -> the newest activation sequence this server has seen active
        self.promises = promises  # node id -> the sequence this server let a primary move on to

    def attach_sender(self, peer: Peer, link: Link, attach: Attach, address: str) -> Attach:
        if not peer.cluster_member:
            raise Unauthorized("the cluster connection needs the cluster user and password")
        properties: dict[Symbol, object] = {
            NODE_ID: self.node_id,
            CONNECTOR: self.connector,
            SEQUENCE: self.sequence(),
            BY_VOTE: self.by_vote(),
            NEWEST: dict(self.newest()),
        }
        if self.group_name is not None:
            properties[GROUP_NAME] = self.group_name
        asked = attach.properties or {}
        question = asked.get(QUESTION)
        if question is not None and self.voter:
            properties[VOTE] = self._vote(peer, str(question), str(asked.get(ASKED_NODE)), asked)
        link.context = OutgoingLink(_nothing, _nothing_settled, _nothing)
        return Attach(
            name=link.name,
            role=False,
            snd_settle_mode=1,
            rcv_settle_mode=0,
            source=attach.source,
            target=attach.target,
            initial_delivery_count=0,
            properties=properties,
        )

    def _vote(self, peer: Peer, question: str, node_id: str, asked: Mapping[object, object]) -> bool:
        try:
            kind = Question(question)
        except ValueError:
            log.warning("%s: a vote from %s on an unknown question %r: no", self.name, peer.name, question)
            return False
        connector = str(asked.get(ASKER_CONNECTOR) or "")
        sequence = asked.get(ASKER_SEQUENCE)
        asker_sequence = sequence if isinstance(sequence, int) else 0
        topology = self.topology()
        newest = self.newest().get(node_id, 0)
        promises = self.promises()
        pending = promises.get(node_id)
        vote = answer(kind, node_id, connector, topology, asker_sequence, newest, pending)
        promise = promised(kind, vote, asker_sequence, connector)
        if promise is not None:
            promises[node_id] = promise
        seen = topology.get(node_id)
        log.info(
            "AMQ951101: %s votes %s to %s on %s %s with activation sequence %d (it sees that node id %s; "
            "the newest activation it has seen of it: %d%s)",
            self.name,
            "yes" if vote else "no",
            peer.name,
            kind.value,
            node_id + (f" at {connector}" if kind == Question.STAY_ACTIVE else ""),
            asker_sequence,
            f"active at {seen}" if seen is not None else "active nowhere",
            newest,
            f"; it let {pending.connector} move on to {pending.sequence}" if pending is not None else "",
        )
        self.on_vote(kind, vote)
        return vote
