"""Run brokers on one event loop: start, serve, and stop gracefully on SIGTERM/SIGINT.

Graceful stop: stop accepting, close every connection with `amqp:connection:forced`, hand the last
journal batch over and wait until it is on disk, exit 0. A server with `<scale-down>` first moves its
messages to another server and redirects its clients there (scale_down.py); if that does not complete,
what is left stays in its journal and the exit code is 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import signal
from collections.abc import Callable

from broker_core import compiled
from broker_core.config.model import BrokerConfig
from broker_core.journal.errors import JournalError

from .broker import Broker
from .ha import EXIT_REJOIN, HaController, uses_ha
from .network_check import NetworkCheck, NetworkGuard, targets_of
from .ops import status, users
from .ops.node import Node
from .ops.service import Operations
from .scale_down import ScaleDownRun, scales_down

log = logging.getLogger(__name__)


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run(configs: list[BrokerConfig]) -> int:
    """Serve until SIGTERM/SIGINT; return the process exit code."""
    log.info("%s", compiled.status())
    loop = new_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()
    failed: list[str] = []
    exit_codes: list[int] = []

    def on_fatal(exc: BaseException) -> None:
        failed.append(f"fatal: {exc}")
        stop.set()

    def on_exit(code: int, why: str) -> None:  # an HA controller ended its broker (halted, stepped down)
        exit_codes.append(code)
        if why:  # a halt has said why already, in its one CRITICAL line
            failed.append(why)
        stop.set()

    def prepare(broker: Broker) -> None:
        broker.turn.on_fatal = on_fatal
        broker.on_started.append(status.install)  # `amqp-mirror status` asks it (getBrokerStatus)
        broker.on_started.append(users.install)  # addUser, ..., reloadConfigurationFile

    controllers = [HaController(c, loop, on_exit, prepare) for c in configs if uses_ha(c)]
    brokers = [Broker(c, loop) for c in configs if not uses_ha(c)]
    # a broker outside a pair checks the network too: isolated, it stops serving until it is back
    checks = [NetworkCheck(b.config.name, targets_of(b.config), loop) for b in brokers]
    for broker, check in zip(brokers, checks, strict=True):
        NetworkGuard(check, _always(broker))
    nodes = [Node(c.config, ha=c) for c in controllers] + [Node(b.config, broker=b) for b in brokers]
    ops = Operations(loop, nodes)

    def on_signal(signame: str) -> None:
        log.info("received %s: shutting down", signame)
        stop.set()

    async def main() -> None:
        try:
            await ops.start_endpoints()
        except (OSError, ValueError) as exc:  # the metrics or console port in use, an unreadable certificate
            failed.append(f"cannot serve metrics or the console: {exc}")
            await ops.stop()
            return
        for b in brokers:
            try:
                prepare(b)
                await b.start()
            except (OSError, ValueError) as exc:  # a port in use, an unreadable certificate, ...
                failed.append(f"{b.config.name}: cannot start: {exc}")
                for started in brokers:
                    await started.stop()
                await ops.stop()
                return
        for check in checks:
            check.start()
        for controller in controllers:
            try:
                await controller.start()
            except (OSError, ValueError) as exc:
                failed.append(f"{controller.config.name}: cannot start: {exc}")
                stop.set()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig.name)
        loop.add_signal_handler(signal.SIGHUP, ops.reload)
        # every thread's stack on stderr, even with the loop stuck: a server that hangs can say where
        faulthandler.register(signal.SIGUSR2, all_threads=True)
        tune_gc()
        ops.started()
        await stop.wait()
        ops.stopping()
        for check in checks:
            check.stop()
        for controller in controllers:
            try:
                await controller.stop()
            except JournalError as exc:
                failed.append(f"{controller.config.name}: could not write its last journal batch: {exc}")
        for b in brokers:
            scale_down = scales_down(b)
            if scale_down is not None and b.server.started and not await ScaleDownRun(b, scale_down).run():
                failed.append(
                    f"{b.config.name}: its scale-down did not complete; what is left is in its journal"
                )
            try:
                await b.stop()
            except JournalError as exc:  # the fatal path says what happened, in one line, no traceback
                failed.append(f"{b.config.name}: could not write its last journal batch: {exc}")
        await ops.stop()

    try:
        loop.run_until_complete(main())
    finally:
        with contextlib.suppress(Exception):
            loop.close()
    if failed or any(code not in (0, EXIT_REJOIN) for code in exit_codes):
        for line in failed:
            log.error("%s", line)
        return 1
    log.info("shutdown complete")
    return EXIT_REJOIN if EXIT_REJOIN in exit_codes else 0


def _always(broker: Broker) -> Callable[[], Broker | None]:
    return lambda: broker


def tune_gc() -> None:
    """A broker holds many long-lived objects (stored messages, queue references). With CPython's
    default thresholds the older generations are walked again and again as queues deepen, which made
    a mirror target's catch-up cost grow with its backlog. What exists after recovery is frozen out of
    collection, and collections run less often (our hot paths make few reference cycles)."""
    import gc

    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
