"""Address wildcards: matching tables, Artemis precedence tables and properties."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from filters import AddressMatcher, WildcardSyntax, best_matches, compare_specificity, most_specific

MATCH_CASES = [
    ("#", "", True),
    ("#", "a", True),
    ("#", "a.b.c", True),
    ("*", "", False),
    ("*", "a", True),
    ("*", "a.b", False),
    ("a", "a", True),
    ("a", "a.b", False),
    ("a", "ab", False),
    ("a", "A", False),
    ("a.b", "a.b", True),
    ("a.*", "a", False),
    ("a.*", "a.b", True),
    ("a.*", "a.b.c", False),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.#", "a", True),
    ("a.#", "a.b", True),
    ("a.#", "a.b.c", True),
    ("a.#", "ab", False),
    ("a.#", "b.a", False),
    ("#.c", "c", True),
    ("#.c", "a.b.c", True),
    ("#.c", "a.b.cd", False),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.b", True),
    ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.b.x.b", True),  # Artemis's greedy AddressImpl says no; exact matching says yes
    ("a.#.b", "a.b.x", False),
    ("*.#", "", False),
    ("*.#", "a", True),
    ("#.*", "a.b.c", True),
    ("#.#", "", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b.c.d", True),
    ("a#", "a", False),  # `#` only counts as a whole word
    ("a#", "a#", True),
    ("a*", "ab", False),
    ("a..b", "a..b", True),
    ("a.*.b", "a..b", True),
]


@pytest.mark.parametrize(("pattern", "address", "expected"), MATCH_CASES)
def test_matches(pattern: str, address: str, expected: bool) -> None:
    assert AddressMatcher(pattern).matches(address) is expected


def test_custom_syntax() -> None:
    syntax = WildcardSyntax(delimiter="/", single_word="+", any_words="%")
    assert AddressMatcher("a/+/c", syntax).matches("a/b/c")
    assert AddressMatcher("a/%", syntax).matches("a/b/c")
    assert not AddressMatcher("a.#", syntax).matches("a.b")


# (patterns, address, expected order from least to most specific)
PRECEDENCE_CASES = [
    (["#", "a.#", "a.b"], "a.b", ["#", "a.#", "a.b"]),
    (["#", "a.b.#", "a.#"], "a.b.c", ["#", "a.#", "a.b.#"]),
    (["a.#", "a.*"], "a.b", ["a.#", "a.*"]),
    (["*.b", "a.*"], "a.b", ["*.b", "a.*"]),
    (["*.*.c", "a.*.c", "*.b.c"], "a.b.c", ["*.*.c", "*.b.c", "a.*.c"]),
    (["a.*", "a.b", "#"], "a.b", ["#", "a.*", "a.b"]),
    (["*.#", "#"], "a", ["#", "*.#"]),
    (["a.#", "#.b"], "a.b", ["a.#", "#.b"]),  # equal-length `#` tie broken by text
    (["x.#", "a.#"], "a.b", ["a.#"]),
    ([], "a", []),
    (["eu.fr.#", "eu.*.sport", "eu.#"], "eu.fr.sport", ["eu.#", "eu.fr.#", "eu.*.sport"]),
]


@pytest.mark.parametrize(("patterns", "address", "expected"), PRECEDENCE_CASES)
def test_best_matches_orders_least_to_most_specific(
    patterns: list[str], address: str, expected: list[str]
) -> None:
    assert best_matches(patterns, address) == expected
    assert most_specific(patterns, address) == (expected[-1] if expected else None)


@pytest.mark.parametrize(
    ("left", "right", "sign"),
    [
        ("a.b", "a.#", -1),
        ("a.*", "a.#", -1),
        ("a.b.#", "a.#", -1),
        ("a.*", "a.b", 1),
        ("a.*", "*.b", -1),
        ("a.*.*", "a.*", -1),  # left runs past the end of right
        ("a.#", "#.b", 0),
    ],
)
def test_compare_specificity(left: str, right: str, sign: int) -> None:
    result = compare_specificity(left, right)
    assert (result > 0) - (result < 0) == sign


word = st.sampled_from(["a", "b", "c", "de"])
address_words = st.lists(word, max_size=5)
pattern_words = st.lists(st.one_of(word, st.sampled_from(["*", "#"])), max_size=5)


def _reference(pattern: list[str], address: list[str]) -> bool:
    """A slow independent oracle: translate to a regex over words joined by '/'."""
    parts = [{"*": r"[^/]+/", "#": r"(?:[^/]+/)*"}.get(w, re.escape(w) + "/") for w in pattern]
    return re.fullmatch("".join(parts), "".join(w + "/" for w in address)) is not None


@given(pattern_words, address_words)
def test_matches_agrees_with_reference(pattern: list[str], address: list[str]) -> None:
    assert AddressMatcher(".".join(pattern)).matches(".".join(address)) is _reference(pattern, address)


@given(st.text(max_size=20))
def test_any_words_alone_matches_everything(address: str) -> None:
    assert AddressMatcher("#").matches(address)


@given(address_words, address_words)
def test_literal_pattern_matches_only_itself(pattern: list[str], address: list[str]) -> None:
    assert AddressMatcher(".".join(pattern)).matches(".".join(address)) is (pattern == address)


@given(address_words)
def test_single_words_match_any_address_of_that_length(address: list[str]) -> None:
    pattern = ".".join("*" for _ in address)
    assert AddressMatcher(pattern).matches(".".join(address))
    assert not AddressMatcher(pattern + ".*").matches(".".join(address))


@given(st.lists(pattern_words, max_size=6), address_words)
def test_best_matches_is_the_matching_subset_with_exact_last(
    patterns: list[list[str]], address: list[str]
) -> None:
    texts = [".".join(p) for p in patterns] + [".".join(address)]
    ordered = best_matches(texts, ".".join(address))
    assert sorted(ordered) == sorted({t for t in texts if AddressMatcher(t).matches(".".join(address))})
    assert ordered[-1] == ".".join(address)
