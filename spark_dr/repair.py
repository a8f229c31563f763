"""``amqp-mirror repair --plan P --broker URL``: apply a repair plan to the surviving broker over AMQP.

Per queue of the plan, reached as ``address::queue`` (``survivor``): the queue is scanned (every message
received unsettled, credit = its message count from management), each removal target (matched by the
digest of its bare message) rejected, which the broker records as *killed*, not consumed, and
dead-letters; everything else released, not a delivery attempt. Then each re-send not already there (a
message carrying its identity in the repair annotation) is sent as the failed side stored it, plus that
annotation (``payloads.stamp``), fetched by identity from the failed side's journal
(``payloads.fetch``).

On an Artemis survivor (the plan read it from its export, which has no digests), each removal is by
the survivor's own message id instead, with management's ``removeMessage`` (also *killed*).

Idempotent and resumable: what a run did is kept beside the plan (``repair_log``), and a scan finds
the copies an earlier run sent; a second run, or one after a run killed halfway, does only what is
left. Whatever cannot be done is a problem: one line each, a non-zero exit, never a traceback. A queue
the survivor does not have on that address; a scan that receives fewer messages than the queue holds
(another consumer has some); a removal that matches nothing (consumed on the survivor since the plan:
delivered twice); a re-send whose message the failed side's journal no longer holds live; an outcome
other than Accepted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.amqp.codec import DecodeError

from . import artemis_export, payloads
from .plan import plan_id
from .repair_log import RepairLog
from .survivor import REJECT, RELEASE, Refused, Seen, Survivor

Say = Callable[[str], None]


@dataclass
class Outcome:
    dry_run: bool
    resent: int = 0
    already_present: int = 0
    removed: int = 0
    already_removed: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The outcome for scripts (the JSON line on stdout); a dry run's counts are what it would do."""
        verb = "would_" if self.dry_run else ""
        return {
            "dry_run": self.dry_run,
            f"{verb}resend": self.resent,
            "already_present": self.already_present,
            f"{verb}remove": self.removed,
            "already_removed": self.already_removed,
            "problems": len(self.problems),
        }

    def sentence(self) -> str:
        """The outcome for people (the progress on stderr)."""
        verb = "would " if self.dry_run else ""
        return (
            f"{verb}re-send {self.resent} ({self.already_present} already there), "
            f"{verb}remove {self.removed} ({self.already_removed} already removed), "
            f"{len(self.problems)} problem(s)"
        )


@dataclass
class Settings:
    url: str
    dry_run: bool = False
    journals: dict[str, str] = field(default_factory=dict)  # side name -> journal directory here
    user: str | None = None
    password: str | None = None
    timeout: float = 10.0
    log_path: Path | None = None  # the progress file (none: nothing kept between runs)


def apply_plan(plan: dict[str, Any], settings: Settings, say: Say = print) -> Outcome:
    """Apply ``plan`` to the survivor; every problem is in the outcome, none raised (but the survivor
    being unreachable: ``OSError``, proton's ``ConnectionException`` or ``Timeout``)."""
    outcome = Outcome(settings.dry_run)
    log = RepairLog(None if settings.dry_run else settings.log_path, plan_id(plan))
    bodies = _fetch_bodies(plan, settings, log, outcome, say)
    survivor = Survivor(settings.url, settings.user, settings.password, settings.timeout)
    by_id = plan.get("kinds", {}).get(plan["survivor"]) == artemis_export.KIND
    try:
        work = _by_queue(plan)
        for n, ((address, queue), (resends, removals)) in enumerate(sorted(work.items()), 1):
            say(f"queue {queue} (address {address}, {n} of {len(work)}): "
                f"{len(resends)} to re-send, {len(removals)} to remove")  # fmt: skip
            repair = QueueRepair(survivor, address, queue, settings, log, outcome, say, by_id=by_id)
            try:
                repair.run(resends, removals, bodies)
            except Refused as exc:
                outcome.problems.append(
                    f"queue {queue} on address {address}: {exc}; {len(resends)} re-sends and "
                    f"{len(removals)} removals not done there"
                )
    finally:
        survivor.close()
    say(f"repair {'(dry run) ' if settings.dry_run else ''}done: {outcome.sentence()}")
    return outcome


Entries = list[dict[str, Any]]


def _by_queue(plan: dict[str, Any]) -> dict[tuple[str, str], tuple[Entries, Entries]]:
    """(address, queue) -> (its re-sends, its removals)."""
    work: dict[tuple[str, str], tuple[Entries, Entries]] = defaultdict(lambda: ([], []))
    for entry in plan["resend"]:
        work[entry["address"], entry["queue"]][0].append(entry)
    for entry in plan["remove"]:
        work[entry["address"], entry["queue"]][1].append(entry)
    return dict(work)


def _fetch_bodies(
    plan: dict[str, Any], settings: Settings, log: RepairLog, outcome: Outcome, say: Say
) -> dict[tuple[str, str], bytes]:
    """The stored bytes of every re-send not done yet, from the failed side's journal."""
    todo = [e for e in plan["resend"] if (e["queue"], e["identity"]) not in log.sent]
    if not todo:
        return {}
    failed = plan["failed"]
    directory = Path(settings.journals.get(failed) or plan["journals"][failed])
    say(f"reading {len(todo)} messages to re-send from {failed}'s journal {directory}")
    wanted = [
        payloads.Wanted(e["identity"], e["queue"], e["digest"], tuple(e["hint"]) if e.get("hint") else None)
        for e in todo
    ]
    found = payloads.fetch(directory, wanted, failed, say, plan.get("nodes", {}).get(failed, ""))
    for e in todo:
        why = found.problems.get((e["queue"], e["identity"]))
        if why is not None:
            outcome.problems.append(f"re-send {e['identity']} to queue {e['queue']}: {why}")
    return found.bodies


