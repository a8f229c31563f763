"""The mirror's ``address-filter``: comma-separated address prefixes to include or exclude.

Semantics follow Artemis's ``MirrorAddressFilter`` exactly, because two brokers that disagree on
which addresses are mirrored silently diverge:

- The text is split on ``,`` *without trimming*; whitespace is part of the prefix.
- The entries ``""`` and ``"!"`` are ignored.
- ``!x`` denies the prefix ``x``; any other entry allows its own text as a prefix.
- An address matching any deny prefix is rejected (exclusion wins).
- Otherwise, if there are allow prefixes, the address must start with one of them.
- An absent or empty filter (or one with only ignored entries) matches every address.
- Matching is a plain, case-sensitive ``startswith``: no wildcards and no awareness of the
  ``.`` delimiter, so ``eu`` also matches ``europe``.

Because these rules make some typos silently change the meaning, :meth:`AddressFilter.suspicious`
lists the patterns that almost certainly mean something else, for the config loader to warn about.
"""

from __future__ import annotations

from dataclasses import dataclass

_DENY_MARK = "!"
_SEPARATOR = ","
_WILDCARD_CHARS = ("*", "#")


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True, slots=True)
class AddressFilter:
    """A parsed address filter; build it with :meth:`parse`."""

    text: str
    allow: tuple[str, ...]
    deny: tuple[str, ...]

    @classmethod
    def parse(cls, text: str | None) -> AddressFilter:
        """Parse the attribute value; ``None`` (attribute absent) matches everything."""
        allow: list[str] = []
        deny: list[str] = []
        for entry in (text or "").split(_SEPARATOR):
            if entry in ("", _DENY_MARK):
                continue
            if entry.startswith(_DENY_MARK):
                deny.append(entry[len(_DENY_MARK) :])
            else:
                allow.append(entry)
        return cls(text=text or "", allow=_unique(allow), deny=_unique(deny))

    def matches(self, address: str) -> bool:
        """Whether events for ``address`` pass the filter."""
        if any(address.startswith(prefix) for prefix in self.deny):
            return False
        if self.allow:
            return any(address.startswith(prefix) for prefix in self.allow)
        return True

    def suspicious(self) -> list[str]:
        """Human-readable warnings for entries that probably do not mean what they say."""
        entries = self.text.split(_SEPARATOR) if self.text else []
        warnings = [w for entry in entries for w in _entry_warnings(entry)]
        warnings += _empty_entry_warnings(entries)
        warnings += self._conflict_warnings()
        return warnings

    def _conflict_warnings(self) -> list[str]:
        warnings: list[str] = []
        for prefix in self.allow:
            if prefix in self.deny:
                warnings.append(
                    f"prefix {prefix!r} is both allowed and denied; the deny wins, so the allow has no effect"
                )
                continue
            shadowing = [d for d in self.deny if prefix.startswith(d)]
            if shadowing:
                warnings.append(
                    f"allow prefix {prefix!r} can never match: every such address is denied by "
                    f"{'!' + shadowing[0]!r}"
                )
        return warnings


def _entry_warnings(entry: str) -> list[str]:
    warnings: list[str] = []
    if entry != entry.strip():
        meaning = _meaning(entry)
        warnings.append(
            f"entry {entry!r} has surrounding whitespace, which is kept: it is {meaning}; "
            "remove the spaces around commas"
        )
    if any(char in entry for char in _WILDCARD_CHARS):
        warnings.append(
            f"entry {entry!r} contains a wildcard character, but address-filter entries are plain "
            "prefixes: it only matches addresses that literally start with it"
        )
    return warnings


def _meaning(entry: str) -> str:
    if entry.startswith(_DENY_MARK):
        return f"a deny of the prefix {entry[1:]!r}"
    return f"an allow of the prefix {entry!r}"


def _empty_entry_warnings(entries: list[str]) -> list[str]:
    warnings: list[str] = []
    if entries and entries[-1] == "" and len(entries) > 1:
        warnings.append(
            "trailing comma: the empty last entry is ignored (it does not mean 'everything'), "
            "so only the listed prefixes are allowed"
        )
    if any(entry == "" for entry in entries[:-1]):
        warnings.append("empty entry from a leading or doubled comma is ignored")
    if _DENY_MARK in entries:
        warnings.append("entry '!' with nothing after it is ignored")
    return warnings
