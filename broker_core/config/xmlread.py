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
from broker_core.config.values import BadValue, parse_bool, parse_enum, parse_float, parse_int, parse_size

T = TypeVar("T")
Element = etree._Element
NOT_IMPLEMENTED = "not implemented yet; ignored"
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
        self.log.warning(line_of(element), self.path(element), NOT_IMPLEMENTED)

    def check_attributes(self, element: Element, allowed: set[str] | frozenset[str]) -> None:
        for name in element.attrib:
            qname = etree.QName(name)
            if qname.namespace is None and qname.localname not in allowed:
                self.log.warning(line_of(element), self.path(element), NOT_IMPLEMENTED, attr=qname.localname)

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
