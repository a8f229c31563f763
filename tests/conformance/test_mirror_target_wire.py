"""Our broker as an Artemis mirror TARGET, driven by a scripted Artemis source.

Every delivery is built by hand with python-qpid-proton exactly as an Artemis source encodes it
(symbol keys, symbol event types, string addresses, long ids; spec §2.2-2.4), and every answer is
decoded with proton. Rules: spec §1.3 (link answer), §2.5 (always Accepted), §3.3-3.4 (dedup, acks).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from proton import byte, symbol, ubyte

from tests.conformance.wire_helpers import (
    AMQP_VALUE,
    BKR_ID,
    DELIVERY_ANNOTATIONS,
    MIRROR_PREFIX,
    MR_ID,
    PROPERTIES,
    address_info_json,
    broker,
    control_event,
    depth,
    durable_header,
    mirror_status,
    node_id,
    queue_configuration_json,
    queue_names,
    section,
    symbols_of,
)
from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive
from tests.support.peer import AttachAnswer, ScriptedClient

MIRROR = f"{MIRROR_PREFIX}_x"
MIRROR_WINDOW = 5000  # credit on a mirror link: max(amqpCredits = 1000 by default, 5000)
ADD_ADDRESS, CREATE_QUEUE, DELETE_QUEUE = symbol("addAddress"), symbol("createQueue"), symbol("deleteQueue")
DELETE_ADDRESS, POST_ACK = symbol("deleteAddress"), symbol("postAck")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # src-relay forwards origin-z's events, as the middle of a chain does (a hardening beyond Artemis
    # takes that only where it is configured: docs/mirror.md)
    b = broker(tmp_path_factory.mktemp("target"), acceptor_params="mirrorTrustedOrigins=src-relay:origin-z")
    yield b
    b.stop()


def attach_mirror(
    client: ScriptedClient, origin: str, *, desired: list[str] | None = None, name: str = "x"
) -> AttachAnswer:
    """Attach the way an Artemis source does (spec §1.2), with `desired` capabilities."""
    address = f"{MIRROR_PREFIX}_{name}"
    client.open(
        container_id=origin,
        properties={"broker-connection-info": {"connectionName": name, "nodeId": origin}},
    )
    return client.attach_sender(
        f"{address}:6f1c1a0e-0000-4000-8000-000000000001",
        address,
        source=address,
        desired_capabilities=["amq.mirror"] if desired is None else desired,
        properties={"x-opt-amq-bkr-id": origin},
    )


@contextmanager
def mirror_source(b: BrokerProcess, origin: str, **login: Any) -> Iterator[ScriptedClient]:
    """A mirror link of `origin`, closed at the end with the broker's Close awaited: the broker is done
    with it before the next link of that origin attaches (one broker has one mirror link at a time)."""
    with ScriptedClient(b.port, **login) as client:
        answer = attach_mirror(client, origin)
        assert answer.flow is not None and answer.detach is None, "the mirror link was not accepted"
        yield client
        client.close()


def deliver(client: ScriptedClient, payload: bytes) -> None:
    """Send one delivery; the target must answer Accepted and settled, whatever it contained (§2.5)."""
    disposition = client.send(payload)
    assert disposition is not None
    assert disposition.state == "accepted", f"answered {disposition.state}"
    assert disposition["settled"] is True


def replicated(body: str, mr_id: int, to: str | None, **da: Any) -> bytes:
    """A mirrored message: header, the mirror's DAs (mr-id as AMQP long), properties, amqp-value."""
    annotations = {MR_ID: mr_id, **{symbol(f"x-opt-amq-{k.replace('_', '-')}"): v for k, v in da.items()}}
    props = section(PROPERTIES, [f"ID:{mr_id}", None, to]) if to is not None else b""
    return durable_header() + section(DELIVERY_ANNOTATIONS, annotations) + props + section(AMQP_VALUE, body)


