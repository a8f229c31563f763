"""Filter expressions and JMS message selectors, with Apache ActiveMQ Artemis's grammar and semantics.

A selector is the SQL-92 subset of JMS (`color = 'red' AND weight > 2.5`); Artemis uses the same grammar
for every filter (a consumer's selector, a queue's `<filter>`, management's filters), with its own names
for the message's header fields (`AMQPriority`, ...): `jms_to_core` rewrites the JMS names a consumer's
selector uses into those, as Artemis does for AMQP consumers. This module knows nothing of messages:
`Selector.matches` asks a lookup for each name (see broker_core/message_fields.py) and gets a value or
None (absent).

Grammar (Artemis's StrictParser): OR, AND, NOT; `=`, `<>`, `<`, `<=`, `>`, `>=`; `+ - * / %`; `[NOT]
BETWEEN a AND b`; `[NOT] LIKE 'pattern' [ESCAPE 'c']` (`%` any run, `_` one character); `[NOT] IN ('a',
...)` (string literals, a property on the left); `IS [NOT] NULL`; literals 'text' ('' for a quote), TRUE,
FALSE, NULL, decimal (an L suffix allowed), hex 0x.., octal 0.., and floats; identifiers of letters,
digits, `_` and `$` (case-sensitive; keywords are not), or "quoted"; `-- comment` to the end of a line and
`/* comments */`. The prefixes `convert_string_expressions:` (a string property compared with a number
is converted) and `hyphenated_props:` (identifiers may contain `-`) are Artemis's. XPATH and XQUERY are
refused.

Semantics (Artemis's, quirks included): three-valued logic, an absent property makes a comparison
unknown and the message does not match; numbers compare across integer and floating types, a string
never equals a number, a boolean only a boolean; `/` and `%` are floating point; `IN` and `LIKE` match
strings only; a bare property is true only if it is the boolean true. Artemis evaluates `a = b` as
unknown when `a` is absent but as false when only `b` is, so `'x' <> prop` matches a message without
`prop`: kept, since the same selector must select the same messages on both brokers of a mirror.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Final

Lookup = Callable[[str], object]
Evaluator = Callable[[Lookup], object]

CONVERT_STRING_EXPRESSIONS: Final = "convert_string_expressions:"
HYPHENATED_PROPS: Final = "hyphenated_props:"
_NO_CONVERT: Final = "no_convert_string_expressions:"
_NO_HYPHENATED: Final = "no_hyphenated_props:"
KEYWORDS: Final = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "TRUE", "FALSE", "NULL", "XPATH", "XQUERY"}
)

# JMS header names and the names Artemis's filters give them (its SelectorTranslator), with the values of
# JMSDeliveryMode.
JMS_NAMES: Final = (
    ("JMSDeliveryMode", "AMQDurable"),
    ("'PERSISTENT'", "'DURABLE'"),
    ("'NON_PERSISTENT'", "'NON_DURABLE'"),
    ("JMSPriority", "AMQPriority"),
    ("JMSTimestamp", "AMQTimestamp"),
    ("JMSMessageID", "AMQUserID"),
    ("JMSExpiration", "AMQExpiration"),
    ("JMSXGroupID", "AMQGroupID"),
)


class SelectorError(ValueError):
    """The text is not a valid filter expression (Artemis: AMQ229020 invalid filter)."""


class Unsupported(SelectorError):
    """A valid expression of a kind this broker does not evaluate (XPath, XQuery)."""


class Selector:
    """A parsed filter: `matches(lookup)` for one message."""

    __slots__ = ("_evaluate", "text")

    def __init__(self, text: str, evaluate: Evaluator) -> None:
        self.text = text
        self._evaluate = evaluate

    def __repr__(self) -> str:
        return f"<Selector {self.text!r}>"

    def matches(self, lookup: Lookup) -> bool:
        """Whether the message whose fields `lookup` gives is selected (an error while evaluating, such as
        arithmetic on a string, selects nothing, as in Artemis)."""
        try:
            return self._evaluate(lookup) is True
        except (ArithmeticError, TypeError, ValueError):
            return False


def parse(text: str) -> Selector | None:
    """A filter expression; None for an empty one (no filter: everything matches). SelectorError when it
    is not valid."""
    actual = text.strip()
    if not actual:
        return None
    convert = hyphenated = False
    while True:
        for prefix, flag in (
            (CONVERT_STRING_EXPRESSIONS, "c+"),
            (HYPHENATED_PROPS, "h+"),
            (_NO_CONVERT, "c-"),
            (_NO_HYPHENATED, "h-"),
        ):
            if actual.startswith(prefix):
                actual = actual[len(prefix) :]
                if flag[0] == "c":
                    convert = flag[1] == "+"
                else:
                    hyphenated = flag[1] == "+"
                break
        else:
            break
    parser = _Parser(_tokens(actual, hyphenated), convert)
    node = parser.expression()
    parser.expect_end()
    return Selector(text.strip(), parser.boolean(node))


def jms_to_core(selector: str) -> str:
    """Rewrite the JMS header names of a consumer's selector into Artemis's filter names, outside string
    literals and only as whole identifiers (its SelectorTranslator)."""
    out = selector
    for match, replace in JMS_NAMES:
        out = _replace_name(out, match, replace)
    return out


def _identifier_part(c: str) -> bool:
    return c.isalnum() or c in "_$"


def _replace_name(text: str, match: str, replace: str) -> str:
    quoted_match = match.startswith("'")
    positions: list[int] = []
    in_quote = False
    matched = 0
    for i, c in enumerate(text):
        if c == "'":
            in_quote = not in_quote
        if (not in_quote or quoted_match) and c == match[matched]:
            matched += 1
            if matched == len(match):
                start = i - len(match) + 1
                before_ok = start == 0 or not _identifier_part(text[start - 1])
                after_ok = i == len(text) - 1 or not _identifier_part(text[i + 1])
                if before_ok and after_ok:
                    positions.append(start)
                matched = 0
        else:
            matched = 0
    if not positions:
        return text
    parts, last = [], 0
    for start in positions:
        parts += [text[last:start], replace]
        last = start + len(match)
    parts.append(text[last:])
    return "".join(parts)


# ----------------------------------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
  | (?P<string>'(?:[^']|'')*')
  | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<hex>0[xX][0-9a-fA-F]+)
  | (?P<decimal>[1-9]\d*[lL]?)
  | (?P<octal>0[0-7]*)
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<op><>|<=|>=|[=<>+\-*/%(),])
    """,
    re.VERBOSE,
)
_ID = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_HYPHENATED_ID = re.compile(r"[A-Za-z_$][A-Za-z0-9_$\-]*")

