"""`amqp-mirror connections list|start NAME|stop NAME|forget-remote ID`: management requests over AMQP."""

from __future__ import annotations

import json
import sys
from typing import Any


def request(
    url: str,
    operation: str,
    params: list[Any],
    *,
    user: str | None = None,
    password: str | None = None,
    address: str = "activemq.management",
    resource: str = "broker",
    timeout: float = 10,
) -> Any:
    """Send one management request to the broker at `url` and return its decoded result."""
    with Management(url, user=user, password=password, address=address, timeout=timeout) as m:
        return m.call(operation, params, resource=resource)


class Management:
    """One connection for many management requests: opening a connection costs far more than a request
    (about 90 ms of a client's CPU), which matters to a poller sharing the broker's machine."""

    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        address: str = "activemq.management",
        timeout: float = 10,
    ) -> None:
        from connections.failover.client import RedirectAwareConnection as BlockingConnection

        kwargs: dict[str, Any] = {"timeout": timeout}
        if user:
            kwargs.update(user=user, password=password, allowed_mechs="PLAIN")
        self.timeout = timeout
        self.conn = BlockingConnection(url, **kwargs)
        try:
            self.replies = self.conn.create_receiver(None, dynamic=True, credit=1)
            self.sender = self.conn.create_sender(address)
        except BaseException:
            self.conn.close()
            raise
        self.reply_to = self.replies.link.remote_source.address
        self.sent = 0

    def call(self, operation: str, params: list[Any], *, resource: str = "broker") -> Any:
        return self._request(
            {"_AMQ_ResourceName": resource, "_AMQ_OperationName": operation}, params, operation
        )

    def get(self, attribute: str, *, resource: str = "broker") -> Any:
        """An attribute of a resource (`queue.<name>`, `address.<name>`, `broker`)."""
        return self._request({"_AMQ_ResourceName": resource, "_AMQ_Attribute": attribute}, [], attribute)

    def _request(self, properties: dict[str, str], params: list[Any], what: str) -> Any:
        from proton import Message

        self.sent += 1
        msg = Message(
            body=json.dumps(params),
            reply_to=self.reply_to,
            id=f"req-{self.sent}",
            properties=properties,
        )
        self.sender.send(msg)
        reply = self.replies.receive(timeout=self.timeout)
        self.replies.accept()
        body: Any = reply.body
        # Artemis answers a void operation (startBrokerConnection, createAddress, ...) with no body
        result = json.loads(body)[0] if body is not None else None
        props: dict[str, Any] = reply.properties or {}
        if not props.get("_AMQ_OperationSucceeded"):
            raise RuntimeError(f"{what} failed: {result}")
        return result

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Management:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def explain(url: str, exc: BaseException, user: str | None = None) -> str:
    """What went wrong talking to the broker at `url`, in a sentence an operator can act on (the AMQP
    library's own condition follows, for the record)."""
    text = str(exc)
    lowered = text.lower()
    if "permission" in lowered:
        return f"{url}: not allowed: {text}"
    if "authentication failed" in lowered:
        if user:
            why = f"the broker refused user {user!r} (wrong password, or no such user)"
        else:
            why = (
                "the broker requires a login: give --user and --password (a user with the manage permission)"
            )
        return f"{url}: authentication failed: {why}"
    if "connection refused" in lowered:
        return f"{url}: connection refused: is the broker running, and is this its AMQP port?"
    if "protocol header" in lowered or "framing-error" in lowered:
        return f"{url}: the other end does not speak AMQP: is this the broker's AMQP port? ({text})"
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower() or "timed out" in lowered:
        return f"{url}: no answer in time: is this the broker's AMQP port, and is the broker busy? ({text})"
    return f"{url}: {text}"


def main(args: Any) -> int:
    try:
        if args.action == "list":
            rows = json.loads(
                request(args.url, "listBrokerConnections", [], user=args.user, password=args.password)
            )
            print(f"{'NAME':20} {'STATE':11} {'CONNECTED':9} URI")
            for r in rows:
                print(f"{r['name']:20} {r['state']:11} {'yes' if r['connected'] else 'no':9} {r['uri']}")
        elif args.action == "forget-remote":
            forgotten = request(
                args.url, "forgetMirrorRemote", [args.name], user=args.user, password=args.password
            )
            print(f"forget-remote {args.name}: {'forgotten' if forgotten else 'was not bound'}")
        else:
            op = "startBrokerConnection" if args.action == "start" else "stopBrokerConnection"
            request(args.url, op, [args.name], user=args.user, password=args.password)
            print(f"{args.action} {args.name}: ok")
    except Exception as exc:
        print(f"error: {explain(args.url, exc, args.user)}", file=sys.stderr)
        return 1
    return 0
