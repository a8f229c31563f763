"""Attach frames of the Artemis mirror link, both ends, and the checks each end makes (pure).

Source side (we mirror to a target): `mirror_source_attach` builds the sender attach exactly as an
Artemis broker connection does; `check_target_answer` applies Artemis's four checks to the answer and
returns the error text Artemis logs (each one is a connect-phase failure: tear down, retry).
Target side (a source mirrors to us): `mirror_refusal` decides whether to refuse the link (the inbound
endpoint answers a refusal as for any link: a null terminus, then a detach with the error) and
`mirror_target_answer` builds the accepting answer.

Core message tunnelling: we never desire `AMQ_CORE_MESSAGE_TUNNELING` as a source, because we have
no Core messages to tunnel (everything we store is AMQP), and we never offer it as a target, because we
cannot decode Artemis's Core encoding (message-format 0x468C0100); not offering it makes an Artemis
source convert Core and OpenWire messages to AMQP before sending.
"""

from __future__ import annotations

from typing import Any

from broker_core.amqp import errors
from broker_core.amqp.performatives import Attach, Source, Target, symbols
from broker_core.errors import BrokerError, Unauthorized

from .wire import BROKER_ID, CORE_MESSAGE_TUNNELING_SUPPORT, MIRROR_CAPABILITY, snf_name

SENDER = False  # AMQP attach `role` values
RECEIVER = True
SND_UNSETTLED = 0
RCV_FIRST = 0


def mirror_link_name(connection_name: str, link_uuid: str) -> str:
    return f"{snf_name(connection_name)}:{link_uuid}"


def mirror_source_attach(
    connection_name: str, node_id: str, link_uuid: str, *, handle: int = 0, tunnel_core: bool = False
) -> Attach:
    """The mirror sender's attach (spec 1.2); `tunnel_core` exists only to mimic Artemis in tests."""
    snf = snf_name(connection_name)
    desired = [MIRROR_CAPABILITY, CORE_MESSAGE_TUNNELING_SUPPORT] if tunnel_core else [MIRROR_CAPABILITY]
    return Attach(
        name=mirror_link_name(connection_name, link_uuid),
        handle=handle,
        role=SENDER,
        snd_settle_mode=SND_UNSETTLED,
        rcv_settle_mode=RCV_FIRST,
        source=Source(address=snf),
        target=Target(address=snf),
        initial_delivery_count=0,
        desired_capabilities=desired,
        properties={BROKER_ID: str(node_id)},
    )


def remote_broker_id(answer: Attach) -> Any:
    """The peer's `x-opt-amq-bkr-id` link property (None when absent)."""
    return (answer.properties or {}).get(BROKER_ID)


def check_target_answer(answer: Attach, own_node_id: str, *, address: str | None = None) -> str | None:
    """Artemis's checks of the target's answer, in order; returns the error text or None when usable.

    `address` is our target address, for the refusal text; by default it is read off the link name.
    """
    if answer.target is None:
        refused = address if address is not None else answer.name.rsplit(":", 1)[0]
        return f"AMQ119023: Sender link refused for address {refused}"
    if MIRROR_CAPABILITY not in symbols(answer.offered_capabilities):
        return f"AMQ119018: link is missing an offered capability declaration [{MIRROR_CAPABILITY}]"
    if answer.properties is None or BROKER_ID not in answer.properties:
        return "AMQ119019: There is no brokerID defined on the target connection. Connection will be closed."
    if remote_broker_id(answer) == own_node_id:
        return "AMQ119022: The broker connection is trying to connect to itself. Check your configuration."
    return None


def mirror_refusal(remote: Attach) -> BrokerError | None:
    """Why a mirror-address link must be refused (it lacks desired `amq.mirror`, or names no broker
    id), or None. The SEND permission check comes first in Artemis; see `send_permission_refusal`."""
    if MIRROR_CAPABILITY not in symbols(remote.desired_capabilities):
        why = f"AMQ119024: link is missing a desired capability declaration {MIRROR_CAPABILITY}"
        return BrokerError(errors.ILLEGAL_STATE, why)
    if not remote_broker_id(remote):
        return BrokerError(errors.INVALID_FIELD, f"mirror link without {BROKER_ID} link property")
    return None


def send_permission_refusal(reason: str) -> Unauthorized:
    """The refusal of a mirror link whose user may not SEND to the mirror address."""
    return Unauthorized(f"AMQ119017: not authorized to create producer, {reason}")


def mirror_target_answer(remote: Attach, node_id: str, *, handle: int) -> Attach:
    """The accepting answer to a mirror sender (spec 1.3): echo termini, offer `amq.mirror` only."""
    return Attach(
        name=remote.name,
        handle=handle,
        role=RECEIVER,
        snd_settle_mode=remote.snd_settle_mode,
        rcv_settle_mode=RCV_FIRST,
        source=remote.source,
        target=remote.target,
        offered_capabilities=[MIRROR_CAPABILITY],
        properties={BROKER_ID: str(node_id)},
    )