def create_queue(client: ScriptedClient, queue: str, address: str, routing: str = "ANYCAST") -> None:
    rt = 1 if routing == "ANYCAST" else 0
    deliver(client, control_event(ADD_ADDRESS, {"x-opt-amq-mr-adr": address}, address_info_json(address, rt)))
    deliver(
        client,
        control_event(
            CREATE_QUEUE,
            {"x-opt-amq-mr-adr": address, "x-opt-amq-mr-qu": queue},
            queue_configuration_json(queue, address, routing),
        ),
    )


def post_ack(queue: str, address: str, mr_id: Any, **extra: Any) -> bytes:
    annotations = {"x-opt-amq-mr-adr": address, "x-opt-amq-mr-qu": queue, **extra}
    return control_event(POST_ACK, annotations, mr_id)


def target_stats(b: BrokerProcess) -> dict[str, int]:
    return dict(mirror_status(b)["target"])


def peek(b: BrokerProcess, address: str, queue: str) -> list[Any]:
    """Bodies on `queue`, read with a proton client (fully qualified name) and left there."""
    return [m.body for m in receive(b.url, f"{address}::{queue}", 50, timeout=0.5, accept=None)]


# ------------------------------------------------------------------------------------ link answer


def test_answer_offers_only_amq_mirror_and_our_broker_id(target: BrokerProcess) -> None:
    with ScriptedClient(target.port) as client:
        # An Artemis source desires core tunnelling too; we must not offer it (spec §1.3, §10).
        answer = attach_mirror(client, "src-answer", desired=["amq.mirror", "AMQ_CORE_MESSAGE_TUNNELING"])
    attach = answer.attach
    assert attach is not None and answer.detach is None
    assert attach["role"] is True
    offered = attach["offered_capabilities"]
    assert all(type(c) is symbol for c in symbols_of(offered))
    assert symbols_of(offered) == ["amq.mirror"], "exactly amq.mirror, never AMQ_CORE_MESSAGE_TUNNELING"
    [(key, value)] = attach["properties"].items()
    assert type(key) is symbol and key == BKR_ID
    assert type(value) is str and value == node_id(target) and value != "src-answer"
    target_terminus = attach.terminus("target")
    assert target_terminus is not None and target_terminus["address"] == MIRROR
    source_terminus = attach.terminus("source")
    assert source_terminus is not None and source_terminus["address"] == MIRROR
    assert type(attach["rcv_settle_mode"]) is ubyte and int(attach["rcv_settle_mode"]) == 0  # first
    # Artemis grants amqpCredits (1000 by default, spec §1.3); we grant max(amqpCredits, 5000) on a
    # mirror link on purpose (mirror/inbound.py MIRROR_CREDIT_WINDOW): a source may send more
    assert answer.flow is not None and int(answer.flow["link_credit"]) == MIRROR_WINDOW


def test_link_without_desired_amq_mirror_is_refused_with_amq119024(target: BrokerProcess) -> None:
    with ScriptedClient(target.port) as client:
        answer = attach_mirror(client, "src-nocap", desired=["something-else"], name="nocap")
    assert answer.attach is not None and answer.attach["target"] is None, "refusal: a null target"
    assert answer.flow is None, "no credit for a refused link"
    assert answer.detach is not None and answer.detach["closed"] is True
    condition, description = answer.detach["error"].value[:2]
    assert type(condition) is symbol and condition == "amqp:illegal-state"
    assert "AMQ119024" in description and "amq.mirror" in description
    wait_until(lambda: "AMQ119024" in target.log(), 5, "the refusal in the broker log")


# ------------------------------------------------------------------------------------ events