Token = tuple[str, str, int]  # kind, text, position


def _tokens(text: str, hyphenated: bool) -> list[Token]:
    out: list[Token] = []
    ident = _HYPHENATED_ID if hyphenated else _ID
    pos = 0
    while pos < len(text):
        m = ident.match(text, pos)
        if m is not None:
            word = m.group()
            kind = "keyword" if word.upper() in KEYWORDS else "id"
            out.append((kind, word.upper() if kind == "keyword" else word, pos))
            pos = m.end()
            continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SelectorError(f"unexpected character {text[pos]!r} at position {pos + 1}")
        kind = m.lastgroup or ""
        if kind != "space":
            out.append((kind, m.group(), pos))
        pos = m.end()
    out.append(("end", "", len(text)))
    return out


# ------------------------------------------------------------------------------------------ values


def _is_number(v: object) -> bool:
    return type(v) is int or type(v) is float


def _is_string(v: object) -> bool:
    return type(v) is str


def _java_str(v: object) -> str:
    """String.valueOf in Java, for `'text' + value`."""
    if type(v) is bool:
        return "true" if v else "false"
    if type(v) is float:
        if math.isnan(v):
            return "NaN"
        return repr(v) if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
    return str(v)


def _to_number(text: str, like: object) -> object:
    """A string converted to the type of the number it is compared with (convert_string_expressions)."""
    return float(text) if type(like) is float else int(text.strip())


