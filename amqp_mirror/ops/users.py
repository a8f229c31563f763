"""Users over management, as Artemis's `addUser`, `removeUser`, `resetUser`, `listUser`, and
`reloadConfigurationFile`: the broker edits the properties files beside its broker.xml, then reloads.

As `artemis user add` does through Artemis's management: a password is stored as Artemis's one-way hash
`ENC(ITERATIONS:SALT:HASH)` unless the request asks for plain text; the files are rewritten whole through
a temporary file in the same directory (a reader never sees half a file, a crash leaves the old one),
keeping their mode and owner, their comments and the other lines as they were; a new users file is
readable by its owner only. The reload that follows is the one SIGHUP does (ops/reload.py): users and
roles apply to the next login, and its log line says so. No password is ever logged or answered.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core.config.users import ROLES_FILE, USERS_FILE, parse_properties
from broker_core.errors import AlreadyExists, NotFound
from broker_core.management import BROKER, json_text
from broker_core.security.masked import hash_password

from .reload import log_report, reload_broker

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("amqp_mirror.ops")

HASH_ITERATIONS = 1024  # as Artemis's default codec
_SAFE_NAME = re.compile(r"^[^\s=:#!\\]+$")


def install(broker: Broker) -> None:
    """Add the user operations and reloadConfigurationFile to a broker's management table."""
    source = broker.config.source
    op = broker.management.add_operation

    def files() -> UserFiles:
        if source is None:
            raise ValueError(
                "this broker was not started from a broker.xml: there are no users files to edit"
            )
        return UserFiles(source.parent / USERS_FILE, source.parent / ROLES_FILE)

    def who() -> str:
        return broker.management.requester or "<anonymous>"

    def reload() -> None:
        log_report(broker.config.name, reload_broker(broker))

    def add_user(_: str, params: list[Any]) -> None:
        name = _name(params)
        files().add(name, _password(params, 1), _roles(params, 2), plaintext=_plain(params, 3))
        log.info("AMQ951068: user %s added by management (user %s), roles %s", name, who(),
                 ",".join(_roles(params, 2)) or "none")  # fmt: skip
        reload()

    def remove_user(_: str, params: list[Any]) -> None:
        name = _name(params)
        files().remove(name)
        log.info("AMQ951068: user %s removed by management (user %s)", name, who())
        reload()

    def reset_user(_: str, params: list[Any]) -> None:
        name = _name(params)
        password = params[1] if len(params) > 1 and params[1] else None
        roles = _roles(params, 2) if len(params) > 2 and params[2] is not None else None
        files().reset(name, None if password is None else str(password), roles, plaintext=_plain(params, 3))
        changed = [what for what, new in (("password", password), ("roles", roles)) if new is not None]
        log.info("AMQ951068: user %s changed by management (user %s): %s", name, who(),
                 " and ".join(changed) or "nothing")  # fmt: skip
        reload()

    def list_user(_: str, params: list[Any]) -> str:
        wanted = str(params[0]) if params and params[0] else None
        return json_text(files().listing(wanted))

    def reload_configuration(_: str, __: list[Any]) -> None:
        log.info("AMQ951069: reload requested by management (user %s)", who())
        reload()

    op(BROKER, "addUser", add_user)
    op(BROKER, "removeUser", remove_user)
    op(BROKER, "resetUser", reset_user)
    op(BROKER, "listUser", list_user)
    op(BROKER, "reloadConfigurationFile", reload_configuration)


def _name(params: list[Any]) -> str:
    name = str(params[0]) if params and params[0] is not None else ""
    if not _SAFE_NAME.match(name):
        raise ValueError("a user name is one word without '=', ':', '#', '!', '\\' or spaces")
    return name


def _password(params: list[Any], index: int) -> str:
    if len(params) <= index or not params[index]:
        raise ValueError("a user needs a password (an empty password cannot log in)")
    return str(params[index])


def _roles(params: list[Any], index: int) -> list[str]:
    text = str(params[index]) if len(params) > index and params[index] else ""
    roles = [r.strip() for r in text.split(",") if r.strip()]
    for role in roles:
        if not _SAFE_NAME.match(role):
            raise ValueError(f"role {role!r}: one word without '=', ':', '#', '!', '\\' or spaces")
    return roles


def _plain(params: list[Any], index: int) -> bool:
    value = params[index] if len(params) > index else False
    return value.strip().lower() == "true" if isinstance(value, str) else bool(value)