def test_address_and_queue_events_create_and_delete(target: BrokerProcess) -> None:
    with mirror_source(target, "src-topology") as client:
        create_queue(client, "t.q", "t.addr")
        create_queue(client, "t.news.sub", "t.news", "MULTICAST")
        assert {"t.q", "t.news.sub"} <= set(queue_names(target))
        errors = target_stats(target)["errors"]
        create_queue(client, "t.q", "t.addr")  # again (a resend after reconnect): idempotent
        assert target_stats(target)["errors"] == errors
        deliver(
            client,
            control_event(DELETE_QUEUE, {"x-opt-amq-mr-adr": "t.addr", "x-opt-amq-mr-qu": "t.q"}, "t.q"),
        )
        info = address_info_json("t.news", 0)
        deliver(
            client,
            control_event(DELETE_QUEUE, {"x-opt-amq-mr-adr": "t.news", "x-opt-amq-mr-qu": "t.news.sub"}),
        )
        deliver(client, control_event(DELETE_ADDRESS, {"x-opt-amq-mr-adr": "t.news"}, info))
        deliver(
            client, control_event(DELETE_QUEUE, {"x-opt-amq-mr-adr": "t.addr", "x-opt-amq-mr-qu": "missing"})
        )
    names = queue_names(target)
    assert "t.q" not in names and "t.news.sub" not in names


def test_replicated_message_is_stored_once_and_removed_by_its_ack(target: BrokerProcess) -> None:
    with mirror_source(target, "src-msg") as client:
        create_queue(client, "m.q", "m.addr")
        before = target_stats(target)
        deliver(client, replicated("hello", 100, "m.addr"))
        assert peek(target, "m.addr", "m.q") == ["hello"]
        deliver(client, replicated("hello", 100, "m.addr"))  # the SNF resends after a reconnect
        assert peek(target, "m.addr", "m.q") == ["hello"], "a resent message must be deduplicated"
        assert target_stats(target)["duplicates"] == before["duplicates"] + 1
        deliver(client, post_ack("m.q", "m.addr", 100))
        assert depth(target, "m.q") == 0, "the postAck (body: long id) must remove the message"


def test_a_message_before_its_create_queue_is_held_then_stored_and_accepted(target: BrokerProcess) -> None:
    """What an Artemis source sends under load: the first message of a new queue overtakes the queue's
    addAddress and createQueue (docs/mirror.md, "Held messages"). It is not Accepted until stored."""
    with mirror_source(target, "src-held") as client:
        before = target_stats(target)
        early = client.send_nowait(replicated("early", 1, "held.addr"))
        with pytest.raises(TimeoutError):  # over a window, not at an instant
            client.disposition_of(early, timeout=1.5)
        assert "held.q" not in queue_names(target)
        create_queue(client, "held.q", "held.addr")
        disposition = client.disposition_of(early)
        assert disposition.state == "accepted" and disposition["settled"] is True
    assert peek(target, "held.addr", "held.q") == ["early"]
    after = target_stats(target)
    assert after["held"] - before["held"] == 1 and after["held_stored"] - before["held_stored"] == 1
    assert after["heldNow"] == 0 and after["unrouted"] == before["unrouted"]
    assert "AMQ951050: mirror from src-held: message 1 held: no queue here takes address held.addr" in (
        target.log()
    )


def test_destination_annotation_and_foreign_origin_identity(target: BrokerProcess) -> None:
    """`x-opt-amq-mr-dst` routes; `x-opt-amq-bkr-id` in the DA makes the identity, not the link's id."""
    with mirror_source(target, "src-relay") as client:
        create_queue(client, "d.q", "d.addr")
        deliver(client, replicated("routed-by-dst", 7, "somewhere-else", mr_dst="d.addr", bkr_id="origin-z"))
        assert peek(target, "d.addr", "d.q") == ["routed-by-dst"]
        deliver(client, post_ack("d.q", "d.addr", 7))  # no bkr-id: means (src-relay, 7), another message
        assert depth(target, "d.q") == 1, "an ack for another origin's id 7 removed the message"
        deliver(client, post_ack("d.q", "d.addr", 7, **{"x-opt-amq-bkr-id": "origin-z"}))
        wait_until(lambda: depth(target, "d.q") == 0, 3, "the ack naming origin-z to remove it")


