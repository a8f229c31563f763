"""Large deliveries on a real broker process: a delivery of many transfer frames is not assembled in memory.

Past the acceptor's `amqpMinLargeMessageSize` (100 KiB by default) its frames go to a spool file in
`<large-messages-directory>` as they arrive, so what a producer has in flight costs the broker disk, not
memory. The file goes when the delivery completes (the message is then routed as any other), is aborted,
or its link or connection goes, and at start (a crash mid-transfer).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from proton import uint

from broker_core.amqp.framing import frame
from broker_core.amqp.performatives import Detach, Disposition, Flow, Transfer
from broker_core.endpoint import DEFAULT_MAX_MESSAGE_SIZE
from tests.peers.ports import LOOPBACK, wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.peer import ScriptedClient, performative
from tests.support.raw_amqp import RawPeer

BIG = '<address name="big"><anycast><queue name="big"/></anycast></address>'
CHUNK = b"\x00\x53\x75\xb0" + struct.pack(">I", 60_000) + b"z" * 60_000  # one data section per frame


def rss_kib(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    for line in Path(f"/proc/{broker.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def spooled(broker: BrokerProcess) -> list[Path]:
    directory = broker.home / "data" / "large-messages"
    return sorted(directory.iterdir()) if directory.is_dir() else []


def transfer(handle: int, delivery_id: int | None, *, more: bool = True, aborted: bool = False) -> bytes:
    """A transfer frame's performative: the first of a delivery carries its id and tag."""
    if delivery_id is None:
        return Transfer(handle=handle, more=more, aborted=aborted or None).encode_amqp()
    tag = struct.pack(">I", delivery_id)
    return Transfer(
        handle=handle, delivery_id=delivery_id, delivery_tag=tag, message_format=0, more=more
    ).encode_amqp()


def start_partial(peer: RawPeer, handle: int, delivery_id: int) -> int:
    """The first frame of a delivery; returns the bytes sent."""
    peer.send(frame(0, transfer(handle, delivery_id) + CHUNK))
    return len(CHUNK)


def more_frames(peer: RawPeer, handle: int, frames: int) -> int:
    """`frames` more frames of the link's delivery, none the last; returns the bytes sent."""
    continuation = frame(0, transfer(handle, None) + CHUNK)
    for _ in range(frames):
        peer.send(continuation)
    return frames * len(CHUNK)


def processed(peer: RawPeer, handle: int) -> None:
    """Wait until the broker has read everything sent so far: it answers a flow echo after it."""
    echo = Flow(next_incoming_id=0, incoming_window=10_000, next_outgoing_id=0, outgoing_window=10_000)
    echo.handle, echo.delivery_count, echo.echo = handle, 0, True
    peer.send(frame(0, echo.encode_amqp()))
    peer.wait_for(Flow, timeout=60)