def stored_password(password: str, plaintext: bool) -> str:
    """The users file's value: Artemis's one-way hash in ENC(...), or the plain text when asked."""
    if plaintext:
        return password
    return f"ENC({hash_password(password, secrets.token_bytes(32), HASH_ITERATIONS)})"


class UserFiles:
    """Artemis's `artemis-users.properties` (user = password) and `artemis-roles.properties`
    (role = user,user), edited line by line."""

    def __init__(self, users: Path, roles: Path) -> None:
        self.users = users
        self.roles = roles

    def _user_lines(self) -> dict[str, str]:
        return {p.key: p.value for p in parse_properties(_read(self.users))}

    def _role_members(self) -> dict[str, list[str]]:
        members: dict[str, list[str]] = {}
        for p in parse_properties(_read(self.roles)):
            members.setdefault(p.key, [])
            members[p.key] += [u.strip() for u in p.value.split(",") if u.strip()]
        return members

    def listing(self, name: str | None) -> list[dict[str, Any]]:
        """Artemis's listUser answer: each user (or the one named) with its roles, no password."""
        users = self._user_lines()
        roles = self._role_members()
        names = [name] if name is not None else list(users)
        return [{"username": n, "roles": [r for r, m in roles.items() if n in m]} for n in names]

    def add(self, name: str, password: str, roles: list[str], *, plaintext: bool) -> None:
        if name in self._user_lines():
            raise AlreadyExists(f"AMQ229223: User {name} already exists")
        _append(self.users, f"{name} = {stored_password(password, plaintext)}")
        self._set_roles(name, roles)

    def remove(self, name: str) -> None:
        if name not in self._user_lines():
            raise NotFound(f"AMQ229224: User {name} does not exist")
        _rewrite(self.users, lambda key, line: None if key == name else line)
        self._set_roles(name, [])

    def reset(self, name: str, password: str | None, roles: list[str] | None, *, plaintext: bool) -> None:
        if name not in self._user_lines():
            raise NotFound(f"AMQ229224: User {name} does not exist")
        if password is not None:
            value = f"{name} = {stored_password(password, plaintext)}"
            _rewrite(self.users, lambda key, line: value if key == name else line)
        if roles is not None:
            self._set_roles(name, roles)

    def _set_roles(self, name: str, roles: list[str]) -> None:
        """`name` is in exactly the roles `roles`: added where missing, taken out of the others (a role
        left with no user goes)."""
        members = self._role_members()

        def edit(key: str, line: str) -> str | None:
            now = [u for u in members.get(key, []) if u != name]
            if key in roles:
                now.append(name)
            if now == members.get(key):
                return line
            return f"{key} = {','.join(now)}" if now else None

        missing = [r for r in roles if r not in members]
        if not self.roles.exists() and not missing:
            return
        _rewrite(self.roles, edit, [f"{r} = {name}" for r in missing])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _append(path: Path, line: str) -> None:
    _rewrite(path, lambda _, kept: kept, [line])


def _rewrite(path: Path, edit: Any, added: list[str] | None = None) -> None:
    """Rewrite `path` with each logical property line passed through `edit(key, line)` (None drops it),
    comments and blank lines kept, `added` appended; atomically, keeping the file's mode and owner."""
    out: list[str] = []
    pending: list[str] = []
    for raw in _read(path).splitlines():
        pending.append(raw)
        stripped = raw.strip()
        if len(pending) == 1 and (not stripped or stripped[0] in "#!"):
            out.append(raw)
            pending = []
            continue
        if (len(raw) - len(raw.rstrip("\\"))) % 2 == 1:
            continue  # a continuation: the logical line goes on
        logical = "\n".join(pending)
        pending = []
        props = parse_properties(logical)
        kept = edit(props[0].key, logical) if props else logical
        if kept is not None:
            out.append(kept)
    out.extend(pending)
    out.extend(added or [])
    _replace(path, "".join(f"{line}\n" for line in out))


def _replace(path: Path, text: str) -> None:
    try:
        st: os.stat_result | None = path.stat()
    except FileNotFoundError:
        st = None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        # a new users file holds password hashes: its owner's only; an existing file keeps its mode
        os.chmod(tmp, (st.st_mode & 0o7777) if st is not None else 0o600)
        if st is not None and os.geteuid() == 0:
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
