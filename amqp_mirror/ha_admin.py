"""`amqp-mirror ha sequence` and `amqp-mirror ha break-glass`: the activation sequence of a replicated
server, read and, as a last resort, overruled by an operator (docs/ha.md, "Break glass").

Both run on the host of a stopped server, with its broker.xml: they read its local activation sequence
and node id from its directories and ask its lock manager for the coordinated one.

`break-glass` makes the chosen server able to activate with the journal it has, whatever the sequence
says: its local value and the coordinated one both become one more than either was, so that this server
is the one in sync and every other copy is stale; at its next start it takes the lock and activates, a
backup too (a backup with a copy tries the lock first), and a note beside its lock files
(`break-glass.json`) has it say so (`AMQ951076`). It is refused while the
server itself runs, while any server holds the node's lock (an active server of that node id), and while
one of its partners answers as an active server; and it wants the node id typed back. What the other
server confirmed after this one's copy is lost for good: that is the operator's call, said out loud.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from broker_core.config import ConfigError, load_config
from broker_core.config.check import print_problems
from broker_core.config.model import BrokerConfig, HaKind
from broker_core.ha import activation
from broker_core.ha.lock_managers import LockManager, LockManagerError, lock_manager_for
from broker_core.ha.node_files import read_activation_sequence, write_activation_sequence
from broker_core.journal.node_id import NODE_ID_FILE

BREAK_GLASS = "break-glass.json"  # beside the lock files: the next start tries the lock first
USAGE_ERROR = 2


def lock_directory(config: BrokerConfig) -> Path:
    return Path(config.node_manager_lock_directory or config.journal_directory)


def node_id_of(config: BrokerConfig) -> str | None:
    """The node id this server's journal directory holds (its own, or the one a backup adopted)."""
    try:
        text = (Path(config.journal_directory) / NODE_ID_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def read_break_glass(config: BrokerConfig) -> dict[str, object] | None:
    try:
        data = json.loads((lock_directory(config) / BREAK_GLASS).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def clear_break_glass(config: BrokerConfig) -> None:
    (lock_directory(config) / BREAK_GLASS).unlink(missing_ok=True)


def main(action: str, config_path: str, node_id: str | None) -> int:
    try:
        config, _ = load_config(config_path)
    except ConfigError as exc:
        print_problems(exc.problems, sys.stderr)
        return USAGE_ERROR
    policy = config.ha_policy
    if policy.kind != HaKind.REPLICATION or policy.manager is None:
        print(
            f"error: {config_path}: not a replicated server with a <manager>: no activation sequence",
            file=sys.stderr,
        )
        return USAGE_ERROR
    node = node_id_of(config)
    if node is None:
        print(
            f"error: {config.journal_directory} holds no node id: this server never held a journal",
            file=sys.stderr,
        )
        return 1
    local = read_activation_sequence(lock_directory(config))
    manager = lock_manager_for(policy.manager)
    try:
        manager.start()
    except LockManagerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        if action == "sequence":
            return _show(config, manager, node, local)
        return _break_glass(config, manager, node, local, node_id)
    except LockManagerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        manager.stop()


def _show(config: BrokerConfig, manager: LockManager, node: str, local: int) -> int:
    coordinated = manager.get_sequence(node)
    held = not manager.try_lock(node)
    if not held:
        manager.unlock(node)
    found = activation.verdict(local, coordinated)
    print(f"node id               {node}")
    print(f"local sequence        {local}  ({config.name})")
    print(f"coordinated sequence  {coordinated}")
    print(f"verdict               {found}")
    print(f"lock                  {'held: a server of this node id is active' if held else 'free'}")
    return 0


def _break_glass(config: BrokerConfig, manager: LockManager, node: str, local: int, typed: str | None) -> int:
    if typed != node:
        print(
            f"refused: break-glass makes {config.name} activate with the journal it has (activation sequence "
            f"{local}), losing what any other server of node id {node} confirmed after this copy. To go "
            f"ahead, give --node-id {node}",
            file=sys.stderr,
        )
        return 1
    running = _answering(config)
    if running:
        print(f"refused: {config.name} itself is running ({running} answers): stop it first", file=sys.stderr)
        return 1
    active = [f"{p.host}:{p.port}" for p in config.ha_partners() if _connects(p.host, p.port)]
    if active:
        print(
            f"refused: {', '.join(active)} answers: a server of this pair runs; break glass only when the "
            "other server is gone (stop it first)",
            file=sys.stderr,
        )
        return 1
    if local <= 0:
        print(
            f"refused: {config.name} never held a synchronized copy (activation sequence 0)", file=sys.stderr
        )
        return 1
    if not manager.try_lock(node):
        print(f"refused: another server holds the lock of node id {node}: it is active", file=sys.stderr)
        return 1
    try:
        coordinated = manager.get_sequence(node)
        chosen = max(local, abs(coordinated)) + 1  # above every copy's: this one in sync, all others stale
        if not manager.compare_and_set_sequence(node, coordinated, chosen):
            print(
                "refused: the coordinated activation sequence changed meanwhile: try again", file=sys.stderr
            )
            return 1
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "by": os.environ.get("SUDO_USER") or os.environ.get("USER") or "unknown",
            "host": socket.gethostname(),
            "nodeId": node,
            "coordinatedWas": coordinated,
            "localWas": local,
            "sequence": chosen,
        }
        write_activation_sequence(lock_directory(config), chosen)
        (lock_directory(config) / BREAK_GLASS).write_text(json.dumps(record) + "\n")
    finally:
        manager.unlock(node)
    print(
        f"AMQ951076: break glass on {config.name}: node id {node}'s activation sequence set to {chosen} here "
        f"and in the lock manager (it was {local} here, {coordinated} there); start this server and it "
        "activates with the journal it has. Every other copy is stale from now on: started again, it "
        "replicates from this one."
    )
    return 0


def _answering(config: BrokerConfig) -> str:
    for acceptor in config.acceptors:
        host = "127.0.0.1" if acceptor.host in ("0.0.0.0", "::", "") else acceptor.host
        if _connects(host, acceptor.port):
            return f"{host}:{acceptor.port}"
    return ""


def _connects(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
