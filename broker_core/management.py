"""Management over AMQP request/reply, in Artemis's message format, as a table of operations.

A request is sent to the management address (`activemq.management` by default) with application
properties `_AMQ_ResourceName` (`broker`, `queue.<name>`, `address.<name>`) and `_AMQ_OperationName`
(or `_AMQ_Attribute` to read an attribute), and a JSON array of parameters as an amqp-value string
body. The reply goes to the request's `reply-to`, correlated by its message-id, with
`_AMQ_OperationSucceeded` and the JSON-encoded result wrapped in an array (none for a void operation), as
Artemis answers.

Which operations exist is not known here: each part of the broker adds its rows (the server its queues
and addresses, the broker connections theirs, the mirror its status), as Artemis has one control
object per resource. The composition root builds the table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .amqp import errors
from .amqp.codec import DecodeError
from .errors import BrokerError, NotFound, NotImplementedHere
from .message import MessageView, build_message, section_value
from .services import Answer

if TYPE_CHECKING:
    from .amqp.connection import Link
    from .amqp.performatives import Attach
    from .services import Peer

log = logging.getLogger("broker.management")

RESOURCE = "_AMQ_ResourceName"
OPERATION = "_AMQ_OperationName"
ATTRIBUTE = "_AMQ_Attribute"
SUCCEEDED = "_AMQ_OperationSucceeded"

BROKER = "broker"  # resource kinds: `broker`, and the prefixes of `queue.<name>` and `address.<name>`
QUEUE = "queue"
ADDRESS = "address"

# (the resource's name, e.g. the queue's, or "" for the broker; the request's parameters) -> result
Operation = Callable[[str, list[Any]], Any]
Attribute = Callable[[str], Any]


class Management:
    """The operations and attributes of one server's resources, and the request/reply codec."""

    def __init__(self) -> None:
        self._operations: dict[tuple[str, str], Operation] = {}
        self._attributes: dict[tuple[str, str], Attribute] = {}
        self.requester: str | None = None  # the user of the request being handled, for log lines

    def add_operation(self, kind: str, name: str, operation: Operation) -> None:
        self._operations[(kind, name)] = operation

    def add_attribute(self, kind: str, name: str, attribute: Attribute) -> None:
        self._attributes[(kind, name)] = attribute

    def handle(self, view: MessageView, user: str | None = None) -> tuple[str | None, bytes | None]:
        """Execute one request of `user`; return (reply-to address, reply payload)."""
        props = view.properties()
        reply_to = reply_address(view)
        correlation = props[0] if props else None
        app = view.section_map(0x74)
        resource = str(app.get(RESOURCE, ""))
        self.requester = user
        try:
            params = _params(view)
            if ATTRIBUTE in app:
                result = self.attribute(resource, str(app[ATTRIBUTE]))
            else:
                result = self.invoke(resource, str(app.get(OPERATION, "")), params)
            # as Artemis: compact JSON, and a void operation's reply has no body
            ok, body = True, None if result is None else json_text([result])
        except (BrokerError, KeyError, ValueError, TypeError, IndexError) as exc:
            text = str(exc.description if isinstance(exc, BrokerError) else exc)
            ok, body = False, json_text([text])
            log.info("management request %s on %s failed: %s", app.get(OPERATION), resource, exc)
        finally:
            self.requester = None
        if reply_to is None:
            return None, None
        reply = build_message(body, to=reply_to, correlation_id=correlation,
                              application_properties={SUCCEEDED: ok})  # fmt: skip
        return reply_to, reply

    def invoke(self, resource: str, operation: str, params: list[Any]) -> Any:
        kind, name = _kind(resource)
        found = self._operations.get((kind, operation))
        if found is None:
            raise NotImplementedHere(f"unknown operation {operation!r} on resource {resource!r}")
        return found(name, params)

    def attribute(self, resource: str, name: str) -> Any:
        kind, resource_name = _kind(resource)
        found = self._attributes.get((kind, name))
        if found is None:
            raise NotFound(f"unknown attribute {name!r} on {resource!r}")
        return found(resource_name)


class ManagementService:
    """Management as a service at its address: requests in, replies routed to their `reply-to`.

    `authorize(user)` raises unless the user may manage; `authorize_reply(peer, address)` unless the
    requester may have a reply sent to that address (a request must not be a way to put messages where
    its sender may not send, nor into another client's temporary queue); `send_reply(address, payload)`
    routes a reply."""

    def __init__(
        self,
        management: Management,
        authorize: Callable[[str | None], None],
        authorize_reply: Callable[[Peer, str], None],
        send_reply: Callable[[str, bytes], None],
    ) -> None:
        self.management = management
        self.authorize = authorize
        self.authorize_reply = authorize_reply
        self.send_reply = send_reply

    def attach(self, peer: Peer, link: Link, attach: Attach, address: str) -> Answer:
        self.authorize(peer.user)
        return Answer(None, _Checked(), peer.credit_window)

    def on_delivery(
        self, peer: Peer, link: Link, state: object, delivery_id: int, settled: bool, payload: bytes
    ) -> None:
        session = link.session
        try:
            if not isinstance(state, _Checked):  # a relayed request: its link was never checked
                self.authorize(peer.user)
            view = MessageView(payload)
            view.all_sections()
            reply_to = reply_address(view)
            if reply_to is not None:
                self.authorize_reply(peer, reply_to)  # before anything is done
            reply_to, reply = self.management.handle(view, peer.user)
            if reply_to and reply is not None:
                self.send_reply(reply_to, reply)
        except (DecodeError, IndexError, ValueError) as exc:
            peer.reject(
                session, delivery_id, settled, BrokerError(errors.DECODE_ERROR, f"malformed request: {exc}")
            )
            return
        except BrokerError as exc:
            peer.reject(session, delivery_id, settled, exc)
            return
        if not settled:
            peer.accept_later(session, delivery_id)


class _Checked:
    """The state of a link whose user was authorized at attach."""


def json_text(value: Any) -> str:
    """JSON as Artemis writes it in its answers: compact."""
    return json.dumps(value, separators=(",", ":"))


def reply_address(view: MessageView) -> str | None:
    """The request's `reply-to` (properties field 4)."""
    props = view.properties()
    return props[4] if len(props) > 4 and isinstance(props[4], str) else None


def _kind(resource: str) -> tuple[str, str]:
    if resource == BROKER:
        return BROKER, ""
    kind, _, name = resource.partition(".")
    return kind, name


def _params(view: MessageView) -> list[Any]:
    for code, start, _ in view.all_sections():
        if code == 0x77:
            body = section_value(view.payload, start)
            if isinstance(body, str) and body.strip():
                parsed = json.loads(body)
                return parsed if isinstance(parsed, list) else [parsed]
            return body if isinstance(body, list) else []
    return []
