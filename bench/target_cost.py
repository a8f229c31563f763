"""CPU per event of a mirror target, in one process: engine, apply, journal (fdatasync included).

A client engine plays the mirror source: it attaches a mirror link to a broker endpoint and sends N
replicated 1 KiB messages (a rhea client's message, as our source forwards it). The bytes are fed to
the target in 256 KiB reads, as the socket delivers them; between reads the target hands its journal
batch over and runs the journal's callbacks, as the broker does. Prints CPU microseconds per event
(this process, the journal's writer thread included). No sockets and no second broker: the figure
is the target's own cost, the steadiest input to the catch-up benchmark.

    .venv/bin/python bench/target_cost.py [N] [--repeat R]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from amqp_mirror.runtime import tune_gc  # noqa: E402
from broker_core import compiled  # noqa: E402
from broker_core.amqp.connection import Connection  # noqa: E402
from broker_core.config.parser import load_config  # noqa: E402
from broker_core.endpoint import BrokerEndpoint  # noqa: E402
from broker_core.server import Server  # noqa: E402
from broker_core.services import Services  # noqa: E402
from mirror import wire  # noqa: E402
from mirror.attach import mirror_source_attach  # noqa: E402
from mirror.inbound import MirrorLinks  # noqa: E402
from mirror.target import MirrorTarget  # noqa: E402
from tests.support.broker import broker_xml  # noqa: E402

# A durable 1 KiB message as rhea sends it: list32 header, empty properties, application properties
# (sent_at_ms, seq), a data section.
RHEA_MESSAGE = (
    bytes.fromhex(
        "005370d0000000050000000141005373450053 74d10000002000000004a10a73656e745f61745f6d7380"
        "000001a20a1c604da1037365715205005375b000000400".replace(" ", "")
    )
    + b"x" * 1024
)
READ = 256 * 1024


class Source:
    """The client engine's handler: SASL ANONYMOUS, then nothing to do."""

    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None:
        conn.sasl_init("ANONYMOUS", b"")

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class NoSocket:
    """The endpoint's I/O side: output is taken and dropped."""

    def __init__(self) -> None:
        self.endpoint: BrokerEndpoint | None = None

    def mark_dirty(self) -> None:
        pass

    def write_out(self) -> None:
        if self.endpoint is not None:
            self.endpoint.before_flush()
            self.endpoint.conn.take_output()

    def close(self) -> None:
        pass


def run(n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="target-cost-") as tmp:
        etc = Path(tmp) / "etc"
        etc.mkdir()
        (etc / "broker.xml").write_text(broker_xml("dc2", 5672))
        config, _ = load_config(etc / "broker.xml")
        server = Server(config)
        ready: list[Any] = []  # journal callbacks, handed over by the writer thread
        server.start(dispatch=ready.append)
        server.persistence.set_scheduler(lambda: None)
        target = MirrorTarget(server)
        services = Services()
        services.register_prefix(wire.MIRROR_ADDRESS_PREFIX, MirrorLinks(server, target))
        server.ensure_address("orders", {"ANYCAST"}, auto_created=True)
        server.create_queue("orders", "orders", "ANYCAST", durable=True)
        io = NoSocket()
        endpoint = BrokerEndpoint(server, config.acceptors[0], services, io, "source")
        io.endpoint = endpoint
        source = Connection(Source(), server=False, container_id="dc1")
        source.start_client(sasl=True)

        def pump() -> None:
            for _ in range(8):
                out = source.take_output()
                if out:
                    endpoint.conn.receive(out)
                endpoint.before_flush()
                back = endpoint.conn.take_output()
                if back:
                    source.receive(back)

        pump()
        session = source.begin()
        link = source.attach(session, mirror_source_attach("DC2", "dc1-node", str(uuid.uuid4())))
        pump()
        assert link.remote_attach is not None, "the target did not answer the mirror attach"
        link.credit = n  # the bytes are made up front; the target grants its own credit as it reads
        for i in range(n):
            payload = wire.replicate(RHEA_MESSAGE, i + 1, "dc1-node", "orders")
            source.send_delivery(link, (i + 1).to_bytes(4, "big"), payload, False)
        stream = source.take_output()
        gc.collect()
        tune_gc()  # as the broker does once it has started
        t0 = time.process_time()
        for at in range(0, len(stream), READ):
            endpoint.conn.receive(stream[at : at + READ])
            server.persistence.flush()
            while ready:
                ready.pop(0)()
            io.write_out()
        server.journal.flush()
        while ready:
            ready.pop(0)()
        cpu = time.process_time() - t0
        applied = target.stats["messages"]
        assert applied == n and not endpoint.conn.closed, (applied, endpoint.conn.error)
        server.stop()
        return cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("count", nargs="?", type=int, default=30000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(compiled.status(), flush=True)  # a stale build means plain Python is measured
    costs = [run(args.count) for _ in range(args.repeat)]
    print(
        f"mirror target, {args.count} replicated 1 KiB messages: CPU us/event "
        f"{statistics.median(costs):.1f} ({min(costs):.1f}-{max(costs):.1f})"
    )


if __name__ == "__main__":
    main()
