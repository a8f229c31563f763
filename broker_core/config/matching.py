"""Artemis match expressions for `<address-setting match>` and `<security-setting match>`.

Words are separated by ``.``; ``*`` matches exactly one word and ``#`` zero or more words.

Precedence (most specific first), following Artemis's HierarchicalObjectRepository:
  1. a literal match (no wildcard) beats any wildcard match;
  2. a match with ``*`` but no ``#`` beats any match with ``#``;
  3. between two ``#`` matches the longer string wins;
  4. between two ``*`` matches, compare word by word: the first position where one has ``*`` and the
     other a literal word, the literal wins; if still tied, the shorter string wins.
This private rule stands in until `filters.wildcard.AddressMatcher` exists in the repository.
"""

from __future__ import annotations

from functools import cmp_to_key

ANY_WORDS = "#"
ONE_WORD = "*"
DELIMITER = "."


def matches(match: str, address: str) -> bool:
    return _match_words(match.split(DELIMITER), address.split(DELIMITER))


def _match_words(pattern: list[str], words: list[str]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == ANY_WORDS:
        return any(_match_words(rest, words[skip:]) for skip in range(len(words) + 1))
    if not words:
        return False
    return (head == ONE_WORD or head == words[0]) and _match_words(rest, words[1:])


def _compare(left: str, right: str) -> int:
    """Negative when `left` is more specific than `right`."""
    for marker in (ANY_WORDS, ONE_WORD):
        if (marker in left) != (marker in right):
            return 1 if marker in left else -1
        if marker in left:
            return _compare_same_kind(left, right, marker)
    return len(left) - len(right)


def _compare_same_kind(left: str, right: str, marker: str) -> int:
    if marker == ANY_WORDS:
        return len(right) - len(left)
    right_words = right.split(DELIMITER)
    for index, word in enumerate(left.split(DELIMITER)):
        if index >= len(right_words):
            return -1
        if (word == ONE_WORD) != (right_words[index] == ONE_WORD):
            return 1 if word == ONE_WORD else -1
    return len(left) - len(right)


def best_first(match_expressions: list[str]) -> list[str]:
    """Sort match expressions most specific first."""
    return sorted(match_expressions, key=cmp_to_key(_compare))
