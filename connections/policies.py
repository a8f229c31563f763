"""The one small interface every link kind of a broker connection implements, and the shared parts.

A broker connection owns one AMQP connection with one session. Each `<sender>`, `<receiver>`,
`<peer>` and `<mirror>` element becomes a `LinkPolicy`; the connection tells each policy when it starts
(`install`), when the session is up (`attach_all`), when a local queue appears (`local_queue_added`),
and when the connection is gone (`detached_all`). A policy sees its connection only as a `LinkHost`,
and reports link problems by raising `ConnectError` (connect phase: counts as a failed attempt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker_core.amqp.connection import Connection, Link
    from broker_core.amqp.performatives import Attach
    from broker_core.queues import Queue


class ConnectError(Exception):
    """A connect-phase failure (refused link, missing capability, ...): retried, counted."""


class LoginRefused(ConnectError):
    """The remote refused our login (a wrong user or password): retried like any connect failure, but
    said as a WARNING, since retrying will not help until someone fixes the configuration."""


class LinkHost(Protocol):
    """What a link policy sees of its broker connection."""

    def attach(self, attach: Attach, role: LinkRole) -> Link:
        """Send `attach` on the connection's session; the link's context is `role`."""
        ...

    @property
    def conn(self) -> Connection | None:
        """The AMQP connection as it is now (None while there is none); a link of a connection lost
        since belongs to another object."""

    def mark_dirty(self) -> None:
        """Output is pending: write it at the end of this loop turn."""

    def write_out(self) -> None:
        """Write the pending output now."""


class LinkPolicy(Protocol):
    def install(self) -> None:
        """The broker connection starts (connected or not): begin whatever must not wait for the remote."""

    def attach_all(self, conn: LinkHost) -> None:
        """The session is open: attach every link this policy wants now."""

    def local_queue_added(self, conn: LinkHost, queue: Queue) -> None:
        """A local queue was created while connected: attach for it if it matches."""

    def remote_attached(self, conn: LinkHost, link: Link) -> None:
        """The remote answered one of our attaches; raise ConnectError to refuse the answer."""

    def on_delivery(
        self, conn: LinkHost, link: Link, delivery_id: int, settled: bool, payload: bytes
    ) -> None: ...

    def on_outcome(self, conn: LinkHost, link: Link, context: Any, state: Any) -> None:
        """The remote settled a delivery we sent (context is what we passed to send_delivery)."""

    def outcomes_done(self, conn: LinkHost) -> None:
        """Every outcome of one disposition has been passed to `on_outcome`: finish what was batched."""

    def on_flow(self, conn: LinkHost, link: Link) -> None: ...

    def detached_all(self, conn: LinkHost) -> None:
        """The connection is gone: give back whatever was in flight."""

    def pending(self) -> int:
        """Links attached by this policy whose answer has not arrived yet."""
        ...


@dataclass(slots=True)
class LinkRole:
    """What one of our links is for: its policy, the local queue it serves, and its state."""

    policy: LinkPolicy
    queue: Queue | None = None
    state: Any = None
    refused: bool = False
