"""Filter expressions with Artemis's grammar and semantics (filters/selector.py).

The same table of selectors runs against a real Artemis in tests/artemis/test_selectors_with_artemis.py;
here each expectation is derived from Artemis's source (StrictParser, ComparisonExpression, ...).
"""

from __future__ import annotations

import pytest

from filters.selector import SelectorError, Unsupported, jms_to_core, parse

MESSAGE: dict[str, object] = {
    "color": "red",
    "weight": 5,
    "price": 2.5,
    "big": 10**12,
    "flag": True,
    "off": False,
    "text_number": "21",
    "quote": "it's",
    "pct": "100%",
    "foo-bar": 0,
    "AMQPriority": 7,
    "Case": "upper",
}


def matches(text: str, message: dict[str, object] | None = None) -> bool:
    selector = parse(text)
    assert selector is not None
    values = MESSAGE if message is None else message
    return selector.matches(values.get)


@pytest.mark.parametrize(
    "text",
    [
        "color = 'red'",
        "color <> 'blue'",
        "weight = 5",
        "weight = 5.0",  # numbers compare across integer and floating types
        "weight > 4 AND weight < 6",
        "weight BETWEEN 5 AND 6",
        "weight NOT BETWEEN 6 AND 9",
        "price * 2 = 5",
        "weight / 2 = 2.5",  # division is floating point
        "weight % 3 = 2",
        "-weight = -5",
        "weight + 1 = 6 AND big > 999999999999",
        "color IN ('red', 'green')",
        "color NOT IN ('blue', 'green')",
        "color LIKE 'r_d'",
        "color LIKE '%e%'",
        "pct LIKE '100!%' ESCAPE '!'",
        "quote = 'it''s'",
        "flag",
        "flag = TRUE",
        "NOT off",
        "missing IS NULL",
        "color IS NOT NULL",
        "'x' <> missing",  # Artemis: false (not unknown) when only the right side is absent
        "color = 'red' OR missing = 1",
        "AMQPriority >= 7",
        "Case = 'upper'",
        "color = 'red' and weight = 5",  # keywords in any case
        "0x10 = 16 AND 010 = 8 AND 5L = 5 AND 1e1 = 10 AND .5 = 0.5",
        "color = 'red' -- a comment\n AND weight = 5",
        "/* a comment */ color = 'red'",
        "\"color\" = 'red'",
        "convert_string_expressions:text_number > 18",
        "hyphenated_props:foo-bar = 0",
        "color + 'dy' = 'reddy'",
        "(color = 'blue' OR weight = 5) AND NOT (price > 3)",
    ],
)
def test_matching_selectors(text: str) -> None:
    assert matches(text)


@pytest.mark.parametrize(
    "text",
    [
        "color = 'blue'",
        "color = 'RED'",  # strings are case-sensitive
        "case = 'upper'",  # so are identifiers
        "missing = 1",
        "missing <> 1",  # unknown, not true
        "NOT (missing = 1)",
        "missing > 1 OR missing < 1",
        "text_number > 18",  # a string never compares with a number...
        "text_number = 21",
        "weight = '5'",
        "flag = 1",  # ...nor a boolean with anything but a boolean
        "weight",  # a property that is not a boolean is false
        "color LIKE 'r'",
        "weight LIKE '5'",  # LIKE matches strings only
        "weight IN ('5')",  # so does IN
        "missing IN ('a') OR missing NOT IN ('a')",
        "color - 1 = 0",  # arithmetic on a string: an error, which selects nothing
        "weight / 0 = 1",
        "color NOT LIKE 'r%'",
        "foo-bar = 0",  # foo minus bar: hyphens belong to names only with hyphenated_props:
    ],
)
def test_selectors_that_do_not_match(text: str) -> None:
    assert not matches(text)


@pytest.mark.parametrize(
    "text",
    [
        "color =",
        "color = 'red' AND",
        "color = NULL",  # Artemis: NULL cannot be compared
        "'a' > 'b'",  # a string literal cannot be ordered
        "TRUE > 1",
        "TRUE = 'x'",
        "5 IN ('5')",  # IN needs a property
        "color LIKE 'a' ESCAPE 'ab'",
        "color IN (1, 2)",  # string literals only
        "weight + 1",  # not a boolean
        "'text'",
        "color = 'red' extra",
        "color ! 'a'",
        "09 = 9",
        "(color = 'red'",
        "color = 'red' -- a comment ends with its line, and the text is trimmed first",
    ],
)
def test_invalid_selectors_are_refused(text: str) -> None:
    with pytest.raises(SelectorError):
        parse(text)


@pytest.mark.parametrize("text", ["XPATH '//a'", "color = 'red' AND XQUERY 'x'"])
def test_xpath_and_xquery_are_valid_but_not_evaluated_here(text: str) -> None:
    with pytest.raises(Unsupported):
        parse(text)


def test_an_empty_filter_is_no_filter() -> None:
    assert parse("") is None and parse("   ") is None


def test_unknown_not_and_or_are_three_valued() -> None:
    assert not matches("NOT (missing = 1 AND color = 'red')")  # NOT unknown is unknown
    assert matches("NOT (missing = 1 AND color = 'blue')")  # unknown AND false is false
    assert matches("missing = 1 OR color = 'red'")  # unknown OR true is true


@pytest.mark.parametrize(
    ("jms", "core"),
    [
        ("JMSPriority > 4", "AMQPriority > 4"),
        ("JMSDeliveryMode = 'PERSISTENT'", "AMQDurable = 'DURABLE'"),
        ("JMSDeliveryMode = 'NON_PERSISTENT'", "AMQDurable = 'NON_DURABLE'"),
        ("JMSMessageID = 'ID:1' AND JMSTimestamp > 0", "AMQUserID = 'ID:1' AND AMQTimestamp > 0"),
        ("JMSExpiration = 0 OR JMSXGroupID = 'g'", "AMQExpiration = 0 OR AMQGroupID = 'g'"),
        (
            "myJMSPriority = 1 AND JMSPriorityX = 2",
            "myJMSPriority = 1 AND JMSPriorityX = 2",
        ),  # whole names only
        ("s = 'JMSPriority'", "s = 'JMSPriority'"),  # not inside a literal
        ("JMSType = 'a' AND JMSCorrelationID = 'b'", "JMSType = 'a' AND JMSCorrelationID = 'b'"),
    ],
)
def test_jms_header_names_become_artemis_filter_names(jms: str, core: str) -> None:
    assert jms_to_core(jms) == core
