"""How a broker connection gets its mirror: one `MirrorSource` per `<mirror>` element."""

from __future__ import annotations

from typing import TYPE_CHECKING

from connections.policies import LinkPolicy

from .source import MirrorSource

if TYPE_CHECKING:
    from broker_core.config.model import AmqpConnection
    from broker_core.server import Server


def mirror_policies(server: Server, connection: AmqpConnection) -> list[LinkPolicy]:
    return [MirrorSource(server, connection, m) for m in connection.mirrors]
