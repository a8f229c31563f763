"""Our broker as a separate OS process on a free loopback port, configured by a generated broker.xml."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.peers.ports import LOOPBACK, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]

# Every broker process a test started, so that a failing test cannot leave one running (conftest kills
# what is still alive after each test).
RUNNING: set[BrokerProcess] = set()

USERS = "admin = secret\nalice = wonderland\nbob = builder\n"
ROLES = "amq = admin\nproducers = alice\nconsumers = bob\n"


def broker_xml(
    name: str,
    port: int,
    *,
    security: bool = False,
    persistence: bool = True,
    addresses: str = "",
    address_settings: str = "",
    security_settings: str = "",
    acceptor_params: str = "",
    extra: str = "",
    extra_acceptors: str = "",
    host: str = LOOPBACK,
) -> str:
    default_settings = """
      <address-setting match="#">
        <dead-letter-address>DLA</dead-letter-address>
        <expiry-address>ExpiryQueue</expiry-address>
        <max-delivery-attempts>3</max-delivery-attempts>
        <auto-create-queues>true</auto-create-queues>
        <auto-create-addresses>true</auto-create-addresses>
      </address-setting>"""
    default_security = """
      <security-setting match="#">
        <permission type="createAddress" roles="amq,producers,consumers"/>
        <permission type="createDurableQueue" roles="amq,producers,consumers"/>
        <permission type="createNonDurableQueue" roles="amq,consumers"/>
        <permission type="deleteNonDurableQueue" roles="amq,consumers"/>
        <permission type="send" roles="amq,producers"/>
        <permission type="consume" roles="amq,consumers"/>
        <permission type="manage" roles="amq"/>
      </security-setting>"""
    params = f";{acceptor_params}" if acceptor_params else ""
    return f"""<?xml version="1.0"?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <core xmlns="urn:activemq:core">
    <name>{name}</name>
    <persistence-enabled>{str(persistence).lower()}</persistence-enabled>
    <security-enabled>{str(security).lower()}</security-enabled>
    <journal-directory>data/journal</journal-directory>
    <bindings-directory>data/bindings</bindings-directory>
    <paging-directory>data/paging</paging-directory>
    <large-messages-directory>data/large-messages</large-messages-directory>
    {extra}
    <acceptors>
      <acceptor name="amqp">tcp://{host}:{port}?protocols=AMQP{params}</acceptor>{extra_acceptors}
    </acceptors>
    <security-settings>{security_settings or default_security}
    </security-settings>
    <address-settings>{address_settings or default_settings}
    </address-settings>
    <addresses>
      <address name="DLA"><anycast><queue name="DLA"/></anycast></address>
      <address name="ExpiryQueue"><anycast><queue name="ExpiryQueue"/></anycast></address>
      {addresses}
    </addresses>
  </core>
</configuration>
"""


@dataclass(eq=False)
class BrokerProcess:
    """Start with `start()`; `kill()` is SIGKILL, `stop()` is SIGTERM and waits for exit 0."""

    home: Path
    name: str = "broker"
    port: int = field(default_factory=free_port)
    xml_kwargs: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    starts: int = 0
    ready_text: str = "listening on"  # what its log says once it serves (an HA backup: "passive on")
    node_id: str | None = None  # fixed before the first start (else the broker makes one)
    config: str | None = None  # a whole broker.xml text (e.g. one shared with an Artemis); else generated
    host: str = LOOPBACK  # where it listens (an address of a network namespace it runs in)
    prefix: tuple[str, ...] = ()  # what its command runs under (`ip netns exec NS`)
    env: dict[str, str] = field(default_factory=dict)  # more of its environment (NOTIFY_SOCKET, say)

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.home / "etc" / "broker.xml"

    def write_config(self) -> Path:
        etc = self.home / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        kwargs = {"host": self.host, **self.xml_kwargs}
        text = self.config if self.config is not None else broker_xml(self.name, self.port, **kwargs)
        self.config_path.write_text(text)
        (etc / "artemis-users.properties").write_text(USERS)
        (etc / "artemis-roles.properties").write_text(ROLES)
        node_file = self.home / "data" / "journal" / "node-id"
        if self.node_id is not None and not node_file.exists():
            node_file.parent.mkdir(parents=True, exist_ok=True)
            node_file.write_text(self.node_id + "\n")
        return self.config_path

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        if not self.config_path.exists():
            self.write_config()
        self.starts += 1
        self.log_path = self.home / f"broker-{self.starts}.log"
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child owns it
        env = {**os.environ, **self.env}
        # this worktree's code, after what `env` puts first (a sitecustomize, say)
        paths = (self.env.get("PYTHONPATH", ""), str(REPO), os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "amqp_mirror", "run", "--config", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.home,
            env=env,
        )
        log.close()
        RUNNING.add(self)
        wait_until(lambda: self._ready(), timeout, f"broker {self.name} to listen on port {self.port}")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"broker {self.name} exited with {self.proc.returncode}:\n{self.log()}")
        return self.ready_text in self.log()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        RUNNING.discard(self)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for the exit code; a broker that does not exit in time is killed (and -9)."""
        if self.proc is None or self.proc.poll() is not None:
            RUNNING.discard(self)
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9
        finally:
            RUNNING.discard(self)

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks
