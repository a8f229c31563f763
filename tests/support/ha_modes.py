"""The HA modes the fault soak (tests/ha/test_fault_soak.py) and the failover benchmark
(bench/ha_bench.py) run: a shared-store pair on one host; a replicated pair with ZooKeeper (three nodes)
or PostgreSQL, or three pairs voting (no lock manager), each server and each coordinator on a host of its
own (network namespaces), the caller's thread on the "client" host. Each builder starts everything,
waits for every backup to be synchronized, and leaves the clean-up to the `ExitStack` it is given. With
`wall_clocks`, each broker runs on a wall clock the caller can jump (tests/support/faketime.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.config.model import POSTGRESQL_LOCK_MANAGER
from tests.conftest import require
from tests.peers import postgresql as postgresql_peer
from tests.peers import zookeeper as zookeeper_peer
from tests.peers.ports import wait_until
from tests.support import faketime, netns
from tests.support.broker import BrokerProcess
from tests.support.faketime import WallClock
from tests.support.ha import lock_manager, replicated_servers, shared_pair

Heal = Callable[[], None]
Outage = Callable[[random.Random], tuple[str, Heal]]  # a fault of the coordinator: what it did, its heal

SESSION_MS = 2000  # the lock managers' session (lease): a paused active server has lost it on waking
TTL_MS = 1000  # the cluster connection's ttl: a silent partner is gone within a second
VOTING = "<vote-retries>10</vote-retries><vote-retry-wait>500</vote-retry-wait>" + (
    "<quorum-vote-wait>2</quorum-vote-wait>"
)
# a restarted primary replicates from the server active with its node id and fails back, rather than
# activating beside it (quorum voting has no lock to tell it)
CHECK_ACTIVE = "<check-for-active-server>true</check-for-active-server>"
# and a primary that lost its backup stays active only if the majority sees it so: with the default
# (false), a primary paused past its backup's vote wakes up and serves beside it (as Artemis's would)
PRIMARIES = CHECK_ACTIVE + "<vote-on-replication-failure>true</vote-on-replication-failure>"


@dataclass
class Setup:
    """One mode, running: its node ids (each the servers of one pair, primary first), the topology of
    its hosts (None: one host), an outage of its coordinator (host name, the fault), and each server's
    wall clock (by name; none unless asked for)."""

    mode: str
    nodes: dict[str, list[BrokerProcess]]
    topology: netns.Topology | None = None
    coordinator: tuple[str, Outage] | None = None
    clocks: dict[str, WallClock] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ the modes


def _topology(stack: ExitStack, hosts: dict[str, int]) -> netns.Topology:
    require("network namespaces", *netns.availability())
    topology = netns.Topology({**hosts, "client": 1})
    stack.callback(topology.close)
    topology.create()
    stack.callback(topology.heal_all)
    stack.enter_context(topology.entered("client"))
    return topology


def _on_wall_clocks(servers: list[BrokerProcess], home: Path, wanted: bool) -> dict[str, WallClock]:
    """Before their first start: each server on a wall clock of its own (if `wanted`)."""
    if not wanted:
        return {}
    require("libfaketime", *faketime.availability())
    clocks = {}
    for server in servers:
        clock = clocks[server.name] = WallClock(home / f"{server.name}.faketime")
        server.env.update(clock.environment())
    return clocks


def _start_pairs(servers: list[BrokerProcess], pairs: int) -> dict[str, list[BrokerProcess]]:
    for server in servers:
        server.start(timeout=60)
    nodes = {f"node{n + 1}": servers[2 * n : 2 * n + 2] for n in range(pairs)}

    def synchronized(backup: BrokerProcess) -> bool:
        # a server that stopped meanwhile starts again, as its service would: on a loaded machine a
        # primary that just activated may give its lock up (nothing heard within the 2 s session's grace)
        for server in servers:
            if server.proc is not None and server.proc.poll() is not None:
                server.ready_text = ""
                server.start(timeout=60)
        return "AMQ221024" in backup.log()

    for node, (_, backup) in nodes.items():
        wait_until(lambda backup=backup: synchronized(backup), 60, f"{node}'s backup to synchronize")
    return nodes


def shared_store(stack: ExitStack, home: Path, wall_clocks: bool = False) -> Setup:
    primary, backup = shared_pair(home)
    clocks = _on_wall_clocks([primary, backup], home, wall_clocks)
    primary.start()
    backup.start()
    return Setup("shared-store", {"node1": [primary, backup]}, clocks=clocks)


def replicated(
    stack: ExitStack,
    home: Path,
    topology: netns.Topology,
    manager: str,
    pairs: int = 1,
    options: str = "",
    primary_options: str = "",
    wall_clocks: bool = False,
) -> tuple[dict[str, list[BrokerProcess]], dict[str, WallClock]]:
    hosts = [f"{role}{n}" for n in range(1, pairs + 1) for role in ("p", "b")]
    members = []
    for n in range(1, pairs + 1):
        group = f"<group-name>pair{n}</group-name>" if pairs > 1 else ""
        members += [
            (f"p{n}", "primary", group + options + primary_options),
            (f"b{n}", "backup", group + options),
        ]
    servers = replicated_servers(
        home,
        "",
        "",
        members,
        ttl=TTL_MS,
        hosts={host: topology.address(host) for host in hosts},
        prefixes={host: topology.prefix(host) for host in hosts},
        port=5672,
        manager=manager,
    )
    stack.callback(lambda: [s.kill() for s in servers])
    clocks = _on_wall_clocks(servers, home, wall_clocks)
    return _start_pairs(servers, pairs), clocks


def zookeeper(stack: ExitStack, home: Path, wall_clocks: bool = False) -> Setup:
    require("ZooKeeper", *zookeeper_peer.availability())
    topology = _topology(stack, {"zk": 3, "p1": 1, "b1": 1})
    ensemble = stack.enter_context(
        zookeeper_peer.running_ensemble(
            home / "zk", hosts=topology.addresses["zk"], prefix=topology.prefix("zk")
        )
    )
    manager = lock_manager(
        "org.apache.activemq.artemis.lockmanager.zookeeper.CuratorDistributedLockManager",
        connect_string=ensemble.connect_string,
        namespace="soak",
        session_ms=str(SESSION_MS),
    )

    def majority_lost(rng: random.Random) -> tuple[str, Heal]:
        stopped = rng.sample(ensemble.nodes, 2)
        for node in stopped:
            node.stop()

        def heal() -> None:
            for node in stopped:
                node.start()
            ensemble.wait_serving()

        return f"ZooKeeper loses its majority (zk{stopped[0].number}, zk{stopped[1].number} stopped)", heal

    nodes, clocks = replicated(stack, home, topology, manager, wall_clocks=wall_clocks)
    return Setup("zookeeper", nodes, topology, ("zk", majority_lost), clocks)


def quorum(stack: ExitStack, home: Path, wall_clocks: bool = False) -> Setup:
    topology = _topology(stack, {f"{role}{n}": 1 for n in (1, 2, 3) for role in ("p", "b")})
    nodes, clocks = replicated(
        stack, home, topology, "", pairs=3, options=VOTING, primary_options=PRIMARIES, wall_clocks=wall_clocks
    )
    return Setup("quorum", nodes, topology, clocks=clocks)


def postgresql(stack: ExitStack, home: Path, wall_clocks: bool = False) -> Setup:
    require("PostgreSQL", *postgresql_peer.availability())
    topology = _topology(stack, {"pg": 1, "p1": 1, "b1": 1})
    with topology.entered("pg"):  # the server inherits the namespace (it drops root: no `ip netns exec`)
        server = stack.enter_context(postgresql_peer.running_postgresql(topology.address("pg")))
    manager = lock_manager(
        POSTGRESQL_LOCK_MANAGER,
        connect_string=server.connect_string,
        namespace="soak",
        session_ms=str(SESSION_MS),
    )

    def stopped(rng: random.Random) -> tuple[str, Heal]:
        server.stop()

        def start() -> None:
            with topology.entered("pg"):
                server.start()

        return "PostgreSQL stopped", start

    nodes, clocks = replicated(stack, home, topology, manager, wall_clocks=wall_clocks)
    return Setup("postgresql", nodes, topology, ("pg", stopped), clocks)


MAKERS = {"shared-store": shared_store, "zookeeper": zookeeper, "quorum": quorum, "postgresql": postgresql}
