"""``amqp-mirror repair --plan P --broker URL``: apply a repair plan to the surviving broker over AMQP.

Idempotent: every re-sent message carries its original identity in the message annotation
``x-opt-amqp-mirror-repair-origin``; before sending, the queue is scanned and identities already there
are skipped (and a later reconciliation counts the copy as the original). Acks are applied by finding
the message in the queue by content (bare message: properties, application properties, body, read
from the survivor's journal at the planned position) and rejecting it, which the broker records as a
*killed* acknowledgement, not a consumption; a message no longer there is skipped.

The scan receives the whole queue unsettled (credit = the queue's message count from management) and
then settles each delivery: rejected when it is an ack target, released otherwise (not a failed
delivery: the delivery count does not grow). Our broker has no browsing or selectors yet.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton import Message

from broker_core.journal import records
from broker_core.journal.codec import FRAME, FRAME_SIZE, decode

from .identity import REPAIR_ANNOTATION
from .rows import journal_dir

Say = Callable[[str], None]


def read_payload(directory: Path, segment: int, offset: int) -> bytes:
    """The stored message of the MessageAdded record at (segment, offset), crc-checked."""
    directory = journal_dir(Path(directory))
    matches = sorted(directory.glob(f"*{segment:012d}.jnl"))
    if not matches:
        raise FileNotFoundError(f"{directory}: no segment {segment}")
    with open(matches[0], "rb") as f:
        f.seek(offset)
        head = f.read(FRAME_SIZE)
        length, kind, crc = FRAME.unpack(head)
        payload = f.read(length)
    if len(payload) != length or zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc:
        raise ValueError(f"{matches[0]}@{offset}: not a valid record")
    rec = decode(kind, payload)
    if not isinstance(rec, records.MessageAdded):
        raise ValueError(f"{matches[0]}@{offset}: a {type(rec).__name__}, not a message")
    return rec.body


def content_key(msg: Message) -> str:
    """What a client can see of a message's identity-free content (bare message fields)."""
    properties: dict[Any, Any] = dict(msg.properties or {})
    props = sorted((str(k), repr(v)) for k, v in properties.items())
    parts = (msg.id, msg.correlation_id, msg.subject, msg.reply_to, msg.content_type, props, msg.body)
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@dataclass
class Outcome:
    dry_run: bool
    sent: list[str] = field(default_factory=list)
    already_present: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    ack_not_found: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        verb = "would " if self.dry_run else ""
        return {
            "dry_run": self.dry_run,
            f"{verb}resend": len(self.sent),
            "already_present": len(self.already_present),
            f"{verb}ack": len(self.acked),
            "ack_not_found": len(self.ack_not_found),
        }


@dataclass
class QueueScan:
    """What one queue of the survivor holds: repaired identities and content keys per delivery."""

    repaired: set[str]
    keys: list[str]


def queue_depth(url: str, queue: str) -> int:
    from connections.cli import request

    try:
        return int(request(url, "getStatistics", [], resource=f"queue.{queue}")["message-count"])
    except RuntimeError:
        return 0


def scan_and_settle(
    conn: Any, url: str, queue: str, reject: Callable[[Message], bool], timeout: float
) -> QueueScan:
    """Receive every message of ``queue`` unsettled; then reject those ``reject`` picks, release the rest."""
    count = queue_depth(url, queue)
    scan = QueueScan(set(), [])
    if count == 0:
        return scan
    receiver = conn.create_receiver(queue, credit=count)
    got: list[Message] = []
    try:
        while len(got) < count:
            try:
                got.append(receiver.receive(timeout=timeout))
            except Exception:  # Timeout: fewer than counted (a consumer took some)
                break
        for msg in got:
            annotations: dict[Any, Any] = dict(msg.annotations or {})
            origin = annotations.get(REPAIR_ANNOTATION)
            if isinstance(origin, str):
                scan.repaired.add(origin)
            scan.keys.append(content_key(msg))
            if reject(msg):
                receiver.reject()
            else:
                receiver.release(delivered=False)
    finally:
        receiver.close()
    return scan


def apply_plan(
    plan: dict[str, Any],
    url: str,
    *,
    dry_run: bool = False,
    journals: dict[str, str] | None = None,
    say: Say = print,
    timeout: float = 10.0,
) -> Outcome:
    from proton.utils import BlockingConnection

    paths = {**plan["journals"], **(journals or {})}
    outcome = Outcome(dry_run)
    queues = sorted({e["queue"] for e in plan["resend"]} | {e["queue"] for e in plan["acks"]})
    conn = BlockingConnection(url, timeout=timeout, allowed_mechs="ANONYMOUS")
    try:
        for queue in queues:
            _repair_queue(conn, url, queue, plan, paths, outcome, dry_run, say, timeout)
    finally:
        conn.close()
    say(f"repair {'(dry run) ' if dry_run else ''}done: {outcome.summary()}")
    return outcome


def _repair_queue(
    conn: Any, url: str, queue: str, plan: dict[str, Any], paths: dict[str, str], outcome: Outcome,
    dry_run: bool, say: Say, timeout: float,
) -> None:  # fmt: skip
    targets: dict[str, list[str]] = {}  # content key -> identities still to remove
    for entry in (e for e in plan["acks"] if e["queue"] == queue):
        body = read_payload(Path(paths[entry["side"]]), entry["segment"], entry["offset"])
        targets.setdefault(content_key(_decode(body)), []).append(entry["identity"])

    def pick(msg: Message) -> bool:
        waiting = targets.get(content_key(msg))
        if not waiting:
            return False
        outcome.acked.append(waiting.pop())
        return not dry_run

    scan = scan_and_settle(conn, url, queue, pick, timeout)
    outcome.ack_not_found += [i for ids in targets.values() for i in ids]
    sender = None if dry_run else conn.create_sender(queue)
    for entry in (e for e in plan["resend"] if e["queue"] == queue):
        if entry["identity"] in scan.repaired:
            outcome.already_present.append(entry["identity"])
            continue
        msg = _decode(read_payload(Path(paths[entry["side"]]), entry["segment"], entry["offset"]))
        msg.annotations = {**(msg.annotations or {}), REPAIR_ANNOTATION: entry["identity"]}
        msg.durable = True
        if sender is not None:
            sender.send(msg)
        outcome.sent.append(entry["identity"])
    if sender is not None:
        sender.close()
    say(
        f"queue {queue}: resend {len(outcome.sent)}, skip {len(outcome.already_present)},"
        f" ack {len(outcome.acked)}"
    )


def _decode(body: bytes) -> Message:
    msg = Message()
    msg.decode(body)
    return msg


def parse_journal_overrides(values: list[str] | None) -> dict[str, str]:
    """``NAME=DIR`` pairs: where each side's journal is on this machine (defaults: the plan's paths)."""
    out = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep:
            raise ValueError(f"--journal wants NAME=DIR, got {value!r}")
        out[name] = path
    return out


__all__ = ["apply_plan", "content_key", "read_payload"]
