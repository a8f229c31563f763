"""`amqp-mirror queue|browse|produce|consume|user`: an operator's commands, in the habits of Artemis's
`artemis queue stat|create|delete|purge`, `artemis browser|producer|consumer`, `artemis user` and
`rabbitmqadmin`.

Queues, browsing and users go through the broker's AMQP management (Artemis's operations, so they work
against an Artemis broker too); `produce` and `consume` are plain AMQP links. Each command prints a table
or a sentence, or with `--json` one JSON document (`produce`/`consume`: one line a message, then a summary)
for scripts. A failure is one line on stderr and exit 1; no password is ever printed.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

FAILED = 1
USAGE_ERROR = 2
LIST_PAGE = 500  # listQueues rows asked for at a time


def add_commands(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Add the subcommands to the `amqp-mirror` parser (`command(name, summary)` makes one)."""
    p = command("queue", "list, show, create, delete, purge or move a running broker's queues (management)")
    qsub = p.add_subparsers(dest="queue_command", required=True, metavar="ACTION")

    def action(name: str, summary: str) -> argparse.ArgumentParser:
        a = qsub.add_parser(name, help=summary, description=summary, formatter_class=p.formatter_class)
        _connection_args(a)
        return a

    a = action("list", "every queue: address, routing type, messages, consumers")
    a.add_argument(
        "--internal", action="store_true", help="show the broker's internal and temporary queues too"
    )
    a.set_defaults(func=queue_list)
    a = action("stat", "the counters of the queues (all, or those whose name contains NAME)")
    a.add_argument("name", nargs="?", help="show only queues whose name contains this")
    a.set_defaults(func=queue_stat)
    a = action("create", "create a queue (and its address if missing)")
    a.add_argument("name", help="the queue's name")
    a.add_argument("--address", help="its address (default: the queue's name)")
    kind = a.add_mutually_exclusive_group()
    kind.add_argument(
        "--anycast",
        dest="routing_type",
        action="store_const",
        const="ANYCAST",
        help="one consumer gets each message (the default)",
    )
    kind.add_argument(
        "--multicast",
        dest="routing_type",
        action="store_const",
        const="MULTICAST",
        help="a subscription: every multicast queue of the address gets each message",
    )
    a.add_argument(
        "--no-durable", dest="durable", action="store_false", help="a queue that does not survive a restart"
    )
    a.add_argument("--max-consumers", type=int, default=-1, help="consumers at once (-1: any number)")
    a.set_defaults(func=queue_create, routing_type="ANYCAST")
    a = action("delete", "delete a queue and its messages")
    a.add_argument("name", help="the queue's name")
    a.add_argument("--remove-consumers", action="store_true", help="close its consumers (refused otherwise)")
    a.add_argument(
        "--auto-delete-address", action="store_true", help="delete its address too if it has no other queue"
    )
    a.set_defaults(func=queue_delete)
    a = action("purge", "remove every message waiting in a queue (not those being delivered)")
    a.add_argument("name", help="the queue's name")
    a.set_defaults(func=queue_purge)
    a = action("move", "move the messages waiting in a queue to another queue")
    a.add_argument("name", help="the queue to move from")
    a.add_argument("--to", required=True, metavar="QUEUE", help="the queue to move them to")
    a.add_argument("--count", type=int, default=-1, help="move at most this many (-1: all)")
    a.set_defaults(func=queue_move)

    p = command("browse", "show the messages waiting in a queue without consuming them (management)")
    _connection_args(p)
    p.add_argument("queue", help="the queue to browse")
    p.add_argument("--count", type=int, default=20, help="messages to show, oldest first")
    p.add_argument("--page", type=int, default=1, help="which page of COUNT messages")
    p.set_defaults(func=browse)

    p = command("produce", "send messages to an address (AMQP), and say how many were accepted")
    _connection_args(p)
    p.add_argument("address", help="where to send (ADDRESS or ADDRESS::QUEUE)")
    p.add_argument("--count", type=int, default=1, help="messages to send")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", help="each message's body, as text")
    body.add_argument("--file", metavar="PATH", help="each message's body: this file's bytes ('-': stdin)")
    body.add_argument("--size", type=int, help="each message's body: this many bytes of text")
    p.add_argument("--rate", type=float, help="messages a second at most (default: as fast as accepted)")
    p.add_argument("--no-durable", dest="durable", action="store_false", help="non-durable messages")
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an application property (repeatable; a number or true/false is typed as such)",
    )
    p.add_argument("--anycast", action="store_true", help="ask for an anycast queue (the 'queue' capability)")
    p.set_defaults(func=produce)

    p = command("consume", "receive and acknowledge messages from a queue (AMQP)")
    _connection_args(p)
    p.add_argument("queue", help="where to receive from (QUEUE, ADDRESS or ADDRESS::QUEUE)")
    p.add_argument("--count", type=int, default=1, help="messages to receive, then stop (0: until idle)")
    p.add_argument("--timeout", type=float, default=5.0, help="stop after this many seconds with nothing new")
    p.add_argument("--quiet", action="store_true", help="print only the summary, not each message")
    p.set_defaults(func=consume)

    p = command("user", "add, list, remove users or change a password, in the users files beside broker.xml")
    usub = p.add_subparsers(dest="user_command", required=True, metavar="ACTION")

    def user_action(name: str, summary: str) -> argparse.ArgumentParser:
        a = usub.add_parser(name, help=summary, description=summary, formatter_class=p.formatter_class)
        _connection_args(a)
        return a

    a = user_action("list", "every user and its roles (no password)")
    a.add_argument("name", nargs="?", help="only this user")
    a.set_defaults(func=user_list)
    for name, summary in (
        ("add", "add a user with its roles"),
        ("passwd", "set a user's password (and roles)"),
    ):
        a = user_action(name, summary)
        a.add_argument("name", help="the user")
        a.add_argument("--role", action="append", default=[], help="a role (repeatable, or comma-separated)")
        a.add_argument(
            "--new-password-file",
            metavar="PATH",
            help="read the new password from this file's first line ('-': stdin); without it, "
            "it is asked for twice on the terminal",
        )
        a.add_argument(
            "--plaintext",
            action="store_true",
            help="store the password as written, not as Artemis's one-way hash",
        )
        a.set_defaults(func=user_add if name == "add" else user_passwd)
    a = user_action("remove", "remove a user from the users file and from every role")
    a.add_argument("name", help="the user")
    a.set_defaults(func=user_remove)


