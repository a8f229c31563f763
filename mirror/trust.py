"""Which origin brokers a mirror link may speak for: a hardening beyond Artemis (pure).

Every replicated message and every postAck names the broker its message was first stored on, its
*origin*: `x-opt-amq-bkr-id` in the event, or, when absent, the link's remote. The *remote* of a link
is the broker id the source announced in its attach (the `x-opt-amq-bkr-id` link property: the only
name a mirror link has on the wire, as in Artemis). Artemis takes any origin an event claims; here, on a
link whose remote is R, at a broker whose own node id is N, an origin O is trusted when:

- O is R: the remote's own messages, and acknowledgements of them;
- O is N, for a postAck only, and R is the remote of one of this broker's own mirrors: a dual mirror,
  where R acknowledges messages it received from us. A *message* whose origin is N never is: a source
  never sends a message back to the broker it came from;
- the acceptor's `mirrorTrustedOrigins` lets R forward O: a chain (DC1 -> DC2 -> DC3: DC2 forwards
  DC1's messages and acknowledgements to DC3 with origin DC1) or a ring. Its value is a comma-separated
  list of `REMOTE:ORIGIN` pairs of broker ids, either side `*` for any; `*:*` is Artemis's behaviour.

Anything else is refused: the target closes the link with `amqp:unauthorized-access` before applying
the event (nothing of it is kept; the source keeps it and sends it again on its next link), and logs it
(`MIR101`), once a minute for the same remote and origin.

A remote is also bound to the way its links come (`RemoteBindings`): the mirror address and the user
of its first link are remembered, persisted, and a later link claiming that remote through another
address or as another user is refused until an operator forgets the binding. A broker id is at most
`MAX_BROKER_ID_BYTES` long: the keys derived from it must stay encodable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping

ANY = "*"
TRUST_PARAMETER = "mirrorTrustedOrigins"  # the acceptor URI parameter
REMOTE_KEY_PREFIX = "mirror.remote."  # meta: the broker id each of our own mirrors goes to, by name
BINDING_KEY_PREFIX = "mirror.binding."  # meta: the address and user each remote's links come through
# A node id is a UUID (36 characters). A broker id names meta records (`mirror.dedup.<id>`, ack retries,
# bindings) and log lines: bounded far below the journal's 65,535-byte keys, and generously above a UUID.
MAX_BROKER_ID_BYTES = 256


def broker_id_too_long(broker_id: str) -> bool:
    return len(broker_id) > MAX_BROKER_ID_BYTES // 4 and len(broker_id.encode()) > MAX_BROKER_ID_BYTES


class OriginTrust:
    """The origins one mirror link may carry events of (see the module's rules)."""

    __slots__ = ("_dual", "_mirrors_to", "forwarded", "node_id", "remote")

    def __init__(
        self,
        remote: str,
        node_id: str,
        pairs: Iterable[tuple[str, str]],
        mirrors_to: Callable[[str], bool],
    ) -> None:
        self.remote = remote
        self.node_id = node_id
        mine = [origin for r, origin in pairs if r in (remote, ANY)]
        # the origins this remote may forward; None: any
        self.forwarded: frozenset[str] | None = None if ANY in mine else frozenset(mine)
        self._mirrors_to = mirrors_to  # whether one of our mirrors goes to a broker id (asked once)
        self._dual = False

    def allows(self, origin: str, acknowledgement: bool) -> bool:
        if origin == self.remote:
            return True
        if origin == self.node_id:
            return acknowledgement and (self._is_dual() or self._forwards(origin))
        return self._forwards(origin)

    def _forwards(self, origin: str) -> bool:
        return self.forwarded is None or origin in self.forwarded

    def _is_dual(self) -> bool:
        if not self._dual:
            self._dual = self._mirrors_to(self.remote)
        return self._dual


class RefusalLog:
    """Says each refusal of the same (remote, origin) once a minute, with how many there were since."""

    __slots__ = ("_said", "clock", "interval")

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._said: dict[tuple[str, str], tuple[float, int]] = {}

    def due(self, remote: str, origin: str) -> int | None:
        """None: stay quiet; else the refusals not said since the last line (0 the first time)."""
        key = (remote, origin)
        now = self.clock()
        said = self._said.get(key)
        if said is not None and now - said[0] < self.interval:
            self._said[key] = (said[0], said[1] + 1)
            return None
        self._said[key] = (now, 0)
        return 0 if said is None else said[1]


class RemoteBindings:
    """The mirror address and user each remote broker's links came through first, persisted as meta.

    A remote's links keep coming the same way (its broker connection's name makes the address, its
    user is configured with it); a link claiming that remote another way is refused (`conflict`), so
    that a user allowed to mirror on one address cannot speak as a broker that mirrors through another.
    An operator who moves a remote (a renamed broker connection, a new user) `forget`s its binding, and
    its next link binds it afresh."""

    __slots__ = ("_set_meta", "bound")

    def __init__(self, meta: Mapping[str, bytes], set_meta: Callable[[str, bytes], None]) -> None:
        self._set_meta = set_meta  # persists a meta record (an empty value deletes it at recovery)
        self.bound: dict[str, tuple[str, str | None]] = {}
        for key, value in meta.items():
            if key.startswith(BINDING_KEY_PREFIX) and value:
                doc = json.loads(value)
                self.bound[key[len(BINDING_KEY_PREFIX) :]] = (str(doc["address"]), doc["user"])

    def conflict(self, remote: str, address: str, user: str | None) -> tuple[str, str | None] | None:
        """The (address, user) `remote` is bound to, when a link through `address` as `user` differs."""
        bound = self.bound.get(remote)
        return bound if bound is not None and bound != (address, user) else None

    def bind(self, remote: str, address: str, user: str | None) -> None:
        if remote in self.bound:
            return
        self.bound[remote] = (address, user)
        self._set_meta(BINDING_KEY_PREFIX + remote, json.dumps({"address": address, "user": user}).encode())

    def forget(self, remote: str) -> bool:
        if self.bound.pop(remote, None) is None:
            return False
        self._set_meta(BINDING_KEY_PREFIX + remote, b"")
        return True

    def status(self) -> dict[str, dict[str, str | None]]:
        return {remote: {"address": a, "user": u} for remote, (a, u) in sorted(self.bound.items())}