def test_create_queue_without_add_address_creates_the_address(target: BrokerProcess) -> None:
    """§2.2: createQueue alone is enough (its JSON says auto-create-address)."""
    with mirror_source(target, "src-auto") as client:
        annotations = {"x-opt-amq-mr-adr": "n.addr", "x-opt-amq-mr-qu": "n.q"}
        deliver(client, control_event(CREATE_QUEUE, annotations, queue_configuration_json("n.q", "n.addr")))
        assert "n.q" in queue_names(target)
        deliver(client, replicated("via-auto-address", 1, "n.addr"))
    assert peek(target, "n.addr", "n.q") == ["via-auto-address"]


def test_target_queues_annotation_restricts_routing(target: BrokerProcess) -> None:
    """§2.3: `x-opt-amq-mr-trg-q` (a list of strings) routes only to the named queues of the address."""
    with mirror_source(target, "src-trg") as client:
        create_queue(client, "g.one", "g.addr", "MULTICAST")
        create_queue(client, "g.two", "g.addr", "MULTICAST")
        deliver(client, replicated("to-one-only", 1, "g.addr", mr_trg_q=["g.one"]))
        deliver(client, replicated("to-both", 2, "g.addr"))
    assert peek(target, "g.addr", "g.one") == ["to-one-only", "to-both"]
    assert peek(target, "g.addr", "g.two") == ["to-both"]


def test_expired_ack_moves_the_message_to_the_expiry_address(target: BrokerProcess) -> None:
    with mirror_source(target, "src-exp") as client:
        create_queue(client, "e.q", "e.addr")
        deliver(client, replicated("to-expire", 1, "e.addr"))
        expired_before = depth(target, "ExpiryQueue")
        deliver(client, post_ack("e.q", "e.addr", 1, **{"x-opt-amq-mr-ack-reason": byte(2)}))
    assert depth(target, "e.q") == 0
    assert depth(target, "ExpiryQueue") == expired_before + 1, "EXPIRED runs the local expiry"
    receive(target.url, "ExpiryQueue", 1, timeout=1)


def test_ack_for_an_unknown_id_is_accepted_retried_then_given_up(target: BrokerProcess) -> None:
    with mirror_source(target, "src-unknown") as client:
        create_queue(client, "u.q", "u.addr")
        before = target_stats(target)
        deliver(client, post_ack("u.q", "u.addr", 987654321))
        deliver(client, post_ack("no.such.queue", "u.addr", 5))  # unknown queue: warned, accepted
    after = target_stats(target)
    assert after["ack_retries"] == before["ack_retries"] + 1
    wait_until(
        lambda: target_stats(target)["acks_never_matched"] == before["acks_never_matched"] + 1,
        5,
        "the retried ack to be given up",
    )
    assert "Queue no.such.queue not found on mirror target" in target.log()


def test_unknown_and_string_typed_events_are_accepted_and_ignored(target: BrokerProcess) -> None:
    with mirror_source(target, "src-odd") as client:
        create_queue(client, "o.q", "o.addr")
        deliver(client, replicated("stays", 1, "o.addr"))
        before = target_stats(target)
        deliver(client, control_event(symbol("someFutureEvent"), {"x-opt-amq-mr-adr": "o.addr"}, "{}"))
        # "postAck" as an AMQP string is no event for Artemis (§2.4): the message must stay.
        string_typed = control_event("postAck", {"x-opt-amq-mr-adr": "o.addr", "x-opt-amq-mr-qu": "o.q"}, 1)
        deliver(client, string_typed)
    after = target_stats(target)
    assert after["unknown_events"] == before["unknown_events"] + 2
    assert peek(target, "o.addr", "o.q") == ["stays"]


