"""`amqp-mirror status`: one look at a running broker, over its management address.

The broker answers one request, `getBrokerStatus` (ours: Artemis spreads the same over many controls),
with its server, HA role and sync state, acceptors, queues, broker connections and mirrors; the
command prints it as tables (`--json` for scripts, `--watch` to refresh). A passive HA server answers
with where the active one is.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

from broker_core.management import BROKER

if TYPE_CHECKING:
    import argparse

    from ..broker import Broker

QUEUES_SHOWN = 200  # the deepest first; the total is given too


def install(broker: Broker) -> None:
    """Add `getBrokerStatus` to a broker's management table."""
    started = time.time()
    broker.management.add_operation(BROKER, "getBrokerStatus", lambda _, __: broker_status(broker, started))


def broker_status(broker: Broker, started: float) -> dict[str, Any]:
    from .metrics import _version

    server = broker.server
    ha = broker.ha.status() if broker.ha is not None else {"policy": "primary-only", "role": "primary"}
    queues = sorted((q for q in server.queues.values() if not q.temporary), key=lambda q: (-q.depth, q.name))
    open_by: dict[str, int] = {}
    for sock in list(broker.listener.sockets) if broker.listener is not None else ():
        open_by[sock.acceptor.name] = open_by.get(sock.acceptor.name, 0) + 1
    return {
        "server": {
            "name": server.name,
            "nodeId": server.node_id,
            "version": _version(),
            "uptimeSeconds": round(time.time() - started, 1),
            "active": server.started,
        },
        "ha": {**ha, "replicaSync": _replica_sync(broker)},
        "acceptors": [
            {"name": name, "address": f"{host}:{port}", "connections": open_by.get(name, 0)}
            for name, (host, port) in (broker.listener.bound.items() if broker.listener is not None else ())
        ],
        "queues": [
            {
                "name": q.name,
                "address": q.address,
                "messages": q.depth,
                "consumers": len(q.consumers),
                "internal": q.internal,
            }
            for q in queues[:QUEUES_SHOWN]
        ],
        "queuesTotal": len(queues),
        "unrouted": {
            "total": server.stats.messages_unrouted,
            "addresses": [
                {"name": a.name, "messages": a.unrouted, "routingTypes": sorted(a.routing_types)}
                for a in sorted(server.addresses.values(), key=lambda a: (-a.unrouted, a.name))[:QUEUES_SHOWN]
                if a.unrouted
            ],
        },
        "connections": broker.connections.list() if broker.connections is not None else [],
        "mirrors": broker.mirror_status(),
    }


def _replica_sync(broker: Broker) -> bool:
    try:
        return bool(broker.management.invoke(BROKER, "isReplicaSync", []))
    except Exception:
        return False


# ------------------------------------------------------------------------------------ the command


def main(args: argparse.Namespace) -> int:
    from connections.cli import explain, request
    from connections.failover.client import Redirected

    while True:
        try:
            status = request(args.url, "getBrokerStatus", [], user=args.user, password=args.password)
        except Redirected as exc:
            where = f"{exc.where[0]}:{exc.where[1]}" if exc.where else "unknown"
            status = {"passive": True, "active": where}
        except Exception as exc:
            print(f"error: {explain(args.url, exc, args.user)}", file=sys.stderr)
            if not args.watch:
                return 1
            status = None
        if status is not None:
            text = json.dumps(status, sort_keys=True) if args.json else render(status, args.url)
            if args.watch and not args.json and sys.stdout.isatty():
                print("\033[H\033[2J", end="")  # clear the screen, as watch(1) does (not into a pipe)
            print(text, flush=True)
        if not args.watch:
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def render(status: dict[str, Any], url: str) -> str:
    if status.get("passive"):
        active = status["active"]
        return f"{url}: passive (an HA backup, or a primary waiting for its lock); active: {active}"
    out: list[str] = []
    s, ha = status["server"], status["ha"]
    out.append(
        f"server {s['name']}  node {s['nodeId']}  version {s['version']}  up {_duration(s['uptimeSeconds'])}"
    )
    out.append(
        f"HA     policy {ha.get('policy')}  role {ha.get('role')}  state {ha.get('state', 'active')}"
        f"  replica in sync {'yes' if ha.get('replicaSync') else 'no'}"
        + (f"  partner {ha['partner']}" if ha.get("partner") else "")
    )
    for backup in ha.get("colocatedBackups") or ():  # <colocated>: the backups this process runs
        out.append(
            f"       colocated backup {backup['name']}  role {backup['role']}  state {backup['state']}"
            f"  backs up {backup['backsUp']} at {backup['primaryAt']}"
        )
    out += [
        "",
        *_table(
            ["ACCEPTOR", "LISTENING ON", "CONNECTIONS"],
            [[a["name"], a["address"], a["connections"]] for a in status["acceptors"]],
        ),
    ]
    rows = [
        [c["name"], c["state"], c.get("remote", ""), c["retries"], _when(c.get("lastConnectedAt", 0))]
        for c in status["connections"]
    ]
    out += ["", *_table(["BROKER CONNECTION", "STATE", "REMOTE", "RETRIES", "LAST CONNECTED"], rows)]
    rows = [
        [
            m["name"],
            "up" if m["connected"] else "DOWN",
            m["pendingEvents"],
            _bytes(m["pendingBytes"]),
            _duration(m["oldestPendingAgeMs"] / 1000),
            m["eventsAccepted"],
            _when(m["lastAcceptedAt"]),
        ]
        for m in status["mirrors"]["sources"]
    ]
    out += [
        "",
        *_table(["MIRROR", "LINK", "PENDING", "BYTES", "LAG (OLDEST)", "ACCEPTED", "LAST ACCEPTED"], rows),
    ]
    target = status["mirrors"]["target"]
    rows = [
        [
            origin,
            c["messages"],
            c["duplicates"],
            c.get("held", 0),
            c["acks"],
            c["ack_retries"],
            c["acks_never_matched"],
        ]
        for origin, c in sorted(target.get("origins", {}).items())
    ]
    if rows:
        header = ["FROM ORIGIN", "MESSAGES", "DUPLICATES", "HELD", "ACKS", "ACK RETRIES", "NEVER MATCHED"]
        out += ["", *_table(header, rows)]
        if target.get("heldNow"):
            out.append(
                f"{target['heldNow']} mirrored messages held for queues not here yet"
                f"{', credit withheld' if target.get('linksWithoutCredit') else ''} (docs/mirror.md)"
            )
    rows = [
        [q["name"], q["address"], q["messages"], q["consumers"]]
        for q in status["queues"]
        if not q["internal"]
    ]
    out += ["", *_table(["QUEUE", "ADDRESS", "MESSAGES", "CONSUMERS"], rows)]
    shown = sum(1 for q in status["queues"] if not q["internal"])
    if status["queuesTotal"] > len(status["queues"]):
        out.append(f"({shown} deepest shown of {status['queuesTotal']} queues; --json has them)")
    unrouted = status.get("unrouted", {})
    if unrouted.get("total"):
        rows = [[a["name"], ",".join(a["routingTypes"]), a["messages"]] for a in unrouted["addresses"]]
        out += [
            "",
            f"UNROUTED: {unrouted['total']} message(s) matched no queue and were dropped "
            "(an address keeps messages only in its queues)",
            *_table(["ADDRESS", "ROUTING", "DROPPED"], rows),
        ]
    return "\n".join(out)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return [header[0] + ": none"]
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _when(epoch_ms: int) -> str:
    if not epoch_ms:
        return "never"
    return f"{_duration(max(0.0, time.time() - epoch_ms / 1000))} ago"


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