class QueueRepair:
    """The plan's actions on one queue of the survivor."""

    def __init__(
        self, survivor: Survivor, address: str, queue: str, settings: Settings, log: RepairLog,
        outcome: Outcome, say: Say, by_id: bool = False,
    ) -> None:  # fmt: skip
        self.by_id = by_id  # removals by the survivor's message id (an Artemis survivor), not by digest
        self.survivor, self.address, self.queue = survivor, address, queue
        self.settings, self.log, self.outcome, self.say = settings, log, outcome, say
        self.present: set[str] = set()  # identities of repaired copies the scan saw
        self.removing: list[tuple[str, str]] = []  # (queue, identity)

    def run(self, resends: Entries, removals: Entries, bodies: dict[tuple[str, str], bytes]) -> None:
        depth = self.survivor.depth(self.queue)
        if depth is None:
            raise Refused(f"the survivor has no queue {self.queue}")
        if self.by_id and removals:  # removed before the scan, which then expects what is left
            self._remove_by_id(removals)
            removals, depth = [], self.survivor.depth(self.queue) or 0
        targets: dict[str, list[str]] = defaultdict(list)  # content key -> identities to remove
        for e in removals:
            targets[e["digest"]].append(e["identity"])
        received = self.survivor.scan(self.address, self.queue, depth, lambda got: self._decide(got, targets))
        if received < depth:
            self.outcome.problems.append(
                f"queue {self.queue}: the scan received {received} of its {depth} messages within "
                f"{self.settings.timeout:g} s: another consumer holds the rest; stop it and run repair again"
            )
        self._unmatched(targets)
        sent = self._resend(resends, bodies)
        self.say(f"queue {self.queue}: {self._verb}re-sent {sent}, {self._verb}removed {len(self.removing)}")

    @property
    def _verb(self) -> str:
        return "would have " if self.settings.dry_run else ""

    def _decide(self, seen: list[Seen], targets: dict[str, list[str]]) -> list[str]:
        verdicts, before = [], len(self.removing)
        for message in seen:
            if message.origin is not None:
                self.present.add(message.origin)
            waiting = targets.get(message.key)
            if waiting:
                self.removing.append((self.queue, waiting.pop()))
                verdicts.append(RELEASE if self.settings.dry_run else REJECT)
            else:
                verdicts.append(RELEASE)
        self.log.record("removing", self.removing[before:])  # before the rejects go out
        self.outcome.removed += len(self.removing) - before
        return verdicts

    def _remove_by_id(self, removals: Entries) -> None:
        """Each removal by the survivor's own message id (management's ``removeMessage``). All are
        recorded before the first is asked for, and asked for again on a later run: a removal an earlier
        run did answers False and, recorded then, counts as already removed."""
        todo = []
        for e in removals:
            if e.get("survivor_id") is None:
                self.outcome.problems.append(f"remove {e['identity']} from queue {self.queue}: the plan "
                                             "has no survivor id for it (make a new plan)")  # fmt: skip
            else:
                todo.append((e["identity"], int(e["survivor_id"])))
        if self.settings.dry_run:
            self.outcome.removed += len(todo)
            return
        earlier = {identity for identity, _ in todo if (self.queue, identity) in self.log.removing}
        self.log.record("removing", [(self.queue, identity) for identity, _ in todo])
        for identity, message_id in todo:
            if self.survivor.remove(self.queue, message_id):
                self.removing.append((self.queue, identity))
                self.outcome.removed += 1
            elif identity in earlier:
                self.outcome.already_removed += 1
            else:
                self._not_found(identity)

    def _unmatched(self, targets: dict[str, list[str]]) -> None:
        for identity in (i for ids in targets.values() for i in ids):
            if (self.queue, identity) in self.log.removing:
                self.outcome.already_removed += 1
            else:
                self._not_found(identity)

    def _not_found(self, identity: str) -> None:
        self.outcome.problems.append(
            f"remove {identity} from queue {self.queue}: not found on the survivor (consumed there since "
            "the plan, so delivered on both sides, or removed by hand)"
        )

    def _resend(self, resends: Entries, bodies: dict[tuple[str, str], bytes]) -> int:
        todo: list[tuple[str, bytes]] = []
        for e in resends:
            identity = e["identity"]
            if identity in self.present or (self.queue, identity) in self.log.sent:
                self.outcome.already_present += 1  # there, or sent earlier and consumed since
                continue
            body = bodies.get((self.queue, identity))
            if body is None:
                continue  # its problem was reported when the journal was read
            try:
                todo.append((identity, payloads.stamp(body, identity)))
            except DecodeError as exc:
                self.outcome.problems.append(f"re-send {identity}: its stored bytes are not a message: {exc}")
        if self.settings.dry_run or not todo:
            self.outcome.resent += len(todo)
            return len(todo)
        accepted: list[tuple[str, str]] = []
        problems = self.survivor.send(
            self.address,
            self.queue,
            [p for _, p in todo],
            lambda i: accepted.append((self.queue, todo[i][0])),
        )
        self.log.record("sent", accepted)
        self.outcome.resent += len(accepted)
        self.outcome.problems += [f"re-send to queue {self.queue}: {p}" for p in problems]
        return len(accepted)


def parse_journal_overrides(values: list[str] | None) -> dict[str, str]:
    """``NAME=DIR`` pairs: where each side's journal is on this machine (defaults: the plan's paths)."""
    out = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--journal wants NAME=DIR, got {value!r}")
        out[name] = path
    return out


__all__ = ["Outcome", "Settings", "apply_plan", "parse_journal_overrides"]