def test_credit_is_topped_up_for_a_long_stream(target: BrokerProcess) -> None:
    """§1.3: the credit is refilled as it runs low: a source may keep streaming past the first window.

    More deliveries than the first window: without a top-up the sender blocks waiting for credit
    (`send_nowait` raises TimeoutError after the client's 10 s) instead of finishing.
    """
    count = MIRROR_WINDOW + 500
    with mirror_source(target, "src-stream") as client:
        create_queue(client, "c.q", "c.addr")
        ids = [client.send_nowait(replicated(f"m{i}", i, "c.addr")) for i in range(1, count + 1)]
        last = client.disposition_of(ids[-1], timeout=30)
        assert last.state == "accepted"
        dispositions = [f for f in client.frames if f.name == "disposition"]
        covered = {i for d in dispositions for i in range(int(d["first"]), int(d["last"] or d["first"]) + 1)}
        assert set(ids) <= covered, "every delivery is settled"
        assert all(d.state == "accepted" and d["settled"] is True for d in dispositions)
        flows = [f for f in client.frames if f.name == "flow" and f["handle"] is not None]
        grants = [int(f["link_credit"]) for f in flows]
        # 2 + count deliveries: the first window, then a refill each time half of it was used
        assert grants == [MIRROR_WINDOW] * 3, grants
    assert depth(target, "c.q") == count


def test_undecodable_deliveries_are_still_accepted(target: BrokerProcess) -> None:
    """§2.5: processing errors never turn into Rejected (an Artemis source would drop the event)."""
    with mirror_source(target, "src-bad") as client:
        deliver(client, durable_header() + section(AMQP_VALUE, "no delivery annotations, no event"))
        deliver(client, control_event(CREATE_QUEUE, {"x-opt-amq-mr-qu": "b.q"}, "not json"))
        deliver(client, control_event(POST_ACK, {"x-opt-amq-mr-qu": "b.q"}, "not a long"))


def test_the_same_id_from_two_origins_is_two_messages(target: BrokerProcess) -> None:
    """§3.3: duplicates are per origin: id 42 from broker A and id 42 from broker B are different messages."""
    with mirror_source(target, "src-two-a") as a:
        create_queue(a, "two.q", "two.addr")
        before = target_stats(target)
        deliver(a, replicated("from-a", 42, "two.addr"))
    with mirror_source(target, "src-two-b") as b:
        deliver(b, replicated("from-b", 42, "two.addr"))
    assert sorted(peek(target, "two.addr", "two.q")) == ["from-a", "from-b"]
    after = target_stats(target)
    assert (after["messages"], after["duplicates"]) == (before["messages"] + 2, before["duplicates"])


def test_one_origin_has_one_link_and_its_next_link_shares_its_dedup(target: BrokerProcess) -> None:
    """One broker's traffic comes through one link (a hardening beyond Artemis): a second link claiming
    the same broker while the first is up is refused with amqp:resource-locked. Once the first is gone,
    the source's next link is deduplicated against what the first delivered (its re-sends dropped)."""
    with mirror_source(target, "src-twice") as first:
        create_queue(first, "twice.q", "twice.addr")
        before = target_stats(target)
        deliver(first, replicated("once", 7, "twice.addr"))
        with ScriptedClient(target.port) as second:
            answer = attach_mirror(second, "src-twice")
        assert answer.flow is None and answer.detach is not None, "a second link of one broker was taken"
        condition, description = answer.detach["error"].value[:2]
        assert condition == "amqp:resource-locked"
        assert "broker src-twice already has a mirror link here" in description
        deliver(first, replicated("next", 8, "twice.addr"))  # the first link still serves
    with mirror_source(target, "src-twice") as again:  # it reconnected: it re-sends what was unaccepted
        deliver(again, replicated("once", 7, "twice.addr"))
        deliver(again, replicated("next", 8, "twice.addr"))
        deliver(again, replicated("third", 9, "twice.addr"))
    assert peek(target, "twice.addr", "twice.q") == ["once", "next", "third"]
    after = target_stats(target)
    assert (after["messages"], after["duplicates"]) == (before["messages"] + 3, before["duplicates"] + 2)
    assert "MIR105" in target.log()


