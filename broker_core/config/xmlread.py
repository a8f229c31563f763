"""Reading broker.xml elements: text and attributes with placeholders, paths, conversions.

Every read goes through `Reader`, so each problem carries the element's line and path and is logged
instead of raised; a value that cannot be read comes back as None and the caller keeps going.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from lxml import etree

from broker_core.config.errors import ProblemLog
from broker_core.config.placeholders import UnresolvedPlaceholder, substitute
from broker_core.config.schema import artemis
from broker_core.config.support import Rule, Support, judged, rule_for
from broker_core.config.values import BadValue, parse_bool, parse_enum, parse_float, parse_int, parse_size

T = TypeVar("T")
Element = etree._Element
ARTEMIS_NAMESPACES = frozenset({"", "urn:activemq", "urn:activemq:core"})
_NAMING_ATTRIBUTES = ("name", "match", "type")


def local_name(element: Element) -> str:
    return etree.QName(element).localname


def line_of(element: Element) -> int | None:
    line: Any = element.sourceline  # lxml-stubs types this oddly
    return line if isinstance(line, int) else None


class Reader:
    def __init__(
        self, log: ProblemLog, properties: Mapping[str, str], environ: Mapping[str, str] | None
    ) -> None:
        self.log = log
        self._properties = properties
        self._environ = environ

    # ------------------------------------------------------------ structure

    def path(self, element: Element) -> str:
        parts = []
        node: Element | None = element
        while node is not None:
            parts.append(self._step(node))
            if local_name(node) == "core":
                break
            node = node.getparent()
        return "/".join(reversed(parts))

    @staticmethod
    def _step(element: Element) -> str:
        name = local_name(element)
        for attribute in _NAMING_ATTRIBUTES:
            value = element.get(attribute)
            if value is not None:
                return f"{name}[@{attribute}={value}]"
        return name

    @staticmethod
    def children(element: Element) -> Iterator[Element]:
        """Child elements only (comments and processing instructions skipped)."""
        return (child for child in element if isinstance(child.tag, str))

    def ignore(self, element: Element) -> None:
        """An element the parser does not read. A name Artemis's schema does not have, or not there, is an
        error ("did you mean"); one it has is judged by the support table (support.py): nothing more
        if it asks for what this broker does, a note if it has no effect here, an error if it is not
        implemented yet. The names inside it are checked either way: a typo in `<scale-down>` is a typo."""
        name, schema = local_name(element), artemis()
        parent_element = element.getparent()
        parent = local_name(parent_element) if parent_element is not None else None
        if (etree.QName(element).namespace or "") not in ARTEMIS_NAMESPACES:
            self.error(
                element,
                "not implemented yet: elements of other namespaces (XInclude, ...) are not read; refused",
                "elements of Artemis's namespaces only",
            )
        elif not schema.knows(name):
            self.error(element, *schema.unknown_element(parent, name))
        elif parent is not None and not schema.allows(parent, name):
            self.error(element, *schema.misplaced_element(parent, name))
        else:
            self.judge(element, rule_for(parent, name), self._value(element))
            self._check_attribute_names(element)
            self._check_names(element)

    def judge(
        self,
        element: Element,
        rule: Rule,
        value: str | None = None,
        *,
        name: str | None = None,
        attr: str | None = None,
    ) -> Support:
        """Say what a name Artemis has does here (`name` for one the element path does not show, such as a
        URI parameter): a note if it has no effect, an error if it is not implemented yet (`value` may be
        one that asks for what this broker does anyway: then nothing)."""
        support = judged(rule, value)
        if support == Support.INERT:
            subject = f"{name} has" if name else "has"
            self.note(element, f"{subject} no effect here: {rule.why}", attr=attr)
        elif support == Support.REFUSED:
            subject = f"{name} is not" if name else "not"
            harmless = " or ".join(rule.harmless)
            expected = rule.instead or "it left out, until it is implemented"
            self.error(
                element,
                f"{subject} implemented yet: {rule.why}; refused",
                f"{harmless}, or left out" if harmless else expected,
                attr,
            )
        return support

    def _value(self, element: Element) -> str | None:
        text = (element.text or "").strip()
        return self.text(element) if text else None

    def _check_names(self, element: Element) -> None:
        """Mistakes inside an element this broker does not read (a typo in `<ha-policy>` is still a typo):
        every element and attribute below it must be one Artemis's schema has, where it has it."""
        schema = artemis()
        for child in self.children(element):
            if (etree.QName(child).namespace or "") not in ARTEMIS_NAMESPACES:
                continue
            name, parent = local_name(child), local_name(element)
            if not schema.knows(name):
                self.error(child, *schema.unknown_element(parent, name))
                continue
            if not schema.allows(parent, name):
                self.error(child, *schema.misplaced_element(parent, name))
                continue
            self._check_attribute_names(child)
            self._check_names(child)

    def _check_attribute_names(self, element: Element) -> None:
        schema, name = artemis(), local_name(element)
        for attribute in element.attrib:
            qname = etree.QName(attribute)
            if qname.namespace is None and not schema.knows_attribute(name, qname.localname):
                self.error(element, *schema.unknown_attribute(name, qname.localname), qname.localname)

    def check_attributes(self, element: Element, allowed: set[str] | frozenset[str]) -> None:
        """Attributes other than `allowed`: unknown to Artemis's schema, an error; known, judged by the
        support table (an attribute no table lists is not implemented yet)."""
        schema, owner = artemis(), local_name(element)
        for name, raw in element.attrib.items():
            qname = etree.QName(name)
            if qname.namespace is not None or qname.localname in allowed:
                continue
            if schema.knows_attribute(owner, qname.localname):
                rule = rule_for(owner, f"@{qname.localname}")
                self.judge(element, rule, raw, attr=qname.localname)
            else:
                self.error(element, *schema.unknown_attribute(owner, qname.localname), qname.localname)

    def check_no_children(self, element: Element) -> None:
        for child in self.children(element):
            self.ignore(child)

    # ------------------------------------------------------------ values

    def _resolve(self, element: Element, raw: str, attr: str | None) -> str | None:
        try:
            return substitute(raw, self._properties, self._environ)
        except UnresolvedPlaceholder as exc:
            self.log.error(
                line_of(element),
                self.path(element),
                f"unresolved placeholder ${{{exc.name}}}",
                f"a property or environment variable {exc.name!r}, or a default: ${{{exc.name}:value}}",
                attr,
            )
            return None

    def text(self, element: Element) -> str | None:
        return self._resolve(element, (element.text or "").strip(), None)

    def attr(self, element: Element, name: str, required: bool = False) -> str | None:
        raw = element.get(name)
        if raw is None:
            if required:
                self.error(element, "missing required attribute", f'a {name}="..." attribute', name)
            return None
        return self._resolve(element, raw, name)

    def convert(
        self, element: Element, raw: str | None, convert: Callable[[str], T], attr: str | None = None
    ) -> T | None:
        if raw is None:
            return None
        try:
            return convert(raw)
        except BadValue as exc:
            self.error(element, exc.message, exc.expected, attr)
            return None

    def error(
        self, element: Element, message: str, expected: str | None = None, attr: str | None = None
    ) -> None:
        self.log.error(line_of(element), self.path(element), message, expected, attr)

    def warning(
        self, element: Element, message: str, expected: str | None = None, attr: str | None = None
    ) -> None:
        self.log.warning(line_of(element), self.path(element), message, expected, attr)

    def note(
        self, element: Element, message: str, expected: str | None = None, attr: str | None = None
    ) -> None:
        self.log.note(line_of(element), self.path(element), message, expected, attr)


def converter_for(annotation: Any, size: bool = False, minimum: int | None = None) -> Callable[[str], Any]:
    """A text -> value converter for a model field's type (bool, int, float, str, Path or an Enum)."""
    base = _strip_optional(annotation)
    if base is bool:
        return parse_bool
    if base is int:
        return partial(_parse_size_min, minimum=minimum) if size else partial(parse_int, minimum=minimum)
    if base is float:
        return parse_float
    if isinstance(base, type) and issubclass(base, Enum):
        return partial(parse_enum, enum_type=base)
    if base is str:
        return str
    if base is Path:
        return _non_empty
    raise TypeError(f"no converter for {annotation!r}")


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        (base,) = [arg for arg in get_args(annotation) if arg is not type(None)]
        return base
    return annotation


def _parse_size_min(text: str, minimum: int | None) -> int:
    value = parse_size(text, allow_unlimited=minimum is None or minimum < 0)
    if minimum is not None and value < minimum:
        raise BadValue(f"size {value} is too small", f"a size of at least {minimum} bytes")
    return value


def _non_empty(text: str) -> str:
    if not text:
        raise BadValue("empty value", "a non-empty value")
    return text
