"""A real Artemis 2.40.0 mirror source, replayed byte for byte into our broker (no Java needed).

``artemis_mirror_recording.json`` holds every delivery an Artemis source sent in a fixed scenario
(``tests/artemis/recording.py`` made it, and ``tests/artemis/test_recording.py`` checks the Artemis
installed here still speaks so). It keeps covered what real Artemis does that our reading of its source
had not said (docs/mirror.md, "What real Artemis does"): traffic of temporary queues (the reply to a
management request: its message, its postAck, then deleteQueue and deleteAddress, but never its
creation), the `activemq.notifications` address announced at start, createQueue without an `id`, the
dead-letter copy sent as a new message before the original's postAck KILLED.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connections.cli import request
from tests.conformance.wire_helpers import (
    DELIVERY_ANNOTATIONS,
    MIRROR_PREFIX,
    broker,
    depth,
    mirror_status,
    queue_names,
    symbols_of,
)
from tests.support.broker import BrokerProcess
from tests.support.peer import ScriptedClient
from tests.support.peer.frames import decode_sections

RECORDING = json.loads((Path(__file__).parent / "artemis_mirror_recording.json").read_text())
ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


def deliveries(step: dict[str, Any]) -> list[tuple[int, bytes]]:
    return [(d["format"], bytes.fromhex(d["payload"])) for d in step["deliveries"]]


def temporary_addresses() -> set[str]:
    """Addresses Artemis removed as temporary (deleteAddress with "temporary": true)."""
    names = set()
    for step in RECORDING["steps"]:
        for _, payload in deliveries(step):
            sections = {s.code: s.value for s in decode_sections(payload)}
            body = sections.get(0x77)
            if isinstance(body, str) and body.startswith("{") and json.loads(body).get("temporary"):
                names.add(json.loads(body)["name"])
    return names


@pytest.fixture
def target(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = broker(tmp_path / "ours", addresses=ORDERS)
    yield b
    b.stop()


def replay(b: BrokerProcess) -> Iterator[str]:
    """Attach as the recorded Artemis did and send every recorded delivery, each step's as a stream (as
    Artemis sends, not waiting for each Accepted: a temporary queue's reply is settled only by its
    acknowledgement, which comes after it); yields each step's name once its deliveries were all
    Accepted and settled."""
    origin = RECORDING["source_node_id"]
    with ScriptedClient(b.port) as client:
        client.open(container_id=origin, properties=RECORDING["open_properties"])
        address = f"{MIRROR_PREFIX}_rec"
        answer = client.attach_sender(
            f"{address}:recorded",
            address,
            source=address,
            desired_capabilities=RECORDING["attach_desired_capabilities"],
            properties={"x-opt-amq-bkr-id": origin},
        )
        assert answer.flow is not None and answer.detach is None, "the mirror link was refused"
        # Artemis desired core tunnelling too: we offer amq.mirror only (we speak AMQP only)
        assert [str(c) for c in symbols_of(answer.attach["offered_capabilities"])] == ["amq.mirror"]
        for step in RECORDING["steps"]:
            sent = [client.send_nowait(p, message_format=f) for f, p in deliveries(step)]
            for delivery_id in sent:
                disposition = client.disposition_of(delivery_id)
                assert disposition.state == "accepted", step["step"]
                assert disposition["settled"] is True
            yield step["step"]


def test_the_recorded_artemis_source_is_applied_exactly(target: BrokerProcess) -> None:
    for step in replay(target):
        if step == "topology announced at start":
            assert {"DLA", "ExpiryQueue", "orders"} <= set(queue_names(target))
        elif step == "send and consume":
            assert depth(target, "recq") == 0, "the consumed message is still here"
        elif step == "rejected to the DLA":
            assert depth(target, "DLA") == 1 and depth(target, "recq") == 0
        elif step == "removeMessages":
            assert depth(target, "recq") == 0, "the KILLED ack did not remove the message"
    assert depth(target, "DLA") == 1, "the dead letter is here once (a copy Artemis sent)"
    assert depth(target, "ExpiryQueue") == 1, "the expired message is here once (our own expiry)"
    assert "recq" not in queue_names(target)
    addresses = set(request(target.url, "getAddressNames", []))
    assert "recq" not in addresses and "activemq.notifications" in addresses
    assert not addresses & temporary_addresses(), "an address of Artemis's temporary queues stayed here"
    status = mirror_status(target)["target"]
    assert status["errors"] == 0 and status["unknown_events"] == 0 and status["duplicates"] == 0
    assert status["refused"] == 0 and status["undecodable"] == 0, "part of a real Artemis stream was dropped"
    recorded_messages = sum(
        1
        for step in RECORDING["steps"]
        for _, payload in deliveries(step)
        if any(s.code == DELIVERY_ANNOTATIONS for s in decode_sections(payload))
    )
    # a temporary queue's reply is never stored: no queue here takes it, and its acknowledgement on
    # that queue settles it as consumed at its source (docs/mirror.md, "Held messages")
    replies = len(temporary_addresses())  # one management reply each
    assert status["held_consumed_at_source"] == replies
    assert status["messages"] == recorded_messages - replies
    assert status["heldNow"] == 0 and status["held_dead_lettered"] == 0


def test_the_recording_says_what_the_spec_did_not() -> None:
    """The facts docs/mirror.md records, read from the recording itself."""
    assert RECORDING["artemis_version"] == "2.40.0"
    assert RECORDING["open_idle_time_out"] == 30000  # the spec's reading said 60000 (the TTL)
    kinds: dict[str, list[str]] = {}
    for step in RECORDING["steps"]:
        for _, payload in deliveries(step):
            annotations = next((s.value for s in decode_sections(payload) if s.code == 0x72), None) or {}
            kind = annotations.get(_symbol("x-opt-amq-mr-ev-type"))
            kinds.setdefault(step["step"], []).append(str(kind) if kind is not None else "message")
    temporary = kinds["management request (a reply through a temporary queue)"]
    assert sorted(temporary) == ["deleteAddress", "deleteQueue", "message", "postAck"]
    assert kinds["rejected to the DLA"] == ["message", "message", "postAck"]  # the copy, then KILLED
    assert "addAddress" in kinds["topology announced at start"]


def _symbol(name: str) -> Any:
    from proton import symbol

    return symbol(name)
