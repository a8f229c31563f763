"""``amqp-mirror repair --plan P --broker URL``: apply a repair plan to the surviving broker over AMQP.

Per queue of the plan, reached as ``address::queue`` (``survivor``): each removal takes the survivor's
own message named in the plan (``survivor_id``) with management, as the failed side settled it
(``plan.REMOVAL``): moved to the queue's dead-letter address when the failed side consumed it (kept
for the operator; refused, and said, when that address has no queue to keep it), deleted when it
dead-lettered it (its dead letter, a message of its own, is re-sent), expired when it expired it (the
survivor makes its own expiry copy). Then the queue is scanned (every message
received unsettled, credit = its message count from management, and released, not a delivery attempt)
for the copies an earlier run re-sent (a message carrying its identity in the repair annotation), and
each re-send not already there is sent as the failed side stored it, plus that annotation
(``payloads.stamp``), fetched by identity from the failed side's journal (``payloads.fetch``).

Idempotent and resumable: what a run did is kept beside the plan (``repair_log``), a removal names one
message by its id, and the scan finds the copies an earlier run sent; a second run, or one after a run
killed halfway, does only what is left, and never removes another message. Whatever cannot be done is
a problem: one line each, a non-zero exit, never a traceback. A queue the survivor does not have on
that address; a dead-letter address with no queue; a scan that receives fewer messages than the queue
holds (another consumer has some); a removal that finds nothing (consumed on the survivor since the
plan: delivered twice); a re-send whose message the failed side's journal no longer holds live (or a
journal that is not there: one line for all its re-sends); an outcome other than Accepted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.amqp.codec import DecodeError

from . import payloads
from .plan import DEAD_LETTER, DELETE, EXPIRE, REMOVAL, plan_id
from .repair_log import RepairLog
from .survivor import RELEASE, Refused, Seen, Survivor

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
    plan_dir: Path | None = None  # the plan's directory: a relative journal path in it is taken from there
    not_mirrored: bool = False  # also re-send what the mirror does not carry (the plan's not_mirrored)


def apply_plan(plan: dict[str, Any], settings: Settings, say: Say = print) -> Outcome:
    """Apply ``plan`` to the survivor; every problem is in the outcome, none raised (but the survivor
    being unreachable: ``OSError``, proton's ``ConnectionException`` or ``Timeout``)."""
    outcome = Outcome(settings.dry_run)
    log = RepairLog(None if settings.dry_run else settings.log_path, plan_id(plan))
    bodies = _fetch_bodies(plan, settings, log, outcome, say)
    survivor = Survivor(settings.url, settings.user, settings.password, settings.timeout)
    try:
        work = _by_queue(plan, settings)
        for n, ((address, queue), (resends, removals)) in enumerate(sorted(work.items()), 1):
            say(f"queue {queue} (address {address}, {n} of {len(work)}): "
                f"{len(resends)} to re-send, {len(removals)} to remove")  # fmt: skip
            repair = QueueRepair(survivor, address, queue, settings, log, outcome, say)
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


def _resends(plan: dict[str, Any], settings: Settings) -> Entries:
    """The plan's re-sends, and those of the messages the mirror does not carry when asked for."""
    return [*plan["resend"], *(plan.get("not_mirrored", []) if settings.not_mirrored else [])]


def _by_queue(plan: dict[str, Any], settings: Settings) -> dict[tuple[str, str], tuple[Entries, Entries]]:
    """(address, queue) -> (its re-sends, its removals)."""
    work: dict[tuple[str, str], tuple[Entries, Entries]] = defaultdict(lambda: ([], []))
    for entry in _resends(plan, settings):
        work[entry["address"], entry["queue"]][0].append(entry)
    for entry in plan["remove"]:
        work[entry["address"], entry["queue"]][1].append(entry)
    return dict(work)


def _fetch_bodies(
    plan: dict[str, Any], settings: Settings, log: RepairLog, outcome: Outcome, say: Say
) -> dict[tuple[str, str], bytes]:
    """The stored bytes of every re-send not done yet, from the failed side's journal."""
    todo = [e for e in _resends(plan, settings) if (e["queue"], e["identity"]) not in log.sent]
    if not todo:
        return {}
    failed = plan["failed"]
    directory = journal_of(plan, failed, settings)
    say(f"reading {len(todo)} messages to re-send from {failed}'s journal {directory}")
    wanted = [
        payloads.Wanted(e["identity"], e["queue"], e["digest"], tuple(e["hint"]) if e.get("hint") else None)
        for e in todo
    ]
    found = payloads.fetch(directory, wanted, failed, say, plan.get("nodes", {}).get(failed, ""))
    if found.unreadable is not None:  # one line for them all
        outcome.problems.append(f"{len(todo)} re-sends not done: {found.unreadable}")
        return {}
    for e in todo:
        why = found.problems.get((e["queue"], e["identity"]))
        if why is not None:
            outcome.problems.append(f"re-send {e['identity']} to queue {e['queue']}: {why}")
    return found.bodies


def journal_of(plan: dict[str, Any], side: str, settings: Settings) -> Path:
    """Where ``side``'s journal is: ``--journal`` (as given), else the plan's path, which a plan of this
    version holds absolute; a relative one is taken from the plan's directory (a plan moved with its
    journals), else from here."""
    given = settings.journals.get(side)
    if given:
        return Path(given)
    path = Path(plan["journals"][side])
    if path.is_absolute() or settings.plan_dir is None:
        return path
    beside = settings.plan_dir / path
    return beside if beside.exists() or not path.exists() else path


class QueueRepair:
    """The plan's actions on one queue of the survivor."""

    def __init__(
        self, survivor: Survivor, address: str, queue: str, settings: Settings, log: RepairLog,
        outcome: Outcome, say: Say,
    ) -> None:  # fmt: skip
        self.survivor, self.address, self.queue = survivor, address, queue
        self.settings, self.log, self.outcome, self.say = settings, log, outcome, say
        self.present: set[str] = set()  # identities of repaired copies the scan saw
        self.removed = 0

    def run(self, resends: Entries, removals: Entries, bodies: dict[tuple[str, str], bytes]) -> None:
        if self.survivor.depth(self.queue) is None:
            raise Refused(f"the survivor has no queue {self.queue}")
        if removals:
            self._remove(removals)
        if resends:  # the copies an earlier run re-sent: received and released
            depth = self.survivor.depth(self.queue) or 0
            received = self.survivor.scan(self.address, self.queue, depth, self._seen)
            if received < depth:
                self.outcome.problems.append(
                    f"queue {self.queue}: the scan received {received} of its {depth} messages within "
                    f"{self.settings.timeout:g} s: another consumer holds the rest; stop it and run repair "
                    "again"
                )
        sent = self._resend(resends, bodies)
        self.say(f"queue {self.queue}: {self._verb}re-sent {sent}, {self._verb}removed {self.removed}")

    @property
    def _verb(self) -> str:
        return "would have " if self.settings.dry_run else ""

    def _seen(self, seen: list[Seen]) -> list[str]:
        self.present.update(m.origin for m in seen if m.origin is not None)
        return [RELEASE] * len(seen)

    def _remove(self, removals: Entries) -> None:
        """Each removal by the survivor's own message id, at most once: all are recorded before the
        first is asked for, and asked for again on a later run, where one an earlier run did finds
        nothing and, recorded then, counts as already removed. What is done with it follows how the
        failed side settled it (``plan.REMOVAL``): a message it consumed is moved to the dead-letter
        address, when that has a queue to keep it."""
        todo: list[tuple[str, int, str]] = []  # identity, survivor id, action
        for e in removals:
            if e.get("survivor_id") is None:
                self.outcome.problems.append(f"remove {e['identity']} from queue {self.queue}: the plan "
                                             "has no survivor id for it (make a new plan)")  # fmt: skip
            else:
                todo.append(
                    (e["identity"], int(e["survivor_id"]), REMOVAL.get(e.get("how", ""), DEAD_LETTER))
                )
        kept = sum(action == DEAD_LETTER for _, _, action in todo)
        if kept:
            address, queues = self.survivor.dead_letter_queues(self.queue)
            if address == self.address:  # the queue's own address: moving it there is keeping it; delete
                todo = [(i, sid, DELETE if a == DEAD_LETTER else a) for i, sid, a in todo]
            elif address is None or not queues:
                self.outcome.problems.append(self._no_dead_letter_queue(address, kept))
                todo = [t for t in todo if t[2] != DEAD_LETTER]
        if self.settings.dry_run:
            self.removed += len(todo)
            self.outcome.removed += len(todo)
            return
        earlier = {identity for identity, _, _ in todo if (self.queue, identity) in self.log.removing}
        self.log.record("removing", [(self.queue, identity) for identity, _, _ in todo])
        for identity, message_id, action in todo:
            if self.survivor.remove(self.queue, message_id, action):
                self.removed += 1
                self.outcome.removed += 1
            elif identity in earlier:
                self.outcome.already_removed += 1
            else:
                self._not_found(identity, action)

    def _no_dead_letter_queue(self, address: str | None, count: int) -> str:
        if address is None:
            what, fix = "has no dead-letter address", "give it one with a queue"
        else:
            what, fix = f"has a dead-letter address, {address}, with no queue", "give that address a queue"
        return (
            f"queue {self.queue} {what}: {count} removals of messages the failed side consumed are not done "
            f"(a removed message is kept there for you, and would be dropped): {fix} and run repair again"
        )

    def _not_found(self, identity: str, action: str) -> None:
        since = "expired there too, or consumed" if action == EXPIRE else "consumed there"
        self.outcome.problems.append(
            f"remove {identity} from queue {self.queue}: not found on the survivor ({since} since the plan, "
            "so delivered on both sides, or removed by hand, or out to a consumer)"
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