def _connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="amqp://127.0.0.1:5672", help="the broker's AMQP URL")
    p.add_argument("--user", help="a user with the manage permission (produce/consume: send/consume)")
    p.add_argument("--password", help="that user's password")
    p.add_argument("--json", action="store_true", help="JSON out, for scripts")


def _management(args: argparse.Namespace) -> Any:
    from connections.cli import Management

    return Management(args.url, user=args.user, password=args.password)


def _run(args: argparse.Namespace, body: Callable[[], int]) -> int:
    from connections.cli import explain

    try:
        return body()
    except KeyboardInterrupt:
        return FAILED
    except Exception as exc:
        text = str(exc)
        for prefix in ("Exception: ", "RuntimeError: "):
            text = text.removeprefix(prefix)
        print(
            f"error: {explain(args.url, exc, args.user) if 'failed:' not in text else text}", file=sys.stderr
        )
        return FAILED


def _out(args: argparse.Namespace, document: Any, text: str) -> None:
    print(json.dumps(document, sort_keys=True) if args.json else text)


# ------------------------------------------------------------------------------------------ queues


def all_queues(m: Any) -> list[dict[str, str]]:
    """Every queue, as listQueues rows (all pages)."""
    rows: list[dict[str, str]] = []
    page = 1
    while True:
        answer = json.loads(m.call("listQueues", ["", page, LIST_PAGE]))
        rows += answer["data"]
        if len(rows) >= int(answer["count"]) or not answer["data"]:
            return rows
        page += 1


def _cell(value: Any) -> str:
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    widths = [max([len(title)] + [len(_cell(r[key])) for r in rows]) for key, title in columns]
    lines = ["  ".join(title.ljust(w) for (_, title), w in zip(columns, widths, strict=True)).rstrip()]
    for r in rows:
        lines.append(
            "  ".join(_cell(r[key]).ljust(w) for (key, _), w in zip(columns, widths, strict=True)).rstrip()
        )
    return "\n".join(lines)


