"""rhea (the Node.js AMQP 1.0 client) as a foreign client: run ``tests/node/send.js`` / ``receive.js``.

Both scripts print one JSON line with their counts; ``receive.js`` also reports latency percentiles
from the ``sent_at_ms`` application property that ``send.js`` stamps on every message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.peers.ports import wait_until

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def availability() -> tuple[bool, str]:
    if shutil.which("node") is None:
        return False, "Node.js is not installed (Debian: apt-get install nodejs npm)"
    if not (NODE_DIR / "node_modules" / "rhea").is_dir():
        return False, f"rhea is not installed (run: npm ci in {NODE_DIR})"
    return True, ""


@dataclass
class RheaRun:
    """A running send.js / receive.js process; ``result()`` waits for it and parses its JSON line."""

    process: subprocess.Popen[str]
    ready_file: Path | None = None
    argv: list[str] = field(default_factory=list)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """For receivers: block until the receiving link is attached."""
        if self.ready_file is None:
            return
        ready_file = self.ready_file

        def attached() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.argv} exited before attaching: {self.result()}")
            return ready_file.exists()

        wait_until(attached, timeout, f"rhea receiver {self.argv} to attach")

    def result(self, timeout: float = 120.0) -> dict[str, Any]:
        stdout, stderr = self.process.communicate(timeout=timeout)
        lines = stdout.strip().splitlines()
        if not lines:
            raise RuntimeError(f"{self.argv} printed nothing (exit {self.process.returncode}): {stderr}")
        parsed: dict[str, Any] = json.loads(lines[-1])
        parsed["exit_code"] = self.process.returncode
        return parsed

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass(frozen=True)
class Rhea:
    """Starts rhea clients. Options mirror the scripts' flags (see tests/node/*.js)."""

    node: str = "node"

    def start_send(
        self,
        url: str,
        address: str,
        count: int,
        *,
        size: int = 1024,
        durable: bool = False,
        rate: float = 0,
        user: str = "",
        password: str = "",
        timeout: float = 60,
        priorities: bool = False,
    ) -> RheaRun:
        """`priorities`: header priorities cycling 0-9 (else none: the default 4)."""
        argv = [*self._script("send.js", url, address, count, user, password, timeout), "--size", str(size)]
        argv += ["--rate", str(rate)] + (["--durable"] if durable else [])
        argv += ["--priorities"] if priorities else []
        return RheaRun(self._spawn(argv), argv=argv)

    def start_receive(
        self,
        url: str,
        address: str,
        count: int,
        *,
        ready_file: Path,
        credit: int = 500,
        user: str = "",
        password: str = "",
        timeout: float = 60,
    ) -> RheaRun:
        argv = self._script("receive.js", url, address, count, user, password, timeout)
        argv += ["--credit", str(credit), "--ready-file", str(ready_file)]
        return RheaRun(self._spawn(argv), ready_file=ready_file, argv=argv)

    def send(self, url: str, address: str, count: int, **options: Any) -> dict[str, Any]:
        """Send and wait; returns the parsed result (``sent``, ``accepted``, ..., ``exit_code``)."""
        return self.start_send(url, address, count, **options).result()

    def _script(
        self, name: str, url: str, address: str, count: int, user: str, password: str, timeout: float
    ) -> list[str]:
        argv = [self.node, str(NODE_DIR / name), "--url", url, "--address", address, "--count", str(count)]
        argv += ["--timeout", str(timeout)]
        if user:
            argv += ["--user", user, "--password", password]
        return argv

    @staticmethod
    def _spawn(argv: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=NODE_DIR)
