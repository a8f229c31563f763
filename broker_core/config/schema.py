"""Artemis's configuration vocabulary: which elements and attributes its schema has, and where.

It tells a mistake from a gap. A name Artemis's schema does not have, or an element where the schema does
not allow it, is an error (with the closest names as "did you mean ...?"): the broker would otherwise run
without what the operator meant to configure. A name the schema has but this broker does not implement
yet is a warning (an error under `--strict`). The vocabulary is derived from the schema by
`scripts/artemis_schema.py` into `artemis_schema.json`, beside this module.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources

SUGGESTIONS = 3
LISTED = 12  # list the allowed names in the message only when there are at most this many


class Schema:
    def __init__(self, elements: dict[str, dict[str, list[str]]], version: str) -> None:
        self.version = version
        self.children = {name: frozenset(e["children"]) for name, e in elements.items()}
        self.attributes = {name: frozenset(e["attributes"]) for name, e in elements.items()}
        parents: dict[str, set[str]] = {}
        for parent, kids in self.children.items():
            for kid in kids:
                parents.setdefault(kid, set()).add(parent)
        self.parents = {name: sorted(p) for name, p in parents.items()}

    def knows(self, element: str) -> bool:
        return element in self.children

    def allows(self, parent: str, element: str) -> bool:
        return element in self.children.get(parent, frozenset())

    def knows_attribute(self, element: str, attribute: str) -> bool:
        return attribute in self.attributes.get(element, frozenset())

    def unknown_element(self, parent: str | None, element: str) -> tuple[str, str]:
        """(message, expected) for an element name the schema does not have."""
        allowed = sorted(self.children.get(parent, ())) if parent else []
        hint = did_you_mean(element, allowed or list(self.children), "<", ">")
        message = f"unknown element <{element}>{hint}"
        return message, _expected(f"an element Artemis allows in <{parent}>", allowed, "<", ">")

    def misplaced_element(self, parent: str, element: str) -> tuple[str, str]:
        """(message, expected) for a known element where the schema does not allow it."""
        places = " or ".join(f"<{p}>" for p in self.parents.get(element, ())) or "another element"
        return f"<{element}> does not belong in <{parent}>", f"<{element}> inside {places}"

    def unknown_attribute(self, element: str, attribute: str) -> tuple[str, str]:
        allowed = sorted(self.attributes.get(element, ()))
        hint = did_you_mean(attribute, allowed, "", "")
        message = f"unknown attribute {attribute!r}{hint}"
        if not allowed:
            return message, f"no attributes on <{element}>"
        return message, _expected(f"an attribute of <{element}>", allowed, "", "")


def did_you_mean(word: str, candidates: list[str], left: str, right: str) -> str:
    close = difflib.get_close_matches(word, candidates, n=SUGGESTIONS, cutoff=0.75)
    if not close:
        return ""
    return f" (did you mean {' or '.join(f'{left}{c}{right}' for c in close)}?)"


def _expected(what: str, allowed: list[str], left: str, right: str) -> str:
    if allowed and len(allowed) <= LISTED:
        return f"{what}: {', '.join(f'{left}{a}{right}' for a in allowed)}"
    return what


@cache
def artemis() -> Schema:
    document = json.loads(resources.files(__package__).joinpath("artemis_schema.json").read_text("utf-8"))
    return Schema(document["elements"], document["artemis_version"])