def test_unfinished_deliveries_on_four_links_cost_disk_not_memory(tmp_path: Path) -> None:
    """One connection, 4 links, 80 MiB each in transfer frames never finished (320 MiB in flight): the
    broker's RSS stays far below it, the bytes are in spool files, and the files go with the connection."""
    broker = BrokerProcess(
        tmp_path, xml_kwargs={"addresses": BIG, "extra": "<global-max-size>32MB</global-max-size>"}
    ).start()
    assert send(broker.url, "big", ["warm-up"]) == 1 and len(receive(broker.url, "big", 1)) == 1
    before = rss_kib(broker)
    frames = 80 * 1024 * 1024 // len(CHUNK)
    sent = 0
    peak = before
    with RawPeer(LOOPBACK, broker.port, timeout=60) as peer:
        peer.open(max_frame_size=131072)
        peer.begin()
        for handle in range(4):
            peer.attach_sender(f"big-{handle}", "big", handle=handle)
        for handle in range(4):
            sent += start_partial(peer, handle, handle)
            for _ in range(8):  # RSS read as the frames go in, not only at the end
                sent += more_frames(peer, handle, frames // 8)
                peak = max(peak, rss_kib(broker))
        processed(peer, 0)
        holding = rss_kib(broker)
        peak = max(peak, holding)
        on_disk = sum(p.stat().st_size for p in spooled(broker))
    wait_until(lambda: not spooled(broker), 10, "the spool files to go with the connection")
    after = rss_kib(broker)
    print(
        f"{sent / 2**20:.0f} MiB in unfinished deliveries: RSS {before / 1024:.1f} MiB before, peak "
        f"{peak / 1024:.1f} MiB, {holding / 1024:.1f} MiB holding them, {after / 1024:.1f} MiB after the "
        f"connection closed; {on_disk / 2**20:.0f} MiB in spool files"
    )
    assert sent >= 4 * 79 * 2**20
    assert peak - before < 48 * 1024  # KiB: well below the 320 MiB held in flight
    assert on_disk >= sent - 4 * 2**20  # all but what a delivery keeps in memory before it spools
    assert send(broker.url, "big", ["still serving"]) == 1
    assert [m.body for m in receive(broker.url, "big", 2, timeout=2)] == ["still serving"]
    assert broker.stop() == 0


def test_a_large_message_round_trips_byte_exact_and_survives_a_restart(tmp_path: Path) -> None:
    """5 MiB over many frames (the broker's frames are 128 KiB): spooled as it arrives, then routed,
    delivered and recovered whole, byte for byte; no spool file is left."""
    broker = BrokerProcess(tmp_path, xml_kwargs={"addresses": BIG}).start()
    bodies = [os.urandom(5 * 2**20), os.urandom(5 * 2**20)]
    assert send(broker.url, "big", bodies) == 2
    assert not spooled(broker)
    # each body copied while its message lives: proton hands a binary body out as a view of its memory
    assert [bytes(m.body) for m in receive(broker.url, "big", 1)] == [bodies[0]]
    assert broker.stop() == 0
    broker.start()
    assert [bytes(m.body) for m in receive(broker.url, "big", 2, timeout=2)] == [bodies[1]]
    assert not spooled(broker)
    assert broker.stop() == 0


def test_an_aborted_delivery_a_detached_link_and_a_crash_leave_no_spool_file(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, xml_kwargs={"addresses": BIG}).start()
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.open(max_frame_size=131072)
        peer.begin()
        peer.attach_sender("big-0", "big", handle=0)
        start_partial(peer, 0, 0)
        more_frames(peer, 0, 3)  # 240 KB: past 100 KiB, in a file
        processed(peer, 0)
        assert len(spooled(broker)) == 1
        peer.send(frame(0, transfer(0, None, more=False, aborted=True)))
        processed(peer, 0)
        assert not spooled(broker)  # aborted: gone
        start_partial(peer, 0, 1)
        more_frames(peer, 0, 3)
        processed(peer, 0)
        assert len(spooled(broker)) == 1
        peer.send(frame(0, Detach(handle=0, closed=True).encode_amqp()))
        peer.wait_for(Detach)
        assert not spooled(broker)  # its link went: gone
        peer.attach_sender("big-1", "big", handle=1)
        start_partial(peer, 1, 2)
        more_frames(peer, 1, 3)
        processed(peer, 1)
        assert len(spooled(broker)) == 1
        broker.kill()  # a crash mid-transfer leaves the file
    assert len(spooled(broker)) == 1
    broker.start()
    assert not spooled(broker)  # removed at start
    assert "removed 1 spool files" in broker.log()
    assert send(broker.url, "big", ["after"]) == 1
    assert [m.body for m in receive(broker.url, "big", 2, timeout=2)] == ["after"]
    assert broker.stop() == 0


def test_a_delivery_its_address_would_refuse_is_refused_as_it_grows(tmp_path: Path) -> None:
    """A FAIL address with 1 MiB of room: a delivery is Rejected (resource-limit-exceeded) once its frames
    pass that, not after it was spooled whole; its later frames are dropped; the link goes on."""
    fail = """<address-setting match="big"><max-size-bytes>1MiB</max-size-bytes>
<address-full-policy>FAIL</address-full-policy></address-setting>"""
    broker = BrokerProcess(tmp_path, xml_kwargs={"addresses": BIG, "address_settings": fail}).start()
    with RawPeer(LOOPBACK, broker.port) as peer:
        peer.open(max_frame_size=131072)
        peer.begin()
        peer.attach_sender("big-0", "big", handle=0)
        start_partial(peer, 0, 0)
        more_frames(peer, 0, 20)  # 1.2 MB
        refused = peer.wait_for(Disposition)
        assert refused.first == 0 and refused.settled
        assert str(refused.state.error.condition) == "amqp:resource-limit-exceeded"
        assert not spooled(broker)
        more_frames(peer, 0, 20)  # the rest of it, dropped as it comes
        peer.send(frame(0, transfer(0, None, more=False) + CHUNK))
        single = Transfer(handle=0, delivery_id=1, delivery_tag=b"s", message_format=0)
        peer.send(frame(0, single.encode_amqp() + CHUNK))  # a message that fits: taken
        accepted = peer.wait_for(Disposition)
        assert accepted.first == 1, "the refused delivery was answered twice"
        assert type(accepted.state).__name__ == "Accepted"
    assert not spooled(broker)
    assert len(receive(broker.url, "big", 2, timeout=2)) == 1
    assert broker.stop() == 0


def test_a_mirror_link_is_given_a_max_message_size_and_its_deliveries_are_spooled(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, xml_kwargs={"addresses": BIG}).start()
    address = "$ACTIVEMQ_ARTEMIS_MIRROR_dc1"
    with ScriptedClient(broker.port) as client:
        client.open(max_frame_size=131072)
        answer = client.attach_sender(
            f"{address}:u",
            address,
            source=address,
            desired_capabilities=["amq.mirror"],
            properties={"x-opt-amq-bkr-id": "dc1"},
        )
        assert answer.attach is not None and answer.flow is not None
        assert int(answer.attach["max_message_size"]) == DEFAULT_MAX_MESSAGE_SIZE
        assert client.conn is not None
        handle = uint(0)
        client.conn.send_frame(0, performative(0x14, handle, uint(0), b"m0", uint(0), False, True), CHUNK)
        for _ in range(3):
            client.conn.send_frame(0, performative(0x14, handle, None, None, None, None, True), CHUNK)
        wait_until(lambda: len(spooled(broker)) == 1, 10, "the mirror link's delivery to be spooled")
    wait_until(lambda: not spooled(broker), 10, "the spool file to go with the connection")
    assert broker.stop() == 0
