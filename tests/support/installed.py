"""The `amqp-mirror` command as a user has it: installed into a virtual environment, run as a process.

Two kinds: the repository's own `.venv` (an editable install, with the compiled hot path when built), and
fresh environments made here with `pip install .` or `pip install '.[spark]'`, as from a wheel.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

from tests.peers.ports import LOOPBACK, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installation:
    bin: Path  # the environment's bin directory

    @property
    def command(self) -> Path:
        return self.bin / "amqp-mirror"

    def run(
        self, *args: str, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.command), *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=clean_env(env),
        )

    def start(self, *args: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                [str(self.command), *args], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=clean_env(None)
            )


def clean_env(extra: dict[str, str] | None) -> dict[str, str]:
    """The user's environment: no PYTHONPATH pointing into the repository (the install must stand alone),
    nor the test runs' switch of the compiled hot path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMQP_MIRROR_COMPILED")}
    env.update(extra or {})
    return env


def repository_env() -> Installation:
    return Installation(Path(sys.executable).parent)


def fresh_env(home: Path, extras: str = "") -> Installation:
    """A new virtual environment with the project installed from the repository, as a user installs it."""
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    target = f"{REPO}[{extras}]" if extras else str(REPO)
    subprocess.run(
        # --no-compile: modules are byte-compiled as they are imported instead (a third of the time of
        # installing pyspark went to compiling all of it)
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", target],
        check=True,
        capture_output=True,
        timeout=900,
        # these environments test the commands, not the build: the compile (minutes on two cores) is
        # tested once, in test_wheel.py
        env=clean_env({"AMQP_MIRROR_BUILD_COMPILED": "0"}),
    )
    return Installation(home / "bin")


BROKER_XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name>
  <security-enabled>false</security-enabled>
  <journal-directory>{data}/journal</journal-directory>
  <acceptors><acceptor name="amqp">tcp://{host}:{port}?protocols=AMQP</acceptor></acceptors>
  {extra}
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
</core></configuration>
"""


def broker_xml(path: Path, name: str, data: Path, extra: str = "") -> int:
    """Write a broker.xml on a free port; returns the port."""
    port = free_port()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BROKER_XML.format(name=name, data=data, host=LOOPBACK, port=port, extra=extra))
    return port


def wait_listening(process: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the broker exited with {process.returncode}:\n{log.read_text()}")
        return "listening on" in log.read_text()

    wait_until(ready, timeout, "the installed broker to listen")


def stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
    return process.returncode