def _compare(lv: object, rv: object, convert: bool) -> int | None:
    """lv against rv (-1, 0, 1), or None when Artemis deems them incomparable (the comparison is false)."""
    try:
        if type(lv) is bool or type(rv) is bool:
            if type(lv) is bool and type(rv) is bool:
                return (lv > rv) - (lv < rv)
            if convert and type(lv) is bool and _is_string(rv):
                rb = str(rv).lower() == "true"
                return (lv > rb) - (lv < rb)
            if convert and _is_string(lv) and type(rv) is bool:
                lb = str(lv).lower() == "true"
                return (lb > rv) - (lb < rv)
            return None
        if (_is_number(lv) and _is_number(rv)) or (_is_string(lv) and _is_string(rv)):
            a, b = lv, rv
        elif convert and _is_number(lv) and _is_string(rv):
            a, b = lv, _to_number(str(rv), lv)
        elif convert and _is_string(lv) and _is_number(rv):
            a, b = _to_number(str(lv), rv), rv
        elif type(lv) is type(rv) and not isinstance(lv, bytes):
            a, b = lv, rv
        else:
            return None
        return int((a > b) - (a < b))  # type: ignore[operator]
    except (TypeError, ValueError):
        return None


def _number(v: object, convert: bool) -> int | float:
    if isinstance(v, (int, float)) and type(v) is not bool and _is_number(v):
        return v
    if convert and type(v) is str:
        return float(v) if "." in v else int(v)
    raise TypeError(f"cannot convert {v!r} into a number")


