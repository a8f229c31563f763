"""The activation sequence's rules: whether a journal is up to date enough to activate, and how a server
that may activate claims the next sequence (the lock manager's `<nodeId>/activation-sequence`, and the
local `server.activation.sequence` of each server).

Each activation of a node id, by either server, adds one: the activating server, holding the node's lock,
*claims* (coordinated `n` -> `-(n+1)`), writes its local `n+1`, then *commits* (coordinated -> `n+1`). A
replica that is synchronized holds its primary's `n`. So, comparing a server's local value with the
coordinated one (spec A4):

| coordinated, against local `n`        | verdict        | may activate                                   |
|---------------------------------------|----------------|------------------------------------------------|
| `n`                                   | in sync        | yes: claims `n+1`                              |
| another positive value                | stale          | never: another server activated since         |
| `-n` (claimed `n`, never committed)   | self repair    | yes: the claim was its own, cut short by a     |
|                                       |                | crash after its local write: it commits `n`    |
| `-(n+1)` (claimed the next one)       | maybe in sync  | not by itself: the server that claimed it may  |
|                                       |                | have more; it waits for that one to come back  |
|                                       |                | (or for an operator: `ha break-glass`)         |
| any other claim                       | stale          | never                                          |

An active server moving the sequence on to fence off a lost replica claims the same way, and only from
an in-sync value (the lock still its own, the sequence still its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Relation(StrEnum):
    """How the coordinated value stands against a server's local one: the rows of the table."""

    EQUAL = "equal"
    COMMITTED_ELSE = "another committed value"
    CLAIMED_OURS = "a claim of the local value"
    CLAIMED_NEXT = "a claim of the local value + 1"
    CLAIMED_ELSE = "another claim"


class Verdict(StrEnum):
    IN_SYNC = "in sync"
    SELF_REPAIR = "self repair"
    MAYBE_IN_SYNC = "maybe in sync"
    STALE = "stale"


VERDICTS: dict[Relation, Verdict] = {
    Relation.EQUAL: Verdict.IN_SYNC,
    Relation.COMMITTED_ELSE: Verdict.STALE,
    Relation.CLAIMED_OURS: Verdict.SELF_REPAIR,
    Relation.CLAIMED_NEXT: Verdict.MAYBE_IN_SYNC,
    Relation.CLAIMED_ELSE: Verdict.STALE,
}


def relation(local: int, coordinated: int) -> Relation:
    if coordinated == local:
        return Relation.EQUAL
    if coordinated >= 0:
        return Relation.COMMITTED_ELSE
    claimed = -coordinated
    if claimed == local:
        return Relation.CLAIMED_OURS
    if claimed == local + 1:
        return Relation.CLAIMED_NEXT
    return Relation.CLAIMED_ELSE


def verdict(local: int, coordinated: int) -> Verdict:
    return VERDICTS[relation(local, coordinated)]


@dataclass(frozen=True)
class Claim:
    """The steps of an activation, in order: compare-and-set the coordinated value `claim_from` ->
    `-sequence` (none when the claim is there already), write the local `sequence`, then compare-and-set
    `-sequence` -> `sequence` (the commit)."""

    claim_from: int | None
    sequence: int


class NotUpToDate(Exception):
    """The sequence says this server may not activate (or fence) now; the message says why."""


def claim(local: int, coordinated: int, *, fencing: bool = False) -> Claim:
    """How a server holding the node's lock activates (or, `fencing`, moves the sequence on while it is
    active, which needs the coordinated value to be its own still)."""
    found = verdict(local, coordinated)
    if found == Verdict.IN_SYNC:
        return Claim(claim_from=coordinated, sequence=local + 1)
    if found == Verdict.SELF_REPAIR and not fencing:
        return Claim(claim_from=None, sequence=local)
    raise NotUpToDate(f"the activation sequence is {coordinated} and this server's {local}: {found}")
