"""Artemis's JAAS properties files: ``artemis-users.properties`` and ``artemis-roles.properties``.

The syntax is the basic java.util.Properties one: ``key = value`` or ``key: value`` (or a space),
``#`` and ``!`` comment lines, a trailing backslash continues a line, backslash escapes ``\\ ``,
``\\=``, ``\\:``, ``\\t``, ``\\n`` and ``\\uXXXX``. Passwords written as ``ENC(...)`` are Artemis's
masked forms (security/masked.py): a one-way hash, checked at each login, or a two-way mask, decoded here.

An empty password (``bob =``, or a line ``alice`` with no separator, which java.util.Properties reads
as ``alice`` with the empty string) is reported with a warning: such a user cannot log in here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from broker_core.config.errors import ProblemLog
from broker_core.config.model import User
from broker_core.config.values import split_list
from broker_core.security.masked import MaskError, decode, is_one_way, masked, verify

USERS_FILE = "artemis-users.properties"
ROLES_FILE = "artemis-roles.properties"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)")


@dataclass(frozen=True)
class Property:
    line: int
    key: str
    value: str
    separated: bool = True  # the line had a separator (`=`, `:` or whitespace) after its key


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines; each result keeps the number of its first physical line."""
    result: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip() if pending else raw.strip()
        if pending is None and (not line or line[0] in "#!"):
            continue
        start, sofar = pending or (number, "")
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (start, sofar + line[:-1])
        else:
            pending = None
            result.append((start, sofar + line))
    if pending:
        result.append(pending)
    return result


def _unescape(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if len(code) == 5:
            return chr(int(code[1:], 16))
        return _ESCAPES.get(code, code)

    return _ESCAPE.sub(replace, text)


def _split_key(line: str) -> tuple[str, str, bool]:
    """(key, the rest, whether a separator came after the key)."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t":
            break
        index += 1
    key, rest = line[:index], line[index:].lstrip(" \t")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t")
    return key, rest, index < len(line)


def parse_properties(text: str) -> list[Property]:
    properties = []
    for line_number, line in _logical_lines(text):
        key, value, separated = _split_key(line)
        properties.append(Property(line_number, _unescape(key), _unescape(value).strip(), separated))
    return properties


def _read(path: Path, log: ProblemLog) -> list[Property] | None:
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except OSError as exc:
        log.error(None, "", f"cannot read {path.name}: {exc.strerror}", "a readable properties file")
    except UnicodeDecodeError:
        log.error(None, "", "file is not valid UTF-8", "a UTF-8 (or ASCII) properties file")
    return None


def load_users(path: Path, log: ProblemLog) -> tuple[User, ...]:
    users: dict[str, User] = {}
    for prop in _read(path, log) or []:
        if prop.key in users:
            # java.util.Properties keeps the last value; say so, since it is usually a mistake.
            log.warning(
                prop.line, prop.key, f"duplicate user {prop.key!r}; this later entry wins", "each user once"
            )
        if not prop.separated:
            log.warning(
                prop.line,
                prop.key,
                "no '=': read as a user with an empty password, and an empty password cannot log in",
                f"{prop.key} = <password>",
            )
        elif not prop.value:
            log.warning(
                prop.line,
                prop.key,
                "empty password: an empty password cannot log in",
                f"{prop.key} = <password>",
            )
        password = _password(prop, log)
        if password is not None:
            users[prop.key] = User(name=prop.key, password=password)
    return tuple(users.values())


def _password(prop: Property, log: ProblemLog) -> str | None:
    """A user's password as the store keeps it: plain; a one-way hash as written, `ENC(...)` (checked
    at each login); a two-way mask decoded (Artemis's codec reads both forms in this file)."""
    inner = masked(prop.value)
    if inner is None:
        return prop.value
    try:
        if is_one_way(inner):
            verify(inner, "")  # its form and numbers are checked now, not at the first login
            return prop.value
        return decode(inner)
    except MaskError as exc:
        log.error(
            prop.line,
            prop.key,
            f"ENC(...) password not readable: {exc}",
            "ENC(ITERATIONS:SALT:HASH) as `artemis user add` or `artemis mask --hash` writes, "
            "ENC(<hex>) as `artemis mask` writes (default key), or a plain password",
        )
        return None


def load_roles(path: Path, log: ProblemLog, known_users: set[str]) -> dict[str, frozenset[str]]:
    roles: dict[str, frozenset[str]] = {}
    for prop in _read(path, log) or []:
        members = frozenset(split_list(prop.value))
        for unknown in sorted(members - known_users):
            log.warning(prop.line, prop.key, f"user {unknown!r} is not in {USERS_FILE}", "a defined user")
        roles[prop.key] = roles.get(prop.key, frozenset()) | members
    return roles
