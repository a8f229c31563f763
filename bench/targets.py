"""Brokers under test for the benchmarks: Artemis, RabbitMQ, the Proton C broker, or any command / URL.

A target yields an ``Endpoint``: where to connect, how to address a queue (durable or not), and the
PID whose process tree is the broker (None when we did not start it, so no CPU can be measured).
"""

from __future__ import annotations

import shlex
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from bench.ours_broker import bench_broker_xml
from tests.peers.artemis import ArtemisProcess
from tests.peers.artemis import availability as artemis_availability
from tests.peers.ports import LOOPBACK, answers_amqp, free_port, wait_until
from tests.peers.procs import start_session, stop_session
from tests.peers.protonc import running_proton_broker
from tests.peers.rabbitmq import running_rabbitmq


@dataclass
class Endpoint:
    name: str
    url: str
    pid: int | None
    make_address: Callable[[bool], str]  # durable? -> a fresh queue address


def _plain_address(durable: bool) -> str:
    return f"bench-{uuid.uuid4().hex[:8]}"


@contextmanager
def open_target(target: str, broker_cmd: str | None, workdir: Path | None = None) -> Iterator[Endpoint]:
    """Start (or just point at) the broker named by ``target`` and yield its endpoint."""
    with ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amqp-bench-")))
        if broker_cmd:
            yield stack.enter_context(_command_target(broker_cmd, target, root))
        elif target == "rabbitmq":
            node = stack.enter_context(running_rabbitmq(root / "rabbitmq"))

            def rabbit_address(durable: bool) -> str:
                name = _plain_address(durable)
                # /queue/NAME makes a transient queue on attach; durable ones are declared, then /amq/queue.
                return node.declare_durable_queue(name) if durable else f"/queue/{name}"

            yield Endpoint("rabbitmq", node.url, node.pid, rabbit_address)
        elif target == "artemis":
            broker = stack.enter_context(running_artemis(root / "artemis"))
            yield Endpoint("artemis", broker.url, broker.pid, _plain_address)
        elif target == "protonc":
            broker = stack.enter_context(running_proton_broker(root / "proton-c"))
            yield Endpoint("protonc", broker.url, broker.pid, _plain_address)
        elif target.startswith("url:"):
            yield Endpoint(target, target[4:], None, _plain_address)
        else:
            raise SystemExit(
                f"unknown --target {target!r}: use artemis, rabbitmq, protonc or url:amqp://HOST:PORT"
            )


@contextmanager
def running_artemis(home: Path) -> Iterator[ArtemisProcess]:
    """Apache ActiveMQ Artemis from the very broker.xml our broker runs in the harness (bench-* addresses
    become anycast queues): its AMQP acceptor, its default journal (ASYNCIO where libaio loads, else NIO)
    with journal-datasync on, its default journal-buffer-timeout."""
    ok, why = artemis_availability()
    if not ok:
        raise SystemExit(f"Artemis unavailable: {why}")
    port = free_port()
    broker = ArtemisProcess(home, bench_broker_xml(port), port=port)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@contextmanager
def _command_target(command: str, target: str, root: Path) -> Iterator[Endpoint]:
    """Run ``command`` (``{port}`` and ``{workdir}`` are substituted) and wait until it speaks AMQP."""
    # A url: target fixes the address; without one (or with a literal {port} in it) we pick a free port.
    url = target[4:] if target.startswith("url:") else f"amqp://{LOOPBACK}:{{port}}"
    if "{port}" in url:
        url = url.replace("{port}", str(free_port()))
    host, port = urlparse(url).hostname or LOOPBACK, urlparse(url).port or 5672
    root.mkdir(parents=True, exist_ok=True)
    argv = [arg.format(port=port, workdir=root) for arg in shlex.split(command)]
    process = start_session(argv, root / "broker.out", cwd=root)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                log = (root / "broker.out").read_text(errors="replace")[-2000:]
                raise SystemExit(f"broker command exited with {process.returncode}:\n{log}")
            return answers_amqp(host, port)

        wait_until(ready, 60, f"broker command {argv} on port {port}")
        yield Endpoint(Path(argv[0]).name, url, process.pid, _plain_address)
    finally:
        stop_session(process, grace=15)
