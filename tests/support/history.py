"""The checker of a fault-schedule soak (Jepsen's method): pure functions over what the clients recorded
and what the brokers logged, nothing run.

- **Messages.** Every confirmed send was received (else *lost*); nothing was received that no producer
  ever tried to send (a *phantom*); a message received twice is a *redelivery* when its first copy came
  on a connection that was lost afterwards (its accept may never have reached the broker: at-least-once
  delivery), else a *duplicate* (two stored copies: what duplicate detection must prevent).
- **Who was active when.** Each server's log says when it became active (`ACTIVE_IDS`) and when it
  stopped serving (`INACTIVE_IDS`, or the last line of a log whose process is gone: killed, halted); a
  paused process (SIGSTOP, the soak's own record) serves nothing until it resumes. Two servers of one node
  id whose active intervals overlap are two actives: a split brain.
- **Clock jumps.** A server whose wall clock the soak jumped stamps its log lines with the clock it had:
  each line is read at its true time, given the offsets the clock had (the soak's record).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

ACTIVE_IDS = ("AMQ221007", "AMQ221010", "AMQ951109")  # a primary / a backup now active; serves again
INACTIVE_IDS = (
    "AMQ222325",  # lost its lock: stops serving
    "AMQ951108",  # isolated: stops serving
    "AMQ221002",  # a backup steps down for its primary (failback)
    "AMQ951105",  # vote-on-replication-failure: the majority does not see it: stops
    "AMQ951112",  # another server took its node id while it was isolated: stops
    "AMQ951170",  # another server is active with a newer activation of its node id: stops
    "AMQ951071",  # a clean stop without a synchronized backup
    "AMQ951072",  # a clean stop handed over
    "AMQ951073",
    "AMQ221001",  # a shared-store primary stopping, its backup passive
)
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


@dataclass(frozen=True)
class Event:
    at: float  # seconds since the epoch
    server: str
    kind: str  # "active", "inactive", "paused", "resumed", "clock" (its wall clock set `offset` off)
    offset: int = 0


@dataclass(frozen=True)
class Interval:
    node: str
    server: str
    start: float
    end: float
    woken: bool = False  # it began when the server resumed (SIGCONT), active in its own view


@dataclass(frozen=True)
class Receipt:
    body: int
    connection: int  # the consumer's connection (the failover client's generation) it came on


@dataclass
class ClientRecord:
    """What the clients of one node id were told: `attempted` every body a producer tried to send (in
    doubt or not), `confirmed` those the broker accepted, `receipts` what the consumer got, in order."""

    attempted: set[int] = field(default_factory=set)
    confirmed: set[int] = field(default_factory=set)
    receipts: list[Receipt] = field(default_factory=list)


@dataclass
class Verdict:
    sent: int
    confirmed: int
    received: int
    lost: list[int]
    phantoms: list[int]
    duplicates: list[int]
    redelivered: list[int]
    overlaps: list[tuple[Interval, Interval, float]]

    def problems(self) -> list[str]:
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} confirmed sends never received: {self.lost[:10]}")
        if self.phantoms:
            out.append(f"{len(self.phantoms)} received that were never sent: {self.phantoms[:10]}")
        if self.duplicates:
            out.append(
                f"{len(self.duplicates)} stored twice (received twice on one connection): "
                f"{self.duplicates[:10]}"
            )
        for a, b, seconds in self.overlaps:
            out.append(
                f"two actives for node {a.node}: {a.server} [{_t(a.start)}, {_t(a.end)}] and {b.server} "
                f"[{_t(b.start)}, {_t(b.end)}] ({seconds:.3f}s)"
            )
        return out

    def counts(self) -> str:
        return (
            f"{self.sent} sent, {self.confirmed} confirmed, {self.received} received, {len(self.lost)} lost, "
            f"{len(self.phantoms)} phantoms, {len(self.duplicates)} duplicates, {len(self.redelivered)} "
            f"redelivered, {len(self.overlaps)} overlapping actives"
        )


def _t(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3]


def true_time(stamp: float, offsets: Collection[int], span: tuple[float, float] | None) -> float:
    """When a line stamped `stamp` was written, by a clock that was at times each of `offsets` seconds
    off: the one reading that falls within `span` (since the server was first started, until now). The
    soak's offsets are whole days apart, more than any run lasts: never two readings fit."""
    if span is None:
        return stamp
    fits = {stamp - offset for offset in set(offsets) | {0} if span[0] <= stamp - offset <= span[1]}
    if len(fits) != 1:
        raise ValueError(f"a log line stamped {_t(stamp)} fits {len(fits)} of the clock's offsets {offsets}")
    return fits.pop()