def _divide(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
    return a / b


def _mod(a: float, b: float) -> float:
    return math.nan if b == 0 else math.fmod(a, b)


# ------------------------------------------------------------------------------------------ parser

# What a parsed node is, for the checks Artemis makes while parsing.
BOOLEAN, PROPERTY, CONSTANT, VALUE = "boolean", "property", "constant", "value"
Node = tuple[str, Evaluator, object]  # kind, evaluator, the constant's value (CONSTANT only)


def _constant(value: object) -> Node:
    return (CONSTANT if type(value) is not bool else BOOLEAN + "-constant", lambda _: value, value)


class _Parser:
    def __init__(self, tokens: list[Token], convert: bool) -> None:
        self.tokens = tokens
        self.i = 0
        self.convert = convert

    # -------------------------------------------------------------------------- token helpers

    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.i + offset, len(self.tokens) - 1)]

    def next(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at(self, kind: str, text: str | None = None, offset: int = 0) -> bool:
        k, t, _ = self.peek(offset)
        return k == kind and (text is None or t == text)

    def keyword(self, word: str, offset: int = 0) -> bool:
        return self.at("keyword", word, offset)

    def op(self, text: str) -> bool:
        return self.at("op", text)

    def fail(self, what: str) -> SelectorError:
        kind, text, pos = self.peek()
        found = "the end" if kind == "end" else repr(text)
        return SelectorError(f"{what}: found {found} at position {pos + 1}")

    def take_op(self, text: str) -> None:
        if not self.op(text):
            raise self.fail(f"expected {text!r}")
        self.next()

    def take_keyword(self, word: str) -> None:
        if not self.keyword(word):
            raise self.fail(f"expected {word}")
        self.next()

    def expect_end(self) -> None:
        if not self.at("end"):
            raise self.fail("unexpected text after the expression")

    # ------------------------------------------------------------------------------- checks

    def boolean(self, node: Node) -> Evaluator:
        """Artemis's asBooleanExpression: a boolean expression, or a property taken as one."""
        kind, evaluate, _ = node
        if kind.startswith(BOOLEAN):
            return evaluate
        if kind == PROPERTY:

            def cast(lookup: Lookup) -> object:
                v = evaluate(lookup)
                if v is None:
                    return None
                return v if type(v) is bool else False

            return cast
        raise self.fail("expression will not result in a boolean value")

    def _comparable(self, node: Node) -> None:
        kind, _, value = node
        if kind == CONSTANT and not _is_number(value):
            raise self.fail(f"value {value!r} cannot be compared")
        if kind.startswith(BOOLEAN):
            raise self.fail("a boolean cannot be compared")

    def _equatable(self, node: Node) -> None:
        if node[0] == CONSTANT and node[2] is None:
            raise self.fail("NULL cannot be compared: use IS NULL")

    # ----------------------------------------------------------------------------- grammar

    def expression(self) -> Node:
        left = self.and_expression()
        while self.keyword("OR"):
            self.next()
            parts = [self.boolean(left), self.boolean(self.and_expression())]
            while self.keyword("OR"):
                self.next()
                parts.append(self.boolean(self.and_expression()))
            left = (BOOLEAN, _any(parts), None)
        return left

    def and_expression(self) -> Node:
        left = self.equality()
        if self.keyword("AND"):
            parts = [self.boolean(left)]
            while self.keyword("AND"):
                self.next()
                parts.append(self.boolean(self.equality()))
            left = (BOOLEAN, _all(parts), None)
        return left

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            if self.op("=") or self.op("<>"):
                negate = self.next()[1] == "<>"
                right = self.comparison()
                self._equatable(left)
                self._equatable(right)
                if left[0] == BOOLEAN + "-constant" and right[0] == CONSTANT:
                    raise self.fail("a boolean cannot be compared with a value")
                equal = _equal(left[1], right[1], self.convert)
                left = (BOOLEAN, _not(equal) if negate else equal, None)
            elif self.keyword("IS"):
                self.next()
                negate = self.keyword("NOT")
                if negate:
                    self.next()
                self.take_keyword("NULL")
                is_null = _equal(left[1], lambda _: None, self.convert)
                left = (BOOLEAN, _not(is_null) if negate else is_null, None)
            else:
                return left

    def comparison(self) -> Node:
        left = self.additive()
        while True:
            negate = self.keyword("NOT") and (
                self.keyword("LIKE", 1) or self.keyword("BETWEEN", 1) or self.keyword("IN", 1)
            )
            if negate:
                self.next()
            if not negate and self.at("op") and self.peek()[1] in ("<", "<=", ">", ">="):
                op = self.next()[1]
                right = self.additive()
                self._comparable(left)
                self._comparable(right)
                left = (BOOLEAN, _ordering(op, left[1], right[1], self.convert), None)
            elif self.keyword("LIKE"):
                self.next()
                pattern = self.string_literal()
                escape: str | None = None
                if self.keyword("ESCAPE"):
                    self.next()
                    escape = self.string_literal()
                    if len(escape) != 1:
                        raise self.fail(f"the ESCAPE literal must be one character, not {escape!r}")
                like = _like(left[1], pattern, escape)
                left = (BOOLEAN, _not(like) if negate else like, None)
            elif self.keyword("BETWEEN"):
                self.next()
                low = self.additive()
                self.take_keyword("AND")
                high = self.additive()
                for node in (left, low, high):
                    self._comparable(node)
                value, lo, hi, c = left[1], low[1], high[1], self.convert
                if negate:
                    between = _any([_ordering("<", value, lo, c), _ordering(">", value, hi, c)])
                else:
                    between = _all([_ordering(">=", value, lo, c), _ordering("<=", value, hi, c)])
                left = (BOOLEAN, between, None)
            elif self.keyword("IN"):
                self.next()
                if left[0] != PROPERTY:
                    raise self.fail("IN needs a property on its left")
                self.take_op("(")
                items = {self.string_literal()}
                while self.op(","):
                    self.next()
                    items.add(self.string_literal())
                self.take_op(")")
                left = (BOOLEAN, _in(left[1], frozenset(items), negate), None)
            else:
                if negate:
                    raise self.fail("expected LIKE, BETWEEN or IN after NOT")
                return left

    def additive(self) -> Node:
        left = self.multiplicative()
        while self.op("+") or self.op("-"):
            op = self.next()[1]
            right = self.multiplicative()
            left = (VALUE, _arithmetic(op, left[1], right[1], self.convert), None)
        return left

    def multiplicative(self) -> Node:
        left = self.unary()
        while self.op("*") or self.op("/") or self.op("%"):
            op = self.next()[1]
            right = self.unary()
            left = (VALUE, _arithmetic(op, left[1], right[1], self.convert), None)
        return left

    def unary(self) -> Node:
        if self.op("+"):
            self.next()
            return self.unary()
        if self.op("-"):
            self.next()
            operand = self.unary()
            if operand[0] == CONSTANT and _is_number(operand[2]):
                return _constant(-operand[2])  # type: ignore[operator]
            return (VALUE, _negate(operand[1]), None)
        if self.keyword("NOT"):
            self.next()
            return (BOOLEAN, _not(self.boolean(self.unary())), None)
        if self.keyword("XPATH") or self.keyword("XQUERY"):
            raise Unsupported("XPath and XQuery filters are not supported")
        return self.primary()

    def primary(self) -> Node:
        kind, text, _ = self.peek()
        if kind == "op" and text == "(":
            self.next()
            node = self.expression()
            self.take_op(")")
            return node
        if kind == "string":
            return _constant(self.string_literal())
        if kind in ("decimal", "hex", "octal", "float"):
            self.next()
            if kind == "decimal":
                return _constant(int(text.rstrip("lL")))
            if kind == "hex":
                return _constant(int(text[2:], 16))
            if kind == "octal":
                return _constant(int(text, 8))
            return _constant(float(text))
        if kind == "keyword" and text in ("TRUE", "FALSE"):
            self.next()
            return _constant(text == "TRUE")
        if kind == "keyword" and text == "NULL":
            self.next()
            return _constant(None)
        if kind in ("id", "quoted"):
            self.next()
            name = text if kind == "id" else text[1:-1].replace('""', '"')
            return (PROPERTY, lambda lookup: lookup(name), None)
        raise self.fail("expected a value, a property or '('")

    def string_literal(self) -> str:
        kind, text, _ = self.peek()
        if kind != "string":
            raise self.fail("expected a string literal")
        self.next()
        return text[1:-1].replace("''", "'")


# --------------------------------------------------------------------------------------- evaluators


def _any(parts: list[Evaluator]) -> Evaluator:
    def evaluate(lookup: Lookup) -> object:
        unknown = False
        for part in parts:
            v = part(lookup)
            if v is True:
                return True
            if v is None:
                unknown = True
        return None if unknown else False

    return evaluate


def _all(parts: list[Evaluator]) -> Evaluator:
    def evaluate(lookup: Lookup) -> object:
        unknown = False
        for part in parts:
            v = part(lookup)
            if v is False:
                return False
            if v is None:
                unknown = True
        return None if unknown else True

    return evaluate


def _not(operand: Evaluator) -> Evaluator:
    def evaluate(lookup: Lookup) -> object:
        v = operand(lookup)
        return None if v is None else not v

    return evaluate


def _equal(left: Evaluator, right: Evaluator, convert: bool) -> Evaluator:
    def evaluate(lookup: Lookup) -> object:
        lv, rv = left(lookup), right(lookup)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None:
            return True
        if type(lv) is type(rv) and not isinstance(lv, bytes):
            return lv == rv
        return _compare(lv, rv, convert) == 0

    return evaluate


_ORDER: Final[dict[str, Callable[[int], bool]]] = {
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}


def _ordering(op: str, left: Evaluator, right: Evaluator, convert: bool) -> Evaluator:
    test = _ORDER[op]

    def evaluate(lookup: Lookup) -> object:
        lv = left(lookup)
        if lv is None:
            return None
        rv = right(lookup)
        if rv is None:
            return None
        c = _compare(lv, rv, convert)
        return c is not None and test(c)

    return evaluate


def _like(operand: Evaluator, pattern: str, escape: str | None) -> Evaluator:
    regex, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        escaped = escape is not None and c == escape and i + 1 < len(pattern)
        if escaped and pattern[i + 1] in ("_", "%", escape):
            i += 1
            regex.append(re.escape(pattern[i]))
        elif c == "%":
            regex.append(".*?")
        elif c == "_":
            regex.append(".")
        else:
            regex.append(re.escape(c))
        i += 1
    compiled = re.compile("".join(regex), re.DOTALL)

    def evaluate(lookup: Lookup) -> object:
        v = operand(lookup)
        if v is None:
            return None
        return _is_string(v) and compiled.fullmatch(str(v)) is not None

    return evaluate


def _in(operand: Evaluator, items: frozenset[str], negate: bool) -> Evaluator:
    def evaluate(lookup: Lookup) -> object:
        v = operand(lookup)
        if v is None or not _is_string(v):
            return None
        return (v in items) != negate

    return evaluate


def _negate(operand: Evaluator) -> Evaluator:
    def evaluate(lookup: Lookup) -> object:
        v = operand(lookup)
        return -v if _is_number(v) else None  # type: ignore[operator]

    return evaluate


def _arithmetic(op: str, left: Evaluator, right: Evaluator, convert: bool) -> Evaluator:
    def evaluate(lookup: Lookup) -> object:
        lv = left(lookup)
        if lv is None:
            return None
        rv = right(lookup)
        if rv is None:
            return None
        if op == "+" and _is_string(lv):
            return str(lv) + _java_str(rv)
        a, b = _number(lv, convert), _number(rv, convert)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return _divide(float(a), float(b))
        return _mod(float(a), float(b))

    return evaluate