def test_dedup_watermark_survives_a_target_restart(tmp_path: Path) -> None:
    """§3.3, docs/mirror.md: the highest id per origin is persisted before Accepted, so after a SIGKILL and a
    restart a resend of anything at or below it is dropped, even once the messages were consumed (no live
    message is left to recognise them by)."""
    b = broker(tmp_path / "restart")
    try:
        with mirror_source(b, "src-restart") as client:
            create_queue(client, "w.q", "w.addr")
            for mid in (1, 2, 3):
                deliver(client, replicated(f"m{mid}", mid, "w.addr"))
        assert [m.body for m in receive(b.url, "w.addr::w.q", 3)] == ["m1", "m2", "m3"]
        assert depth(b, "w.q") == 0
        b.kill()
        b.start()
        with mirror_source(b, "src-restart") as client:
            for mid in (2, 3):  # the source resends what it had no Accepted for
                deliver(client, replicated(f"m{mid}", mid, "w.addr"))
            deliver(client, replicated("m4", 4, "w.addr"))
        assert peek(b, "w.addr", "w.q") == ["m4"], "a resend after the restart was stored again"
        assert target_stats(b)["duplicates"] == 2
    finally:
        b.stop()


def test_ack_arriving_before_its_message_is_retried_and_matches_once(target: BrokerProcess) -> None:
    """docs/mirror.md: a postAck whose message is not there yet becomes a persisted retry (every 100 ms, 5
    attempts); the message arriving in time is removed by the retry, and nothing else is."""
    # retries other tests left are given up within 0.5 s; this test counts its own from zero
    wait_until(lambda: target_stats(target)["pendingAckRetries"] == 0, 5, "earlier retries to end")
    with mirror_source(target, "src-early") as client:
        create_queue(client, "early.q", "early.addr")
        before = target_stats(target)
        deliver(client, post_ack("early.q", "early.addr", 500))
        assert target_stats(target)["ack_retries"] == before["ack_retries"] + 1
        deliver(client, replicated("acked-early", 500, "early.addr"))
        deliver(client, replicated("not-acked", 501, "early.addr"))
    wait_until(
        lambda: target_stats(target)["acks_matched_on_retry"] == before["acks_matched_on_retry"] + 1,
        5,
        "the retried ack to match the message that arrived after it",
    )
    assert peek(target, "early.addr", "early.q") == ["not-acked"]
    after = target_stats(target)
    assert after["acks_never_matched"] == before["acks_never_matched"], "the retry was given up as well"
    assert after["pendingAckRetries"] == 0


def test_an_older_id_that_was_never_seen_is_not_a_duplicate(target: BrokerProcess) -> None:
    with mirror_source(target, "src-tx") as client:
        create_queue(client, "x.q", "x.addr")
        deliver(client, replicated("sent-later-committed-first", 201, "x.addr"))
        deliver(client, replicated("tx-committed-later", 200, "x.addr"))
    assert sorted(peek(target, "x.addr", "x.q")) == ["sent-later-committed-first", "tx-committed-later"]


# ------------------------------------------------------------------------------------ security


def test_user_without_send_on_the_mirror_address_is_refused(tmp_path: Path) -> None:
    b = broker(tmp_path / "secure", security=True)
    try:
        with ScriptedClient(b.port, user="bob", password="builder") as client:
            answer = attach_mirror(client, "src-bob")
        assert answer.attach is not None and answer.attach["target"] is None
        assert answer.detach is not None and answer.flow is None
        condition, description = answer.detach["error"].value[:2]
        assert condition == "amqp:unauthorized-access"
        assert "bob" in description and MIRROR in description
        wait_until(lambda: "refused" in b.log(), 5, "the refusal in the log")
        line = next(ln for ln in b.log().splitlines() if "refused" in ln)
        assert "bob" in line and MIRROR in line and "send" in line.lower(), line
        assert "builder" not in b.log(), "the password must never be logged"
        with ScriptedClient(b.port, user="admin", password="secret") as client:
            ok = attach_mirror(client, "src-admin")
        assert ok.flow is not None and ok.detach is None, "a user with SEND is accepted"
    finally:
        b.stop()