def log_events(
    server: str,
    text: str,
    ended: bool,
    offsets: Collection[int] = (),
    span: tuple[float, float] | None = None,
) -> list[Event]:
    """The activity a broker log reports; `ended`: its process is gone, so it serves nothing after its
    last line. A clock that was jumped: `offsets` it had, the `span` its log was written in (true time)."""
    events, last = [], None
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        written = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        at = true_time(written, offsets, span)
        last = at
        if any(code in line for code in ACTIVE_IDS):
            events.append(Event(at, server, "active"))
        elif any(code in line for code in INACTIVE_IDS):
            events.append(Event(at, server, "inactive"))
    if ended and last is not None:
        events.append(Event(last, server, "inactive"))
    return events


def intervals(events: Iterable[Event], node_of: Mapping[str, str], now: float) -> list[Interval]:
    """Each server's active intervals (a pause cuts one; the resume goes on with it); one still open
    ends `now`."""
    out: list[Interval] = []
    by_server: dict[str, list[Event]] = {}
    for event in events:
        by_server.setdefault(event.server, []).append(event)
    for server, own in by_server.items():
        since: float | None = None
        paused_while_active = woken = False
        for event in sorted(own, key=lambda e: e.at):
            if event.kind == "active" and since is None and not paused_while_active:
                since, woken = event.at, False
            elif event.kind == "inactive":
                if since is not None:
                    out.append(Interval(node_of[server], server, since, event.at, woken))
                since, paused_while_active = None, False
            elif event.kind == "paused" and since is not None:
                out.append(Interval(node_of[server], server, since, event.at, woken))
                since, paused_while_active = None, True
            elif event.kind == "resumed" and paused_while_active:
                since, paused_while_active, woken = event.at, False, True
        if since is not None:
            out.append(Interval(node_of[server], server, since, now, woken))
    return sorted(out, key=lambda i: i.start)


def overlaps(active: Sequence[Interval], tolerance: float = 0.0) -> list[tuple[Interval, Interval, float]]:
    """Pairs of intervals of two servers of one node id that overlap: by more than `tolerance` seconds
    where one of them is a server woken up beside the other (it began with a resume inside the other's),
    by any time at all otherwise."""
    found = []
    for i, a in enumerate(active):
        for b in active[i + 1 :]:
            if a.node == b.node and a.server != b.server:
                seconds = min(a.end, b.end) - max(a.start, b.start)
                woke_beside = (a.woken and b.start <= a.start) or (b.woken and a.start <= b.start)
                if seconds > (tolerance if woke_beside else 0.0):
                    found.append((a, b, seconds))
    return found


def check(record: ClientRecord, active: Sequence[Interval], tolerance: float = 0.0) -> Verdict:
    received = Counter(r.body for r in record.receipts)
    first_on: dict[int, int] = {}
    duplicates, redelivered = set(), set()
    seen_on: set[tuple[int, int]] = set()
    for receipt in record.receipts:
        first = first_on.setdefault(receipt.body, receipt.connection)
        if (receipt.body, receipt.connection) in seen_on:
            duplicates.add(receipt.body)  # twice on one connection: two stored copies
        elif first != receipt.connection:
            redelivered.add(receipt.body)  # its first connection was lost before its accept was known
        seen_on.add((receipt.body, receipt.connection))
    return Verdict(
        sent=len(record.attempted),
        confirmed=len(record.confirmed),
        received=len(received),
        lost=sorted(record.confirmed - set(received)),
        phantoms=sorted(set(received) - record.attempted),
        duplicates=sorted(duplicates),
        redelivered=sorted(redelivered - duplicates),
        overlaps=overlaps(active, tolerance),
    )
