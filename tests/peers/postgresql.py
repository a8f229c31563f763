"""A private PostgreSQL server (Debian's `postgresql` package) for the PostgreSQL lock manager's tests:
a cluster made with initdb in a directory of the test's own, listening on a free loopback port (and its
socket in that directory), trust authentication, run as the `postgres` system user when the tests run
as root (the server refuses root). Stopped (SIGSTOP) and resumed by its PID, or stopped and started."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.peers.ports import LOOPBACK, free_port, wait_until

BIN = Path("/usr/lib/postgresql")


def _bin() -> Path | None:
    versions = sorted(BIN.glob("*/bin/initdb")) if BIN.is_dir() else []
    return versions[-1].parent if versions else None


def availability() -> tuple[bool, str]:
    if _bin() is None:
        return False, "PostgreSQL is not installed (Debian: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return False, "running as root needs the postgres system user (Debian's postgresql makes it)"
    return True, ""


def _become_owner() -> None:
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.setgid(owner.pw_gid)
        os.setuid(owner.pw_uid)


@dataclass
class PostgreSQL:
    home: Path
    port: int
    host: str = LOOPBACK
    prefix: tuple[str, ...] = ()  # what it runs under (`ip netns exec NS`)
    process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"host={self.host} port={self.port} dbname=postgres user=postgres"

    def _as_owner(self) -> tuple[str, ...]:
        return ("runuser", "-u", "postgres", "--") if os.geteuid() == 0 else ()

    def init(self) -> None:
        data = self.home / "data"
        self.home.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.home, "postgres", "postgres")
        bin_dir = _bin()
        assert bin_dir is not None
        subprocess.run(
            [*self._as_owner(), str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        if self.host != LOOPBACK:  # initdb trusts loopback only: a server on a host of its own trusts its net
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")

    def start(self) -> None:
        bin_dir = _bin()
        assert bin_dir is not None
        log = (self.home / "out.log").open("ab")
        # the server itself is the process (and its group, with its backends): what pause() stops
        self.process = subprocess.Popen(
            [*self.prefix, str(bin_dir / "postgres"), "-D", str(self.home / "data"),
             "-h", self.host, "-p", str(self.port), "-k", str(self.home), "-c", "fsync=off"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_become_owner,
        )  # fmt: skip
        log.close()
        wait_until(self.ready, 60, "PostgreSQL to accept connections")

    def ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.connect_string, connect_timeout=1):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGCONT)
            os.killpg(process.pid, signal.SIGINT)  # fast shutdown
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def pause(self) -> None:
        """SIGSTOP the server and every backend (each backend is a process group of its own)."""
        for pid in self._processes():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self._processes():
            os.kill(pid, signal.SIGCONT)

    def _processes(self) -> list[int]:
        assert self.process is not None
        server = self.process.pid
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == server:
                children.append(int(stat.parent.name))
        return [server, *children]


@contextmanager
def running_postgresql(host: str = LOOPBACK, prefix: tuple[str, ...] = ()) -> Iterator[PostgreSQL]:
    """A server in a directory of its own under the system's temporary directory (pytest's are private
    to root: the postgres user could not reach one), removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="amqp-mirror-pg-"))
    server = PostgreSQL(home, free_port(), host, prefix)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
