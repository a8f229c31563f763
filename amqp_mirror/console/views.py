"""The console's pages, rendered on the server from the broker's parts as they are at this loop turn.

Each page function takes a `View` (frame.py: the node, who is asking and what they may do) and returns
its `<main>` content, which `frame.layout` wraps. Reading is direct (as the metrics collector reads);
a queue's messages come from management's `browse`; every button is an action (actions.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core.queues import Address, Queue

from ..ops.metrics import _version
from ..ops.status import _bytes, _duration, _when
from .frame import View, action, facts, form, not_allowed, passive
from .markup import Markup, href, join, table, tag

if TYPE_CHECKING:
    from ..broker import Broker

BROWSE_PAGE_SIZE = 20
BODY_PREVIEW = 400  # characters of a body shown in the message table
# ------------------------------------------------------------------------------------------ overview


def overview(view: View) -> Markup:
    node = view.node
    known: list[tuple[str, object]] = [
        ("server", node.name),
        ("version", _version()),
        ("up", _duration(time.time() - view.started)),
        ("role", node.role()),
        ("state", node.state()),
    ]
    ha = node.ha.status() if node.ha is not None else None
    if ha is not None:
        partner = node.config.ha_partner()
        known += [
            ("HA policy", ha.get("policy")),
            (
                "partner",
                ha.get("partner") or (f"{partner.host}:{partner.port}" if partner else "none configured"),
            ),
        ]
        if "backupPresent" in ha:
            known.append(("backup ready", "yes" if ha["backupPresent"] else "NO"))
        if "synchronized" in ha:
            known.append(("replica in sync", "yes" if ha["synchronized"] else "no"))
    else:
        known.append(("HA policy", "none (primary-only)"))
    out = [facts(known)]
    if not view.serving:
        out.append(passive(view))
        return join(out)
    broker = view.broker
    out.append(facts([("node id", broker.server.node_id)]))
    if ha is not None:
        out.append(
            action(
                view, "failover", "Fail over to the backup", "Stop this server and let its backup take over?"
            )
        )
    out.append(Markup("<h3>Acceptors</h3>"))
    listener = broker.listener
    open_by: dict[str, int] = {}
    for sock in listener.sockets if listener is not None else ():
        open_by[sock.acceptor.name] = open_by.get(sock.acceptor.name, 0) + 1
    tls = {a.name: a.tls.enabled for a in broker.config.acceptors}
    rows = [
        [name, f"{host}:{port}", "yes" if tls.get(name) else "no", open_by.get(name, 0)]
        for name, (host, port) in (listener.bound.items() if listener is not None else ())
    ]
    out.append(table(["acceptor", "listening on", "TLS", "connections"], rows))
    out += [Markup("<h3>Memory, disk and paging</h3>"), _limits(broker)]
    return join(out)


def _limits(broker: Broker) -> Markup:
    server, config = broker.server, broker.config
    budget = server.budget
    rows: list[list[object]] = [
        ["memory held by messages", _bytes(budget.bytes), _limit_bytes(budget.max_bytes, budget.bytes)],
        [
            "messages in memory",
            budget.messages,
            "no limit" if budget.max_messages < 0 else budget.max_messages,
        ],
    ]
    try:
        st = os.statvfs(_existing(Path(config.journal_directory)))
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        used = 100.0 * (total - free) / total if total else 0.0
        limit = "none" if config.max_disk_usage < 0 else f"max-disk-usage {config.max_disk_usage} %"
        rows.append(["disk used (journal's file system)", f"{used:.1f} % ({_bytes(free)} free)", limit])
        if config.min_disk_free > 0:
            rows.append(["disk free", _bytes(free), f"min-disk-free {_bytes(config.min_disk_free)}"])
    except OSError as exc:
        rows.append(["disk", f"unreadable: {exc}", ""])
    rows.append(["producers blocked by the disk", "YES" if budget.no_room else "no", ""])
    paging = [a for a in server.addresses.values() if a.usage.store is not None]
    rows.append(
        [
            "addresses paging",
            len(paging),
            f"{sum(a.usage.paged for a in paging)} messages in page files, "
            f"{_bytes(sum(server.paging.bytes_of(a.name) for a in paging))} on disk",
        ]
    )
    return table(["", "now", "limit"], rows)


def _limit_bytes(limit: int, used: int) -> str:
    if limit < 0:
        return "no limit"
    share = f" ({100.0 * used / limit:.0f} % used)" if limit else ""
    return f"global-max-size {_bytes(limit)}{share}"


# ------------------------------------------------------------------------------------------ addresses


def addresses(view: View) -> Markup:
    if not view.serving:
        return passive(view)
    server = view.broker.server
    rows = []
    for a in sorted(server.addresses.values(), key=lambda a: a.name):
        settings = server.settings_for(a.name)
        rows.append(
            [
                a.name + (" (internal)" if a.internal else ""),
                ",".join(sorted(a.routing_types)),
                join((_queue_link(q) for q in a.queues), ", ") if a.queues else "none",
                a.usage.messages,
                _memory(a),
                _paging(server, a),
                a.usage.policy,
                settings.dead_letter_address or "none",
                settings.expiry_address or "none",
                a.unrouted,
            ]
        )
    header = ["address", "routing", "queues", "in memory", "memory", "paging", "full policy"]
    header += ["dead letters to", "expired to", "unrouted"]
    return table(header, rows, "no address")


def _memory(a: Address) -> str:
    usage = a.usage
    return _bytes(usage.bytes) + (f" of {_bytes(usage.max_bytes)}" if usage.max_bytes >= 0 else "")


def _paging(server: Any, a: Address) -> str:
    if a.usage.store is None:
        return "no"
    return f"yes: {a.usage.paged} messages, {server.paging.pages_of(a.name)} pages"


def _queue_link(q: Queue) -> Markup:
    return tag('<a href="{}">{}</a>', href("/queue", name=q.name), q.name)


# ------------------------------------------------------------------------------------------ queues


def queues(view: View) -> Markup:
    if not view.serving:
        return passive(view)
    server = view.broker.server
    rates = view.rates
    rows = []
    for q in sorted(server.queues.values(), key=lambda q: q.name):
        settings = server.settings_for(q.address)
        incoming, outgoing = rates.of(q.name)
        rows.append(
            [
                _queue_link(q),
                q.address,
                q.routing_type + (" (internal)" if q.internal else " (temporary)" if q.temporary else ""),
                q.depth,
                q.in_flight,
                len(q.consumers),
                f"{incoming:.1f}",
                f"{outgoing:.1f}",
                q.paged,
                "paused" if q.paused else "",
                q.killed,
                q.expired,
                _dlq(settings.dead_letter_address, settings.expiry_address),
            ]
        )
    header = ["queue", "address", "routing", "messages", "delivering", "consumers", "in /s", "out /s"]
    header += ["paged", "", "dead-lettered", "expired", "dead letters / expired to"]
    return table(header, rows, "no queue")


def _dlq(dla: str | None, expiry: str | None) -> str:
    return f"{dla or 'none'} / {expiry or 'none'}"


def queue(view: View, name: str, page: int, may_browse: bool) -> Markup:
    if not view.serving:
        return passive(view)
    server = view.broker.server
    q = server.queues.get(name)
    if q is None:
        return tag('<p class="notice">There is no queue {} (any more).</p>', name)
    settings = server.settings_for(q.address)
    incoming, outgoing = view.rates.of(q.name)
    out = [
        facts(
            [
                ("queue", q.name),
                ("address", q.address),
                ("routing", q.routing_type),
                ("durable", "yes" if q.durable else "no"),
                ("messages", q.depth),
                ("delivering", q.in_flight),
                ("in page files", q.paged),
                ("consumers", len(q.consumers)),
                ("rates", f"{incoming:.1f} in /s, {outgoing:.1f} out /s"),
                ("added / acknowledged", f"{q.added} / {q.acked}"),
                ("dead-lettered / expired", f"{q.killed} / {q.expired}"),
                ("dead letters to / expired to", _dlq(settings.dead_letter_address, settings.expiry_address)),
                ("paused", "yes: nothing is delivered" if q.paused else "no"),
            ]
        )
    ]
    if q.internal:
        out.append(
            not_allowed(
                "This queue is internal to the broker (a mirror's store-and-forward queue): "
                "what it holds is owed to the other side, and the console leaves it alone."
            )
        )
    elif view.may_manage:
        others = sorted(n for n, other in server.queues.items() if other is not q and not other.internal)
        choices = join(tag('<option value="{}">{}</option>', n, n) for n in others)
        move = form(
            "/action",
            "Move",
            view.session,
            {"do": "move", "back": view.path, "queue": q.name},
            f"Move the messages of {q.name}?",
            tag(
                '<label>to <select name="to">{}</select></label> <label>how many '
                '<input name="count" size="6" placeholder="all"></label> ',
                choices,
            ),
        )
        out.append(
            tag(
                '<div class="actions">{}{}{}{}</div>',
                action(view, "purge", "Purge", f"Remove every waiting message of {q.name}?", queue=q.name),
                action(view, "retry", "Retry to original queues", None, queue=q.name),
                action(
                    view,
                    "resume" if q.paused else "pause",
                    "Resume" if q.paused else "Pause",
                    None,
                    queue=q.name,
                ),
                move if others else "",
            )
        )
    out.append(Markup("<h3>Messages</h3>"))
    if not may_browse:
        out.append(not_allowed(f"You may not browse queue {q.name}: that needs the browse permission on it."))
        return join(out)
    items = view.broker.management.invoke(f"queue.{q.name}", "browse", [page, BROWSE_PAGE_SIZE])
    out.append(_messages(view, q, items))
    out.append(_pager(q, page, len(items)))
    return join(out)


def _messages(view: View, q: Queue, items: list[dict[str, Any]]) -> Markup:
    rows = []
    for item in items:
        named = {
            k: v
            for group in ("StringProperties", "LongProperties", "DoubleProperties", "BooleanProperties")
            for k, v in (item.get(group) or {}).items()
        }
        props = join((tag("<div><b>{}</b> = {}</div>", k, v) for k, v in sorted(named.items())))
        body = str(item.get("text", ""))
        preview = body[:BODY_PREVIEW] + (f"... ({len(body)} characters)" if len(body) > BODY_PREVIEW else "")
        ref = q.waiting.get(int(item["messageID"]))
        arrived = ref.message.timestamp_ms if ref is not None else 0
        rows.append(
            [
                item["messageID"],
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(arrived / 1000)) if arrived else "",
                "yes" if item.get("durable") else "no",
                item.get("priority"),
                "yes" if item.get("redelivered") else "no",
                props,
                tag('<pre class="body">{}</pre>', preview),
                action(
                    view,
                    "remove-message",
                    "Delete",
                    f"Delete message {item['messageID']}?",
                    queue=q.name,
                    id=item["messageID"],
                ),
            ]
        )
    header = ["id", "arrived", "durable", "priority", "redelivered", "properties", "body", ""]
    return table(header, rows, "no message waiting in memory (messages in page files show once read back)")


def _pager(q: Queue, page: int, shown: int) -> Markup:
    if page == 1 and not shown:
        return Markup("")
    links = []
    if page > 1:
        links.append(tag('<a href="{}">newer</a>', href("/queue", name=q.name, page=page - 1)))
    if shown == BROWSE_PAGE_SIZE:
        links.append(tag('<a href="{}">older</a>', href("/queue", name=q.name, page=page + 1)))
    first = (page - 1) * BROWSE_PAGE_SIZE
    return tag(
        '<p class="pager">messages {} to {}, oldest first {}</p>',
        first + 1 if shown else first,
        first + shown,
        join(links, " "),
    )


# ------------------------------------------------------------------------------------------ connections


def connections(view: View) -> Markup:
    if not view.serving:
        return passive(view)
    listener = view.broker.listener
    rows = []
    endpoints = [(s.acceptor.name, s.endpoint) for s in (listener.sockets if listener is not None else ())]
    for acceptor, endpoint in sorted(
        ((a, e) for a, e in endpoints if e is not None), key=lambda x: x[1].name
    ):
        conn = endpoint.conn
        links = [
            _link_line(link)
            for session in conn.sessions.values()
            for link in session.local_links.values()
            if not (link.closed_locally or link.closed_remotely)
        ]
        rows.append(
            [
                endpoint.name,
                acceptor,
                endpoint.user or "anonymous",
                conn.container_id_remote(),
                len(conn.sessions),
                join(links) if links else "none",
            ]
        )
    return table(
        ["client", "acceptor", "user", "container id", "sessions", "links"], rows, "no client connected"
    )


def _link_line(link: Any) -> Markup:
    attach = link.remote_attach
    terminus = (attach.source if link.is_sender else attach.target) if attach is not None else None
    address = getattr(terminus, "address", None) or "(none)"
    kind = "consumer of" if link.is_sender else "producer to"
    return tag("<div>{} <b>{}</b> (credit {})</div>", kind, address, link.credit)


def broker_connections(view: View) -> Markup:
    if not view.serving:
        return passive(view)
    broker = view.broker
    rows = []
    for c in broker.connections.list() if broker.connections is not None else []:
        toggle = (
            action(view, "stop-connection", "Stop", f"Stop broker connection {c['name']}?", name=c["name"])
            if c["started"]
            else action(view, "start-connection", "Start", None, name=c["name"])
        )
        rows.append(
            [
                c["name"],
                c["uri"],
                c["state"],
                c["remote"],
                c["retries"],
                _when(c["lastConnectedAt"]),
                toggle,
            ]
        )
    out = [
        table(
            ["broker connection", "URI", "state", "remote", "retries", "last connected", ""],
            rows,
            "no broker connection configured",
        )
    ]
    status = broker.mirror_status()
    out.append(Markup("<h3>Mirrors (this broker's events to another)</h3>"))
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
        for m in status["sources"]
    ]
    header = [
        "mirror",
        "link",
        "backlog (events)",
        "backlog (bytes)",
        "lag (oldest pending)",
        "accepted",
        "last accepted",
    ]
    out.append(table(header, rows, "no mirror"))
    out.append(Markup("<h3>Mirrored to this broker</h3>"))
    rows = [
        [origin, c["messages"], c["duplicates"], c.get("held", 0), c["acks"], c["ack_retries"]]
        for origin, c in sorted(status["target"].get("origins", {}).items())
    ]
    out.append(
        table(
            ["from origin", "messages", "duplicates", "held", "acks", "ack retries"],
            rows,
            "nothing mirrored here",
        )
    )
    return join(out)


# ------------------------------------------------------------------------------------------ helpers


def _existing(directory: Path) -> Path:
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent
    return directory
