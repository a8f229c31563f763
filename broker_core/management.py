"""Management over AMQP request/reply, in Artemis's message format.

A request is sent to the management address (`activemq.management` by default) with application
properties `_AMQ_ResourceName` (`broker`, `queue.<name>`, `address.<name>`) and `_AMQ_OperationName`
(or `_AMQ_Attribute` to read an attribute), and a JSON array of parameters as an amqp-value string
body. The reply goes to the request's `reply-to`, correlated by its message-id, with
`_AMQ_OperationSucceeded` and the JSON-encoded result wrapped in an array, as Artemis answers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import BrokerError
from .message import MessageView, build_message
from .queues import QueueStats

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("broker.management")

RESOURCE = "_AMQ_ResourceName"
OPERATION = "_AMQ_OperationName"
ATTRIBUTE = "_AMQ_Attribute"
SUCCEEDED = "_AMQ_OperationSucceeded"


class ManagementError(Exception):
    pass


class Management:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.connections: Any = None  # connections.manager.BrokerConnectionManager, set at start
        self.extensions: dict[str, Callable[..., Any]] = {}  # more broker operations (e.g. the mirror's)

    def handle(self, view: MessageView) -> tuple[str | None, bytes | None]:
        """Execute one request; return (reply-to address, reply payload)."""
        props = view.properties()
        reply_to = props[4] if len(props) > 4 and isinstance(props[4], str) else None
        correlation = props[0] if props else None
        app = view.section_map(0x74)
        resource = str(app.get(RESOURCE, ""))
        try:
            params = self._params(view)
            if ATTRIBUTE in app:
                result = self.attribute(resource, str(app[ATTRIBUTE]))
            else:
                result = self.invoke(resource, str(app.get(OPERATION, "")), params)
            ok, body = True, json.dumps([result])
        except (ManagementError, BrokerError, KeyError, ValueError, TypeError, IndexError) as exc:
            ok, body = False, json.dumps([str(exc)])
            log.info("management request %s on %s failed: %s", app.get(OPERATION), resource, exc)
        if reply_to is None:
            return None, None
        reply = build_message(body, to=reply_to, correlation_id=correlation,
                              application_properties={SUCCEEDED: ok})  # fmt: skip
        return reply_to, reply

    @staticmethod
    def _params(view: MessageView) -> list[Any]:
        for code, start, _ in view.all_sections():
            if code == 0x77:
                from .message import _section_value

                body = _section_value(view.payload, start)
                if isinstance(body, str) and body.strip():
                    parsed = json.loads(body)
                    return parsed if isinstance(parsed, list) else [parsed]
                return body if isinstance(body, list) else []
        return []

    # --------------------------------------------------------------------------------- operations

    def invoke(self, resource: str, operation: str, params: list[Any]) -> Any:
        srv = self.server
        if resource == "broker":
            conns = self.connections
            if operation == "listBrokerConnections":
                return json.dumps(conns.list() if conns else [])
            if operation == "startBrokerConnection":
                conns.start_connection(str(params[0]))
                return None
            if operation == "stopBrokerConnection":
                conns.stop_connection(str(params[0]))
                return None
            if operation == "destroyQueue":
                srv.delete_queue(str(params[0]))
                return None
            if operation == "deleteAddress":
                srv.delete_address(str(params[0]), force=bool(params[1]) if len(params) > 1 else False)
                return None
            if operation == "getQueueNames":
                return sorted(q.name for q in srv.queues.values() if not q.temporary)
            if operation == "getAddressNames":
                return sorted(srv.addresses)
            if operation == "getStatistics":
                return dict(srv.stats)
            if operation == "getNodeID":
                return srv.node_id
            ext = self.extensions.get(operation)
            if ext is not None:
                return ext(*params)
        if resource.startswith("queue."):
            q = srv.queues.get(resource[6:])
            if q is None:
                raise ManagementError(f"queue {resource[6:]} does not exist")
            if operation == "getStatistics":
                return QueueStats.of(q)
        raise ManagementError(f"unknown operation {operation!r} on resource {resource!r}")

    def attribute(self, resource: str, name: str) -> Any:
        if resource.startswith("queue."):
            q = self.server.queues.get(resource[6:])
            if q is None:
                raise ManagementError(f"queue {resource[6:]} does not exist")
            stats = QueueStats.of(q)
            key = {
                "messageCount": "message-count",
                "deliveringCount": "delivering-count",
                "messagesAdded": "messages-added",
                "messagesAcknowledged": "messages-acknowledged",
                "messagesExpired": "messages-expired",
                "messagesKilled": "messages-killed",
                "consumerCount": "consumer-count",
                "address": "address",
                "durable": "durable",
            }.get(name)
            if key is None:
                raise ManagementError(f"unknown queue attribute {name!r}")
            return stats[key]
        if resource == "broker" and name == "nodeID":
            return self.server.node_id
        raise ManagementError(f"unknown attribute {name!r} on {resource!r}")
