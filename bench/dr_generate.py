"""Synthetic DR journal pairs in our journal format (docs/journal-format.md), with realistic divergence.

``python -m bench.dr_generate OUT --messages 1000000`` writes OUT/dc1 and OUT/dc2 (each a journal
directory with a node-id file) and OUT/truth.json (the expected count of every class).

Model: DC1 is the active side; its clients send ``messages`` messages over ``queues`` anycast queues
(each with a reference to the store-and-forward queue) and DC2 mirrors them (via_mirror, with their
origin identity, dedup marks). Most are consumed on DC1 with the ack mirrored to DC2. Then the link
is cut: the last ``gap`` fraction of DC1's sends and acks never reach DC2, DC2 consumers take some
mirrored messages (acked on DC2 only, or on both: delivered twice), DC2 clients send their own, a few
payloads differ and a few orphan acks exist. Records are written with ``broker_core.journal.codec``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from pathlib import Path
from typing import BinaryIO

from broker_core.journal.codec import encode
from broker_core.journal.records import MessageAcked, MessageAdded, MetaRecord, QueueAdded
from broker_core.journal.segment import KIND_PLAIN, SegmentHeader, pack_header, plain_name
from broker_core.vocabulary import ANYCAST

SNF_ID = 1
SEGMENT_BYTES = 64 * 1024 * 1024
HEADER = b"\x00\x53\x70\xc0\x04\x02\x41\x50\x04"  # header list: durable=true, priority=4


class SegmentFiles:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory, self.seq, self.size = directory, 0, SEGMENT_BYTES
        self.f: BinaryIO | None = None
        self.chunks: list[bytes] = []
        self.roll()

    def roll(self) -> None:
        self.flush()
        if self.f is not None:
            self.f.close()
        self.seq += 1
        self.f = open(self.directory / plain_name(self.seq), "wb")  # noqa: SIM115 - closed on roll/close
        assert self.f is not None
        self.f.write(pack_header(SegmentHeader(KIND_PLAIN, 0, self.seq)))
        self.size = 32

    def add(self, frame: bytes) -> None:
        if self.size + len(frame) > SEGMENT_BYTES:
            self.roll()
        self.chunks.append(frame)
        self.size += len(frame)
        if len(self.chunks) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.f is not None and self.chunks:
            self.f.write(b"".join(self.chunks))
            self.chunks = []

    def close(self) -> None:
        self.flush()
        if self.f is not None:
            self.f.close()


def body(n: int, salt: int = 0) -> bytes:
    data = (f"order {n:012d} " + "x" * 80 + f"{salt}").encode()
    return HEADER + b"\x00\x53\x75\xa0" + bytes([len(data)]) + data


def generate(out: Path, messages: int, queues: int = 10, gap: float = 0.005, seed: int = 7) -> dict[str, int]:
    rnd = random.Random(seed)
    node1, node2 = (
        str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
        str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
    )
    d1, d2 = SegmentFiles(out / "dc1"), SegmentFiles(out / "dc2")
    (out / "dc1" / "node-id").write_text(node1 + "\n")
    (out / "dc2" / "node-id").write_text(node2 + "\n")
    snf1, snf2 = "$ACTIVEMQ_ARTEMIS_MIRROR_DC2", "$ACTIVEMQ_ARTEMIS_MIRROR_DC1"
    for files, snf in ((d1, snf1), (d2, snf2)):
        files.add(encode(QueueAdded(SNF_ID, snf, snf, ANYCAST, internal=True)))
        for q in range(queues):
            files.add(encode(QueueAdded(q + 2, f"orders.{q}", f"orders.{q}", ANYCAST)))
    truth = dict.fromkeys(["in_sync", "one_side_only", "acked_one_side", "consumed_both",
                           "payload_differs", "orphan_ack"], 0)  # fmt: skip
    cut = int(messages * (1 - gap))
    own2 = max(1, messages // 1000)  # DC2's own sends after the cut
    ts0 = 1_700_000_000_000
    mirrored2 = 0
    for mid in range(1, messages + 1):
        q = mid % queues + 2
        ts = ts0 + mid
        address = f"orders.{q - 2}"
        b = body(mid)
        d1.add(encode(MessageAdded(mid, address, (q, SNF_ID), b, timestamp_ms=ts)))
        consumed1 = rnd.random() < 0.7
        if mid > cut:  # never mirrored
            if consumed1:
                d1.add(encode(MessageAcked(q, mid, timestamp_ms=ts + 5)))
                truth["in_sync"] += 1
            else:
                truth["one_side_only"] += 1
            continue
        d1.add(encode(MessageAcked(SNF_ID, mid, timestamp_ms=ts + 1)))
        mirrored2 += 1
        differs = mid % 100_000 == 50_000
        copy = MessageAdded(mirrored2, address, (q,), body(mid, 1 if differs else 0), timestamp_ms=ts + 1,
                            origin_broker_id=node1, origin_message_id=mid, via_mirror=True)  # fmt: skip
        d2.add(encode(copy))
        d2.add(encode(MetaRecord(f"mirror.dedup.{node1}", str(mid).encode())))
        late = mid > cut - messages // 200  # consumed around the failover: the acks did not cross
        both = late and rnd.random() < 0.1
        if differs:
            truth["payload_differs"] += 1
            continue
        if consumed1 and not late:
            d1.add(encode(MessageAcked(q, mid, timestamp_ms=ts + 5)))
            d2.add(encode(MessageAcked(q, mirrored2, via_mirror=True, timestamp_ms=ts + 6)))
            truth["in_sync"] += 1
        elif both:
            d1.add(encode(MessageAcked(q, mid, timestamp_ms=ts + 5)))
            d2.add(encode(MessageAcked(q, mirrored2, timestamp_ms=ts + 7)))
            truth["consumed_both"] += 1
        elif consumed1 or (late and rnd.random() < 0.3):
            if consumed1:
                d1.add(encode(MessageAcked(q, mid, timestamp_ms=ts + 5)))
            else:
                d2.add(encode(MessageAcked(q, mirrored2, timestamp_ms=ts + 7)))
            truth["acked_one_side"] += 1
        else:
            truth["in_sync"] += 1
    for i in range(1, own2 + 1):
        mid = mirrored2 + i
        d2.add(
            encode(
                MessageAdded(mid, "orders.0", (2, SNF_ID), body(10**11 + i), timestamp_ms=ts0 + messages + i)
            )
        )
        truth["one_side_only"] += 1
    for i in range(1, 4):  # acks for messages neither journal holds
        d1.add(encode(MessageAcked(2, 10**12 + i, timestamp_ms=ts0 + messages)))
        truth["orphan_ack"] += 1
    d1.close()
    d2.close()
    truth["total"] = sum(truth.values())
    return truth


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--queues", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    started = time.monotonic()
    truth = generate(args.out, args.messages, args.queues, seed=args.seed)
    (args.out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(json.dumps({**truth, "seconds": round(time.monotonic() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
