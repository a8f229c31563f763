"""Expectations in the style of the protonj2 test peer: `expect_attach(...).respond(...)`, then
`wait_for_script_to_complete(timeout)`.

Expectations are consumed in order by the attaches the server receives, over all its connections. An
attach that finds the script used up gets the server's default reply, so a script may describe only
the start of a conversation (e.g. the refused attempts before a reconnect succeeds).
"""

from __future__ import annotations

from typing import Any

from proton import Array, Described

from tests.support.peer.codec import FIELDS, composite_fields
from tests.support.peer.connection import Records
from tests.support.peer.frames import Frame, LinkReply, Reply

ATTACH_FIELDS = frozenset(FIELDS[0x12][1])


def _comparable(actual: Any, expected: Any) -> Any:
    """The field as a check sees it: an Array as its elements, a terminus checked by a string as its
    address (the name a test gives a source or target)."""
    if isinstance(actual, Array):
        return list(actual.elements)
    if isinstance(actual, Described) and isinstance(expected, str):
        terminus = composite_fields(actual)
        return None if terminus is None else terminus["address"]
    return actual


def _matches(actual: Any, expected: Any) -> bool:
    if callable(expected):
        return bool(expected(actual))
    return bool(_comparable(actual, expected) == expected)


class AttachExpectation:
    """One expected attach: checks on its fields and the answer it gets."""

    def __init__(self, checks: dict[str, Any]) -> None:
        self.checks = checks
        self.reply: Reply | None = None  # None: the server's default reply
        self.attach: Frame | None = None  # the attach that consumed this expectation
        self.answered = False

    def respond(self, reply: Reply | None = None, **fields: Any) -> AttachExpectation:
        """Answer with `reply` (a LinkReply or a function of the attach) or a LinkReply of `fields`."""
        if reply is not None and fields:
            raise TypeError("give a reply or the fields of one, not both")
        self.reply = reply if reply is not None else LinkReply(**fields)
        return self

    def mismatches(self, attach: Frame) -> list[str]:
        return [
            f"{name}: expected {want!r}, got {_comparable(attach[name], want)!r}"
            for name, want in self.checks.items()
            if not _matches(attach[name], want)
        ]


class Script:
    """A server's expectations; state is guarded by the records' condition, which the waits use."""

    def __init__(self, records: Records) -> None:
        self.records = records
        self.expectations: list[AttachExpectation] = []
        self.failures: list[str] = []

    def expect_attach(self, **checks: Any) -> AttachExpectation:
        """Checks by attach field name: a value (an Array compares by its elements, a terminus by its
        address) or a predicate on the field."""
        unknown = set(checks) - ATTACH_FIELDS
        if unknown:
            raise TypeError(f"not attach fields: {sorted(unknown)}")
        expectation = AttachExpectation(checks)
        with self.records.cond:
            self.expectations.append(expectation)
        return expectation

    def take(self, attach: Frame) -> AttachExpectation | None:
        """The next unconsumed expectation, now consumed by `attach` (mismatches become failures)."""
        with self.records.cond:
            for index, expectation in enumerate(self.expectations):
                if expectation.attach is None:
                    expectation.attach = attach
                    where = f"attach #{index + 1} ({attach['name']})"
                    self.failures += [f"{where}: {m}" for m in expectation.mismatches(attach)]
                    self.records.cond.notify_all()
                    return expectation
            return None

    def answered(self, attach: Frame) -> None:
        with self.records.cond:
            for expectation in self.expectations:
                if expectation.attach is attach:
                    expectation.answered = True
            self.records.cond.notify_all()

    def wait_complete(self, timeout: float) -> None:
        """Until every expected attach came and was answered; AssertionError on a mismatch."""

        def pending() -> list[AttachExpectation]:
            return [e for e in self.expectations if not e.answered]

        with self.records.cond:
            self.records.cond.wait_for(lambda: self.failures or not pending(), timeout)
            failures, left = list(self.failures), pending()
        if failures:
            raise AssertionError("the peer's script was not followed:\n" + "\n".join(failures))
        if left:
            total = len(self.expectations)
            raise TimeoutError(
                f"timed out after {timeout:g}s: {len(left)} of {total} expected attaches not answered, "
                f"the first of them checking {left[0].checks!r}"
            )
