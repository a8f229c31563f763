"""AddressFilter: Artemis MirrorAddressFilter semantics, plus the suspicious-pattern warnings."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from filters import AddressFilter

# (filter text, address, expected). The first block is every case of spec section 5.
MATCH_CASES = [
    ("", "any", True),
    ("test", "test123", True),
    ("a,b", "b", True),
    ("!c", "a", True),
    ("!a,!", "b123", True),
    ("a,b,!ab", "ab", False),
    ("!a,!b", "b123", False),
    ("a,", "b", False),
    # Our own cases.
    (None, "anything", True),
    ("", "", True),
    ("a,", "a.x", True),
    (",", "x", True),
    ("!", "x", True),
    (",,!", "x", True),
    ("eu", "europe", True),
    ("eu.", "europe", False),
    ("EU", "eu.orders", False),
    ("eu, !eu.uk", "eu.uk.orders", True),
    ("eu, !eu.uk", " !eu.uk", True),
    ("eu,!eu.uk", "eu.uk.orders", False),
    ("eu,!eu.uk", "eu.fr", True),
    ("!eu,eu.fr", "eu.fr", False),
    ("a.#", "a.b", False),
    ("a.#", "a.#.b", True),
    ("a.*", "a.b", False),
    ("!!x", "!x1", False),
    ("!!x", "x1", True),
    ("a,a,a", "a", True),
    ("a,b", "c", False),
    ("x", "", False),
]


@pytest.mark.parametrize(("text", "address", "expected"), MATCH_CASES)
def test_matches(text: str | None, address: str, expected: bool) -> None:
    assert AddressFilter.parse(text).matches(address) is expected


@pytest.mark.parametrize(
    ("text", "allow", "deny"),
    [
        (None, (), ()),
        ("", (), ()),
        ("a,!b", ("a",), ("b",)),
        ("eu, !eu.uk", ("eu", " !eu.uk"), ()),
        ("a,,b,", ("a", "b"), ()),
        ("!,!x,x,!x", ("x",), ("x",)),
    ],
)
def test_parse_keeps_entries_verbatim(
    text: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
) -> None:
    parsed = AddressFilter.parse(text)
    assert (parsed.allow, parsed.deny) == (allow, deny)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("eu, !eu.uk", "surrounding whitespace"),
        ("eu, !eu.uk", "allow of the prefix ' !eu.uk'"),
        ("a,!a", "both allowed and denied"),
        ("a,", "trailing comma"),
        ("a,,b", "doubled comma"),
        (",a", "leading"),
        ("a,!", "'!' with nothing"),
        ("eu.fr,!eu", "can never match"),
        ("orders.#", "wildcard"),
        ("!* ", "wildcard"),
    ],
)
def test_suspicious_patterns_are_reported(text: str, fragment: str) -> None:
    warnings = AddressFilter.parse(text).suspicious()
    assert any(fragment in warning for warning in warnings), warnings


@pytest.mark.parametrize("text", [None, "", "a", "a,b", "eu,!eu.uk", "!tmp.,!internal", "a,!b"])
def test_clean_filters_have_no_warnings(text: str | None) -> None:
    assert AddressFilter.parse(text).suspicious() == []


def test_both_allowed_and_denied_is_not_also_reported_as_unreachable() -> None:
    assert len(AddressFilter.parse("a,!a").suspicious()) == 1


words = st.text(alphabet="ab.!", max_size=6)


@given(st.lists(words, max_size=4), words)
def test_deny_always_wins(entries: list[str], address: str) -> None:
    parsed = AddressFilter.parse(",".join(entries))
    if any(address.startswith(prefix) for prefix in parsed.deny):
        assert not parsed.matches(address)


@given(st.lists(words, max_size=4), words)
def test_filter_without_allow_entries_accepts_all_not_denied(entries: list[str], address: str) -> None:
    parsed = AddressFilter.parse(",".join("!" + e for e in entries))
    assert parsed.matches(address) is not any(address.startswith(d) for d in parsed.deny)
