"""Artemis ``${name}`` / ``${name:default}`` placeholders (Java system properties in Artemis).

We look a name up in the mapping the caller passes (our stand-in for ``-Dname=value``), then in the
environment under its exact name, then under the name upper-cased with ``.`` and ``-`` turned into
``_`` (so ``${amqp.port}`` can come from ``AMQP_PORT``), and last use the default after the first ``:``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_PLACEHOLDER = re.compile(r"\$\{([^}:]*)(?::([^}]*))?\}")


class UnresolvedPlaceholder(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _lookup(name: str, properties: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    if name in properties:
        return properties[name]
    if name in environ:
        return environ[name]
    return environ.get(re.sub(r"[.\-]", "_", name).upper())


def substitute(text: str, properties: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str:
    """Replace every placeholder in `text`; raise `UnresolvedPlaceholder` for the first that has no value."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = _lookup(name, properties, env)
        if value is not None:
            return value
        if default is not None:
            return default
        raise UnresolvedPlaceholder(name)

    return _PLACEHOLDER.sub(replace, text) if "${" in text else text
