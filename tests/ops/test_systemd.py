"""The broker under systemd's protocol, with a NOTIFY_SOCKET of the test's own; the unit file verified.

READY=1 (and a STATUS= saying it is active), WATCHDOG=1 from the event loop (none while the loop is
stuck), RELOADING=1 / READY=1 around a SIGHUP that applies new users and names what needs a restart,
STOPPING=1 on SIGTERM. `systemd-analyze verify` on deploy/systemd/amqp-mirror.service.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.peers.ports import wait_until
from tests.support.broker import REPO, BrokerProcess
from tests.support.client import send
from tests.support.ops import ORDERS

WATCHDOG_USEC = 200_000  # pings every 0.1 s
BLOCK = 1.5  # seconds the loop is stuck


class NotifySocket:
    """What systemd would receive: every datagram, with the monotonic time it came."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="notify-")  # short: an AF_UNIX path has at most 107 bytes
        self.path = os.path.join(self.dir, "sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self._open = True
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while self._open:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def seen(self, field: str, after: float = 0.0) -> list[float]:
        return [t for t, m in list(self.messages) if t >= after and field in m.split("\n")]

    def with_prefix(self, prefix: str) -> list[str]:
        return [line for _, m in list(self.messages) for line in m.split("\n") if line.startswith(prefix)]

    def close(self) -> None:
        self._open = False
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def notify() -> Iterator[NotifySocket]:
    n = NotifySocket()
    yield n
    n.close()


def test_ready_watchdog_reload_and_stopping(tmp_path: Path, notify: NotifySocket) -> None:
    b = BrokerProcess(tmp_path, name="svc", xml_kwargs={"addresses": ORDERS, "security": True})
    config = b.write_config()
    env = dict(
        os.environ,
        NOTIFY_SOCKET=notify.path,
        WATCHDOG_USEC=str(WATCHDOG_USEC),
        PYTHONPATH=str(REPO),
        BLOCK_SECONDS=str(BLOCK),
    )
    env.pop("WATCHDOG_PID", None)
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "ops" / "loop_blocker.py"), "run", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
        )
    try:
        wait_until(lambda: notify.seen("READY=1"), 20, "READY=1")
        assert any("active, accepting clients" in s for s in notify.with_prefix("STATUS="))
        wait_until(lambda: len(notify.seen("WATCHDOG=1")) >= 5, 10, "the watchdog to ping")

        # a stuck loop misses its pings; they come back once it runs again
        blocked_at = time.monotonic()
        proc.send_signal(signal.SIGUSR1)  # loop_blocker.py: the loop sleeps (SIGUSR2 dumps stacks)
        wait_until(lambda: notify.seen("WATCHDOG=1", after=blocked_at + BLOCK), 10, "pings after the block")
        pings = notify.seen("WATCHDOG=1", after=blocked_at - 1.0)
        gaps = [later - earlier for earlier, later in itertools.pairwise(pings)]
        assert max(gaps) >= BLOCK - 0.2, f"no gap while the loop was stuck: {gaps}"
        first_after = notify.seen("WATCHDOG=1", after=blocked_at + 0.3)[0]
        assert first_after >= blocked_at + BLOCK - 0.2, "a ping came while the loop was stuck"

        # SIGHUP: a new user can log in at once; a setting that needs a restart is named
        etc = config.parent
        with open(etc / "artemis-users.properties", "a") as users:
            users.write("carol = sea\n")
        roles = (
            (etc / "artemis-roles.properties")
            .read_text()
            .replace("producers = alice", "producers = alice,carol")
        )
        (etc / "artemis-roles.properties").write_text(roles)
        config.write_text(
            config.read_text().replace(
                "<name>svc</name>",
                "<name>svc</name><message-expiry-scan-period>5000</message-expiry-scan-period>",
            )
        )
        reload_at = time.monotonic()
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: notify.seen("READY=1", after=reload_at), 10, "READY=1 after the reload")
        assert notify.seen("RELOADING=1", after=reload_at)[0] <= notify.seen("READY=1", after=reload_at)[0]
        text = log.read_text()
        assert "AMQ951011: svc: reloaded: users and roles" in text
        restart = "AMQ951012: svc: changed in the file, applied only at the next restart:"
        assert f"{restart} message-expiry-scan-period" in text
        assert send(b.url, "orders", ["from carol"], user="carol", password="sea") == 1

        stop_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert notify.seen("STOPPING=1", after=stop_at)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    require(
        "systemd-analyze", shutil.which("systemd-analyze") is not None, "install Debian's systemd package"
    )
    unit = (REPO / "deploy" / "systemd" / "amqp-mirror.service").read_text()
    assert "Type=notify" in unit and "WatchdogSec=" in unit and "ExecReload=" in unit
    assert "\nDynamicUser=" not in unit and "\nUser=" in unit  # shared-store files: one uid on both hosts
    command = shutil.which("amqp-mirror", path=str(Path(sys.executable).parent)) or shutil.which(
        "amqp-mirror"
    )
    require("amqp-mirror command", command is not None, "pip install the project (scripts/install-deps)")
    copy = tmp_path / "amqp-mirror.service"  # the command where this machine has it (the README says so)
    copy.write_text(unit.replace("/opt/amqp-mirror/venv/bin/amqp-mirror", str(command)))
    checked = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True)
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr
