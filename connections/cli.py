"""`amqp-mirror connections list|start NAME|stop NAME`: management requests over AMQP."""

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
    from proton import Message
    from proton.utils import BlockingConnection

    kwargs: dict[str, Any] = {"timeout": timeout}
    if user:
        kwargs.update(user=user, password=password, allowed_mechs="PLAIN")
    conn = BlockingConnection(url, **kwargs)
    try:
        replies = conn.create_receiver(None, dynamic=True, credit=1)
        sender = conn.create_sender(address)
        reply_to = replies.link.remote_source.address
        msg = Message(
            body=json.dumps(params),
            reply_to=reply_to,
            id="req-1",
            properties={"_AMQ_ResourceName": resource, "_AMQ_OperationName": operation},
        )
        sender.send(msg)
        reply = replies.receive(timeout=timeout)
        replies.accept()
    finally:
        conn.close()
    body: Any = reply.body
    result = json.loads(body)[0]
    props: dict[str, Any] = reply.properties or {}
    if not props.get("_AMQ_OperationSucceeded"):
        raise RuntimeError(f"{operation} failed: {result}")
    return result


def main(args: Any) -> int:
    try:
        if args.action == "list":
            rows = json.loads(
                request(args.url, "listBrokerConnections", [], user=args.user, password=args.password)
            )
            print(f"{'NAME':20} {'STATE':11} {'CONNECTED':9} URI")
            for r in rows:
                print(f"{r['name']:20} {r['state']:11} {r['connected']!s:9} {r['uri']}")
        else:
            op = "startBrokerConnection" if args.action == "start" else "stopBrokerConnection"
            request(args.url, op, [args.name], user=args.user, password=args.password)
            print(f"{args.action} {args.name}: ok")
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
