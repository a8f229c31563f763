"""A Spark standalone cluster on loopback: one master and its workers, each a JVM started from the
``pyspark`` installation's ``bin/spark-class`` in a process group of its own, on free ports, with its
logs in a directory of the test's. ``stop()`` ends every group it started (workers first, so that
each takes its executors down with it), by process group id, whatever state the test left them in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.peers.ports import LOOPBACK, free_port, wait_until


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def loopback_env() -> dict[str, str]:
    """Spark's daemons and drivers bound to loopback (the master's REST submission server, on a fixed
    port, off); executors run this interpreter (which has the project installed)."""
    return dict(
        os.environ,
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        PYSPARK_PYTHON=sys.executable,
        SPARK_HOME=str(spark_home()),
    )


@dataclass
class StandaloneCluster:
    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1536m"
    port: int = field(default_factory=free_port)
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                         "--port", str(self.port), "--webui-port", str(free_port()))  # fmt: skip
            wait_until(lambda: "I have been elected leader" in self._alive("master"), timeout, "the master")
            for n in range(1, self.workers + 1):
                self._worker(n)
            for n in range(1, self.workers + 1):
                name = f"worker-{n}"
                wait_until(lambda name=name: "Successfully registered with master" in self._alive(name),
                           timeout, f"{name} to register")  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def _worker(self, n: int) -> None:
        ports = ["--port", str(free_port()), "--webui-port", str(free_port())]
        size = [
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(self.root / f"work-{n}"),
        ]
        self._daemon(
            f"worker-{n}",
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            "--host",
            LOOPBACK,
            *ports,
            *size,
        )

    def _daemon(self, name: str, main: str, *args: str) -> None:
        with open(self.root / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main, *args],
                stdout=log, stderr=subprocess.STDOUT, env=loopback_env(), start_new_session=True,
            )  # fmt: skip
        self.procs.append((name, proc))

    def _alive(self, name: str) -> str:
        proc = dict(self.procs)[name]
        if proc.poll() is not None:
            raise RuntimeError(f"spark {name} exited with {proc.returncode}:\n{self.log(name)[-3000:]}")
        return self.log(name)

    def stop(self) -> None:
        """SIGTERM to each group, workers first, then SIGKILL to what is left after a grace period."""
        for _name, proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            _signal_group(proc, signal.SIGKILL)  # the group: executors a worker did not end
            proc.wait(timeout=10)
        self.procs.clear()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(proc.pid, sig)  # its own group: start_new_session made its pid the group id
