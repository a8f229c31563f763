"""Console sessions: who is logged in, behind which cookie, until when; each with its CSRF token.

A session id and its CSRF token are 32 random bytes each (`secrets`), held in memory only: a restart logs
everyone out. A session ends after `timeout` seconds without a request, and `MAX_AGE` after its login
whatever happens. A visitor gets a session before logging in (its token protects the login form too);
logging in makes a new one, so an id seen before the login is worth nothing after it. At most
`CAPACITY` sessions are kept: past that the least recently used one goes.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

COOKIE = "amqp_mirror_console"
MAX_AGE = 12 * 3600.0  # seconds from login to the end of a session, however busy
CAPACITY = 1000


@dataclass
class Session:
    id: str
    csrf: str
    user: str | None  # None: not logged in (or security disabled: then `anonymous` is set)
    started: float
    seen: float
    anonymous: bool = False  # logged in as nobody: the broker's security is disabled
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) shown once on the next page

    @property
    def logged_in(self) -> bool:
        return self.user is not None or self.anonymous

    def csrf_matches(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


class Sessions:
    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def new(self, user: str | None = None, anonymous: bool = False) -> Session:
        now = self.clock()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), user, now, now, anonymous)
        self._sessions[session.id] = session
        while len(self._sessions) > CAPACITY:
            self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id, its idle clock restarted; None if unknown or expired."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self.clock()
        if now - session.seen > self.timeout or now - session.started > MAX_AGE:
            del self._sessions[session_id]
            return None
        session.seen = now
        self._sessions.move_to_end(session_id)
        return session

    def end(self, session: Session) -> None:
        self._sessions.pop(session.id, None)

    def __len__(self) -> int:
        return len(self._sessions)


def cookie_header(session: Session, timeout: float, secure: bool) -> tuple[str, str]:
    """The session cookie: never readable by a script, never sent with another site's request, sent
    over TLS only when the console is served with TLS, and forgotten by the browser with the session."""
    attributes = f"Path=/; HttpOnly; SameSite=Strict; Max-Age={int(timeout)}" + ("; Secure" if secure else "")
    return "Set-Cookie", f"{COOKIE}={session.id}; {attributes}"


def cleared_cookie(secure: bool) -> tuple[str, str]:
    return "Set-Cookie", f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0" + (
        "; Secure" if secure else ""
    )
