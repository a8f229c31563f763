"""A real ZooKeeper ensemble on loopback (Debian's `zookeeper` package, one JVM per node), for the HA
lock manager's tests: started on free ports in a directory of the test's own, each node stopped, paused
(SIGSTOP) and resumed by its PID (spec B5)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.peers.ports import LOOPBACK, free_port, wait_until

JAR = Path("/usr/share/java/zookeeper.jar")  # its manifest's Class-Path brings the dependencies


def availability() -> tuple[bool, str]:
    if shutil.which("java") is None:
        return False, "Java is not installed (Debian: apt-get install openjdk-17-jre-headless)"
    if not JAR.exists():
        return False, f"{JAR} is missing (Debian: apt-get install zookeeper)"
    return True, ""


@dataclass
class ZkNode:
    number: int
    home: Path
    client_port: int
    process: subprocess.Popen[bytes] | None = None
    host: str = LOOPBACK
    prefix: tuple[str, ...] = ()  # what its JVM runs under (`ip netns exec NS`)

    def start(self) -> None:
        log = (self.home / "out.log").open("ab")
        self.process = subprocess.Popen(
            [*self.prefix, "java", "-Xmx128m", "-Dzookeeper.admin.enableServer=false", "-cp", str(JAR),
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.home / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def mode(self) -> str | None:
        """'leader', 'follower' or 'standalone' once serving (the `srvr` four-letter word), else None."""
        try:
            with socket.create_connection((self.host, self.client_port), timeout=1) as sock:
                sock.sendall(b"srvr")
                data = sock.recv(4096).decode(errors="replace")
        except OSError:
            return None
        for line in data.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


@dataclass
class Ensemble:
    nodes: list[ZkNode] = field(default_factory=list)

    @property
    def connect_string(self) -> str:
        return ",".join(f"{n.host}:{n.client_port}" for n in self.nodes)

    def wait_serving(self, timeout: float = 60) -> None:
        def ready() -> bool:
            modes = [n.mode() for n in self.nodes]
            return all(modes) if len(modes) == 1 else (modes.count("leader") == 1 and None not in modes)

        wait_until(ready, timeout, "the ZooKeeper ensemble to elect a leader")


@contextmanager
def running_ensemble(
    home: Path, size: int = 3, hosts: list[str] | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[Ensemble]:
    """`hosts`: each node's address (loopback by default), `prefix`: what each JVM runs under."""
    ensemble = Ensemble()
    hosts = hosts or [LOOPBACK] * size
    peers = [(free_port(), free_port()) for _ in range(size)]
    for i in range(1, size + 1):
        node_home = home / f"zk{i}"
        (node_home / "data").mkdir(parents=True)
        (node_home / "data" / "myid").write_text(f"{i}\n")
        lines = [
            "tickTime=100", "initLimit=50", "syncLimit=20", "minSessionTimeout=200",
            "maxSessionTimeout=30000", f"dataDir={node_home / 'data'}", f"clientPort={free_port()}",
            f"clientPortAddress={hosts[i - 1]}", "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok",
        ]  # fmt: skip
        if size > 1:
            lines += [f"server.{j}={hosts[j - 1]}:{a}:{b}" for j, (a, b) in enumerate(peers, start=1)]
        (node_home / "zoo.cfg").write_text("\n".join(lines) + "\n")
        port = int(next(line for line in lines if line.startswith("clientPort=")).split("=")[1])
        ensemble.nodes.append(ZkNode(i, node_home, port, host=hosts[i - 1], prefix=prefix))
    try:
        for node in ensemble.nodes:
            node.start()
        ensemble.wait_serving()
        yield ensemble
    finally:
        for node in ensemble.nodes:
            node.stop()