def _visible(rows: list[dict[str, str]], internal: bool) -> list[dict[str, str]]:
    if internal:
        return rows
    return [r for r in rows if r.get("temporary") != "true" and r.get("internalQueue") != "true"]


def queue_list(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            rows = sorted(_visible(all_queues(m), args.internal), key=lambda r: r["name"])
        shown = [
            {
                "name": r["name"],
                "address": r["address"],
                "routingType": r["routingType"],
                "durable": r["durable"] == "true",
                "messageCount": int(r["messageCount"]),
                "consumerCount": int(r["consumerCount"]),
                "paused": r.get("paused") == "true",
            }
            for r in rows
        ]
        columns = [
            ("name", "NAME"),
            ("address", "ADDRESS"),
            ("routingType", "ROUTING"),
            ("durable", "DURABLE"),
            ("messageCount", "MESSAGES"),
            ("consumerCount", "CONSUMERS"),
            ("paused", "PAUSED"),
        ]
        _out(args, shown, _table(shown, columns))
        return 0

    return _run(args, body)


STAT_COLUMNS = [  # as `artemis queue stat` shows them
    ("name", "NAME"),
    ("address", "ADDRESS"),
    ("consumerCount", "CONSUMER_COUNT"),
    ("messageCount", "MESSAGE_COUNT"),
    ("messagesAdded", "MESSAGES_ADDED"),
    ("deliveringCount", "DELIVERING_COUNT"),
    ("messagesAcked", "MESSAGES_ACKED"),
    ("scheduledCount", "SCHEDULED_COUNT"),
    ("routingType", "ROUTING_TYPE"),
]


def queue_stat(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            rows = _visible(all_queues(m), False)
        if args.name:
            rows = [r for r in rows if args.name in r["name"]]
        rows.sort(key=lambda r: r["name"])
        stats = [
            {k: (r[k] if k in ("name", "address", "routingType") else int(r[k])) for k, _ in STAT_COLUMNS}
            for r in rows
        ]
        _out(args, stats, _table(stats, STAT_COLUMNS))
        return 0

    return _run(args, body)


def queue_create(args: argparse.Namespace) -> int:
    def body() -> int:
        config = {
            "name": args.name,
            "address": args.address or args.name,
            "routing-type": args.routing_type,
            "durable": args.durable,
            "max-consumers": args.max_consumers,
        }
        with _management(args) as m:
            made = json.loads(m.call("createQueue", [json.dumps(config)]))
        _out(
            args,
            made,
            f"queue {made['name']} created on address {made['address']} ({made['routing-type']}"
            f"{', durable' if made['durable'] else ''})",
        )
        return 0

    return _run(args, body)


def queue_delete(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            m.call("destroyQueue", [args.name, args.remove_consumers, args.auto_delete_address])
        _out(args, {"deleted": args.name}, f"queue {args.name} deleted")
        return 0

    return _run(args, body)


def queue_purge(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            removed = int(m.call("removeAllMessages", [], resource=f"queue.{args.name}"))
        _out(args, {"queue": args.name, "removed": removed}, f"queue {args.name}: {removed} messages removed")
        return 0

    return _run(args, body)


def queue_move(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            moved = int(
                m.call("moveMessages", [500, "", args.to, False, args.count], resource=f"queue.{args.name}")
            )
        _out(
            args,
            {"queue": args.name, "to": args.to, "moved": moved},
            f"queue {args.name}: {moved} messages moved to {args.to}",
        )
        return 0

    return _run(args, body)


# ----------------------------------------------------------------------------------------- browse

JAVA_SERIALIZED = "javax.management.openmbean.CompositeData"


def browse(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            resource = f"queue.{args.queue}"
            total = int(m.get("messageCount", resource=resource))
            items = m.call("browse", [args.page, args.count], resource=resource)
            if isinstance(items, dict) and JAVA_SERIALIZED in items:
                # Artemis answers browse with Java-serialized objects: its JSON listing has no bodies
                start = (args.page - 1) * args.count
                listed = json.loads(m.call("listMessagesAsJSON", [""], resource=resource))
                items = [_from_listing(e) for e in listed[start : start + args.count]]
        if args.json:
            print(json.dumps({"queue": args.queue, "messageCount": total, "messages": items}, sort_keys=True))
            return 0
        for item in items:
            print(_browse_line(item))
        page = f" (page {args.page})" if args.page > 1 else ""
        print(f"{len(items)} of {total} messages in {args.queue} shown{page}")
        return 0

    return _run(args, body)


def _from_listing(entry: dict[str, Any]) -> dict[str, Any]:
    fixed = {
        "durable",
        "_AMQ_AD",
        "address",
        "messageID",
        "expiration",
        "priority",
        "timestamp",
        "userID",
        "subject",
        "correlationId",
        "replyTo",
    }
    return {
        "messageID": str(entry.get("messageID")),
        "address": entry.get("address"),
        "durable": entry.get("durable"),
        "priority": entry.get("priority"),
        "text": None,
        "StringProperties": {f"applicationProperties.{k}": v for k, v in entry.items() if k not in fixed},
    }


def _browse_line(item: dict[str, Any]) -> str:
    props: dict[str, Any] = {}
    for group, values in item.items():
        if group.endswith("Properties") and isinstance(values, dict):
            props.update({k.removeprefix("applicationProperties."): v for k, v in values.items()})
    text = item.get("text")
    shown = "(body not available)" if text is None else json.dumps(text)
    extras = " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(props.items()))
    return f"message {item['messageID']}: {'durable' if item.get('durable') else 'non-durable'} {shown}" + (
        f" {extras}" if extras else ""
    )


# ---------------------------------------------------------------------------------- produce/consume


def _typed(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _bodies(args: argparse.Namespace) -> Iterator[Any]:
    if args.file:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        while True:
            yield data
    text = args.body if args.body is not None else ("x" * args.size if args.size is not None else None)
    n = 0
    while True:
        n += 1
        yield text if text is not None else f"message {n}"


def produce(args: argparse.Namespace) -> int:
    from proton import Message

    if (
        args.count < 1
        or (args.rate is not None and args.rate <= 0)
        or (args.size is not None and args.size < 0)
    ):
        print("amqp-mirror produce: --count, --rate and --size need numbers above 0", file=sys.stderr)
        return USAGE_ERROR
    if any("=" not in p for p in args.property):
        print("amqp-mirror produce: --property needs KEY=VALUE", file=sys.stderr)
        return USAGE_ERROR
    properties = {k: _typed(v) for k, _, v in (p.partition("=") for p in args.property)}

    def body() -> int:
        sent = 0
        started = time.monotonic()
        with _connect(args) as conn:
            options = _anycast() if args.anycast else None
            sender = conn.create_sender(args.address, options=options)
            for payload in _bodies(args):
                if sent >= args.count:
                    break
                if args.rate:
                    delay = started + sent / args.rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                sender.send(Message(body=payload, durable=args.durable, properties=properties or None))
                sent += 1
        elapsed = time.monotonic() - started
        summary = {
            "address": args.address,
            "sent": sent,
            "seconds": round(elapsed, 3),
            "rate": round(sent / elapsed, 1) if elapsed > 0 else None,
        }
        _out(args, summary, f"{sent} messages sent to {args.address} and accepted in {elapsed:.2f} s")
        return 0

    return _run(args, body)


def consume(args: argparse.Namespace) -> int:
    from proton import Timeout

    if args.count < 0 or args.timeout <= 0:
        print("amqp-mirror consume: --count needs 0 or more, --timeout a number above 0", file=sys.stderr)
        return USAGE_ERROR

    def body() -> int:
        got = 0
        started = time.monotonic()
        with _connect(args) as conn:
            receiver = conn.create_receiver(args.queue, credit=min(args.count or 100, 100))
            while not args.count or got < args.count:
                try:
                    msg = receiver.receive(timeout=args.timeout)
                except Timeout:
                    break
                receiver.accept()
                got += 1
                if not args.quiet:
                    print(_message_line(args, msg), flush=True)
        elapsed = time.monotonic() - started
        summary = {"queue": args.queue, "received": got, "seconds": round(elapsed, 3)}
        _out(args, summary, f"{got} messages received from {args.queue} and acknowledged")
        return 0 if got or not args.count else FAILED

    return _run(args, body)


def _message_line(args: argparse.Namespace, msg: Any) -> str:
    from broker_core.message_json import jsonable

    body = msg.body.tobytes() if hasattr(msg.body, "tobytes") else msg.body
    record = {
        "body": jsonable(body),
        "durable": bool(msg.durable),
        "properties": jsonable(dict(msg.properties or {})),
    }
    if args.json:
        return json.dumps(record, sort_keys=True)
    props = " ".join(f"{k}={json.dumps(v)}" for k, v in record["properties"].items())
    return f"{json.dumps(record['body'])}" + (f" {props}" if props else "")


def _connect(args: argparse.Namespace) -> Any:
    from connections.failover.client import RedirectAwareConnection

    kwargs: dict[str, Any] = {"timeout": 30}
    if args.user:
        kwargs.update(user=args.user, password=args.password, allowed_mechs="PLAIN")

    class Closing:
        def __enter__(self) -> Any:
            self.conn = RedirectAwareConnection(args.url, **kwargs)
            return self.conn

        def __exit__(self, *_: object) -> None:
            self.conn.close()

    return Closing()


def _anycast() -> Any:
    from proton import Data, symbol
    from proton.reactor import LinkOption

    class QueueCapability(LinkOption):
        def apply(self, link: Any) -> None:
            data = link.target.capabilities
            data.put_array(False, Data.SYMBOL)
            data.enter()
            data.put_symbol(symbol("queue"))
            data.exit()

    return QueueCapability()


# ------------------------------------------------------------------------------------------- users


def _roles(args: argparse.Namespace) -> str:
    return ",".join(r.strip() for text in args.role for r in text.split(",") if r.strip())


def new_password(args: argparse.Namespace) -> str:
    """The new user's password: from a file or stdin, or asked twice on the terminal; never an option,
    which would put it in the shell's history and the process list."""
    if args.new_password_file:
        source = (
            sys.stdin.readline()
            if args.new_password_file == "-"
            else Path(args.new_password_file).read_text()
        )
        password = source.splitlines()[0] if source.strip() else ""
    elif sys.stdin.isatty():
        password = getpass.getpass(f"new password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise ValueError("the two passwords differ")
    else:
        raise ValueError(
            "no terminal to ask for the password: give --new-password-file PATH (or - for stdin)"
        )
    if not password:
        raise ValueError("an empty password cannot log in")
    return password


def user_list(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            users = json.loads(m.call("listUser", [args.name or ""]))
        rows = [{"username": u["username"], "roles": ",".join(u["roles"])} for u in users]
        _out(args, users, _table(rows, [("username", "USER"), ("roles", "ROLES")]))
        return 0

    return _run(args, body)


def user_add(args: argparse.Namespace) -> int:
    def body() -> int:
        password = new_password(args)
        with _management(args) as m:
            m.call("addUser", [args.name, password, _roles(args), args.plaintext])
        _out(
            args,
            {"added": args.name, "roles": _roles(args).split(",") if _roles(args) else []},
            f"user {args.name} added ({_roles(args) or 'no role'}); the broker reloaded its users",
        )
        return 0

    return _run(args, body)


def user_passwd(args: argparse.Namespace) -> int:
    def body() -> int:
        password = new_password(args)
        with _management(args) as m:
            m.call("resetUser", [args.name, password, _roles(args) or None, args.plaintext])
        _out(
            args, {"changed": args.name}, f"user {args.name}: password changed; the broker reloaded its users"
        )
        return 0

    return _run(args, body)


def user_remove(args: argparse.Namespace) -> int:
    def body() -> int:
        with _management(args) as m:
            m.call("removeUser", [args.name])
        _out(args, {"removed": args.name}, f"user {args.name} removed; the broker reloaded its users")
        return 0

    return _run(args, body)
