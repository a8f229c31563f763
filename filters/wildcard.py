"""Artemis address wildcards: matching and the precedence of overlapping matches.

Syntax (Artemis ``WildcardConfiguration`` defaults, configurable through :class:`WildcardSyntax`):
an address is a list of *words* separated by the delimiter ``.``; the empty address has no words.
In a pattern, the word ``*`` matches exactly one word and the word ``#`` matches zero or more
words, wherever it stands (``a.#.b`` matches ``a.b`` and ``a.x.y.b``; ``#`` alone matches every
address, the empty one included). Any other word, including one that merely *contains* ``*`` or
``#``, is literal and compared exactly (case-sensitive). Matching backtracks, so it is exact
for every pattern; Artemis's routing matcher (``AddressImpl``) is greedy and misses a few
patterns with a ``#`` in the middle (``a.#.b`` against ``a.b.x.b``).

Precedence (which ``address-setting`` / ``security-setting`` wins), as Artemis's
``HierarchicalObjectRepository`` orders the matches with its ``MatchComparator``:

1. A pattern without ``#`` is more specific than one with ``#``.
2. Between two patterns with ``#``, the longer pattern *text* is more specific.
3. Between two patterns without ``#``, one without ``*`` (an exact address) is more specific than
   one with ``*``.
4. Between two patterns with ``*`` (and no ``#``), compare word by word from the left: at the first
   position where one has a literal word and the other ``*``, the literal one is more specific;
   if the first pattern runs past the end of the second, the first is more specific.
5. Otherwise the shorter pattern text is more specific.

Remaining ties (e.g. ``a.#`` against ``#.b``: same length) are undefined in Artemis (hash-map
order); here they are broken by the pattern text so the result is deterministic. Artemis tests
for wildcards by characters (``"a#"`` counts as using ``#``), we test by words; both agree for
every pattern that actually uses a wildcard. Artemis also rejects settings whose ``#`` is not
last (``Match.verify``); that is a config-validation concern and is not enforced here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WildcardSyntax:
    """The three configurable characters of Artemis's ``wildcard-addresses``."""

    delimiter: str = "."
    single_word: str = "*"
    any_words: str = "#"

    def split(self, address: str) -> tuple[str, ...]:
        return tuple(address.split(self.delimiter)) if address else ()


DEFAULT_SYNTAX = WildcardSyntax()


class AddressMatcher:
    """A compiled wildcard pattern; build one per pattern and reuse it (see :func:`matcher_for`)."""

    __slots__ = ("_any_words", "_literal", "_single_word", "_words", "pattern", "syntax")

    def __init__(self, pattern: str, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> None:
        self.pattern = pattern
        self.syntax = syntax
        self._words = syntax.split(pattern)
        self._any_words = syntax.any_words
        self._single_word = syntax.single_word
        self._literal = not (self.uses_any_words or self.uses_single_word)

    @property
    def uses_any_words(self) -> bool:
        return self._any_words in self._words

    @property
    def uses_single_word(self) -> bool:
        return self._single_word in self._words

    @property
    def words(self) -> tuple[str, ...]:
        return self._words

    def matches(self, address: str) -> bool:
        if self._literal:
            return address == self.pattern
        if self._words == (self._any_words,):
            return True
        return self._match_words(self.syntax.split(address))

    def _match_words(self, words: tuple[str, ...]) -> bool:
        # Glob matching with backtracking to the most recent `#`: O(len(pattern) * len(address)).
        pattern = self._words
        p = w = 0
        star_p, star_w = -1, 0
        while w < len(words):
            if p < len(pattern) and pattern[p] == self._any_words:
                star_p, star_w = p, w
                p += 1
            elif p < len(pattern) and pattern[p] in (self._single_word, words[w]):
                p += 1
                w += 1
            elif star_p >= 0:
                star_w += 1
                p, w = star_p + 1, star_w
            else:
                return False
        while p < len(pattern) and pattern[p] == self._any_words:
            p += 1
        return p == len(pattern)

    def __repr__(self) -> str:
        return f"AddressMatcher({self.pattern!r})"


@functools.lru_cache(maxsize=4096)
def matcher_for(pattern: str, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> AddressMatcher:
    """A shared compiled matcher; patterns come from config, so the cache stays small."""
    return AddressMatcher(pattern, syntax)


def compare_specificity(left: str, right: str, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> int:
    """Negative if ``left`` is more specific than ``right``, positive if less, 0 if tied."""
    a, b = matcher_for(left, syntax), matcher_for(right, syntax)
    if a.uses_any_words != b.uses_any_words:
        return 1 if a.uses_any_words else -1
    if a.uses_any_words:
        return len(right) - len(left)
    if a.uses_single_word != b.uses_single_word:
        return 1 if a.uses_single_word else -1
    if a.uses_single_word:
        by_words = _compare_single_word_positions(a.words, b.words, syntax.single_word)
        if by_words:
            return by_words
    return len(left) - len(right)


def _compare_single_word_positions(left: tuple[str, ...], right: tuple[str, ...], single: str) -> int:
    for index, left_word in enumerate(left):
        if index >= len(right):
            return -1
        left_wild, right_wild = left_word == single, right[index] == single
        if left_wild != right_wild:
            return 1 if left_wild else -1
    return 0


def best_matches(patterns: Iterable[str], address: str, syntax: WildcardSyntax = DEFAULT_SYNTAX) -> list[str]:
    """The patterns matching ``address``, from least to most specific (the last one wins)."""
    matching = {p for p in patterns if matcher_for(p, syntax).matches(address)}

    def most_specific_first(left: str, right: str) -> int:
        return compare_specificity(left, right, syntax) or (left > right) - (left < right)

    ordered = sorted(matching, key=functools.cmp_to_key(most_specific_first))
    return ordered[::-1]


def most_specific(
    patterns: Iterable[str], address: str, syntax: WildcardSyntax = DEFAULT_SYNTAX
) -> str | None:
    """The single pattern that decides for ``address``, or None if nothing matches."""
    ordered = best_matches(patterns, address, syntax)
    return ordered[-1] if ordered else None
