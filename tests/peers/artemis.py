"""Apache ActiveMQ Artemis, the reference broker, as a process: one instance directory per broker.

`scripts/install-deps` unpacks Artemis's own distribution (pinned version, SHA-512 checked) into
``$AMQP_MIRROR_CACHE`` (default ``~/.cache/amqp-mirror``). An instance here is what ``artemis create``
makes, written directly (no JVM start for ``create``): ``etc/bootstrap.xml`` naming ``etc/broker.xml``,
a console-only logging file, a login module that lets anonymous clients in as a guest, and the broker.xml
the test gives, the same file format (often the very same text) our broker reads. The JVM is started the
way ``bin/artemis run`` starts it, in its own session, with a small heap (the machine is shared); its PID
is the broker's, so SIGKILL is a real crash of Artemis.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.peers.ports import LOOPBACK, free_port, wait_until
from tests.peers.procs import start_session, stop_session

ARTEMIS_VERSION = "2.40.0"
HEAP = "512m"

# Artemis's log ids we wait on: the server is active, a broker connection connected.
SERVER_ACTIVE = "AMQ221007"
CONNECTED = "AMQ111003"


def cache_dir() -> Path:
    explicit = os.environ.get("AMQP_MIRROR_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "amqp-mirror"


def artemis_home() -> Path:
    return cache_dir() / f"apache-artemis-{ARTEMIS_VERSION}"


def java_command() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def availability() -> tuple[bool, str]:
    """Whether an Artemis broker can be started here, and why not."""
    if java_command() is None:
        return False, "Java is not installed (Debian: apt-get install openjdk-17-jre-headless)"
    home = artemis_home()
    if not (home / ".sha512-verified").exists() or not (home / "lib" / "artemis-boot.jar").exists():
        return False, f"Artemis {ARTEMIS_VERSION} is not unpacked in {home} (run scripts/install-deps)"
    return True, ""


BOOTSTRAP = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<broker xmlns="http://activemq.apache.org/schema">
   <jaas-security domain="activemq"/>
   <server configuration="{config_uri}"/>
</broker>
"""

LOGIN_CONFIG = """activemq {
   org.apache.activemq.artemis.spi.core.security.jaas.PropertiesLoginModule sufficient
       reload=false
       org.apache.activemq.jaas.properties.user="artemis-users.properties"
       org.apache.activemq.jaas.properties.role="artemis-roles.properties";
   org.apache.activemq.artemis.spi.core.security.jaas.GuestLoginModule sufficient
       org.apache.activemq.jaas.guest.user="guest"
       org.apache.activemq.jaas.guest.role="amq";
};
"""

# JMX is not used here (management goes over AMQP), but `run` insists on the file.
MANAGEMENT = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<management-context xmlns="http://activemq.apache.org/schema"/>
"""

LOGGING = """rootLogger.level = INFO
rootLogger.appenderRef.console.ref = console
logger.jetty.name = org.eclipse.jetty
logger.jetty.level = WARN
logger.audit.name = org.apache.activemq.audit
logger.audit.level = OFF
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %-5level [%logger] %msg%n
"""


@dataclass(eq=False)
class ArtemisProcess:
    """One Artemis instance in ``home``; ``start()`` (again after ``kill()`` or ``stop()``: same data)."""

    home: Path
    config: str  # the broker.xml text
    port: int = field(default_factory=free_port)
    heap: str = HEAP
    users: str = "admin = secret\n"
    roles: str = "amq = admin\n"
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    extra_jvm: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"amqp://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.home / "log" / f"artemis-{self.starts}.out"

    def write_instance(self) -> None:
        etc = self.home / "etc"
        for sub in ("etc", "data", "log", "tmp"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        (etc / "broker.xml").write_text(self.config)
        (etc / "bootstrap.xml").write_text(BOOTSTRAP.format(config_uri=(etc / "broker.xml").as_uri()))
        (etc / "login.config").write_text(LOGIN_CONFIG)
        (etc / "log4j2.properties").write_text(LOGGING)
        (etc / "management.xml").write_text(MANAGEMENT)
        (etc / "artemis-users.properties").write_text(self.users)
        (etc / "artemis-roles.properties").write_text(self.roles)

    def argv(self) -> list[str]:
        java, home, etc = java_command(), artemis_home(), self.home / "etc"
        assert java is not None
        return [
            java,
            f"-Xms{self.heap}",  # a fixed heap, as Artemis's own artemis.profile starts it (-Xms512M)
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:AutoBoxCacheMax=20000",
            f"-Dlog4j2.configurationFile={(etc / 'log4j2.properties').as_uri()}",
            "-Dlog4j2.disableJmx=true",
            f"-Djava.security.auth.login.config={etc / 'login.config'}",
            "--add-opens",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
            *self.extra_jvm,
            "-classpath",
            str(home / "lib" / "artemis-boot.jar"),
            f"-Dartemis.home={home}",
            f"-Dartemis.instance={self.home}",
            f"-Djava.library.path={home / 'bin' / 'lib' / f'linux-{os.uname().machine}'}",
            f"-Djava.io.tmpdir={self.home / 'tmp'}",
            f"-Ddata.dir={self.home / 'data'}",
            f"-Dartemis.instance.etc={etc}",
            "org.apache.activemq.artemis.boot.Artemis",
            "run",
        ]

    def start(self, timeout: float = 60.0, *, wait_active: bool = True) -> ArtemisProcess:
        ok, why = availability()
        if not ok:
            raise RuntimeError(why)
        if not (self.home / "etc" / "broker.xml").exists():
            self.write_instance()
        self.starts += 1
        self.proc = start_session(self.argv(), self.log_path, cwd=self.home)
        RUNNING.add(self)
        if wait_active:
            self.wait_for(SERVER_ACTIVE, timeout, "to become active")
        return self

    def log(self) -> str:
        path = self.log_path
        return path.read_text(errors="replace") if path.exists() else ""

    def all_logs(self) -> str:
        return "".join(
            (self.home / "log" / f"artemis-{n}.out").read_text(errors="replace")
            for n in range(1, self.starts + 1)
            if (self.home / "log" / f"artemis-{n}.out").exists()
        )

    def wait_for(self, text: str, timeout: float, what: str = "") -> None:
        def seen() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"Artemis exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            return text in self.log()

        wait_until(seen, timeout, f"Artemis in {self.home} {what or 'to log ' + text}")

    def kill(self) -> None:
        """SIGKILL the JVM (a crash): nothing is flushed, nothing is shut down."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        RUNNING.discard(self)

    def stop(self) -> None:
        """SIGTERM (Artemis's shutdown hook stops the server), SIGKILL after a grace period."""
        if self.proc is not None:
            stop_session(self.proc, grace=30)
        RUNNING.discard(self)

    def management(self) -> Any:
        from connections.cli import Management

        return Management(self.url)

    def attribute(self, resource: str, name: str) -> Any:
        """An attribute over AMQP management, e.g. (``queue.orders``, ``messageCount``)."""
        with self.management() as m:
            return m.get(name, resource=resource)

    def call(self, operation: str, params: list[Any], resource: str = "broker") -> Any:
        with self.management() as m:
            return m.call(operation, params, resource=resource)

    def node_id(self) -> str:
        """The broker's node id (``getNodeID``): the id its mirror events carry."""
        return str(self.attribute("broker", "nodeID"))

    def _data_tool(self, command: str, *args: str) -> list[str]:
        """The command line of ``artemis data <command>`` on this instance's data directory."""
        java, home, data = java_command(), artemis_home(), self.home / "data"
        assert java is not None
        return [
            java, f"-Xmx{self.heap}", "-classpath", str(home / "lib" / "artemis-boot.jar"),
            f"-Dartemis.home={home}", f"-Dartemis.instance={self.home}",
            f"-Dartemis.instance.etc={self.home / 'etc'}",
            f"-Dlog4j2.configurationFile={(self.home / 'etc' / 'log4j2.properties').as_uri()}",
            "org.apache.activemq.artemis.boot.Artemis", "data", command, *args,
            f"--journal={data / 'journal'}", f"--bindings={data / 'bindings'}", f"--paging={data / 'paging'}",
        ]  # fmt: skip

    def print_journal(self, timeout: float = 120.0) -> str:
        """``artemis data print`` of this (stopped or killed) instance: every journal record, as text."""
        argv = self._data_tool("print")
        done = subprocess.run(argv, cwd=self.home, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"artemis data print exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done.stdout

    def export(self, out: Path, timeout: float = 120.0) -> Path:
        """``artemis data exp`` of this (stopped or killed) instance's data directory into ``out``, as
        an operator runs it: Artemis's own tool, its own JVM."""
        large = f"--large-messages={self.home / 'data' / 'large-messages'}"
        argv = self._data_tool("exp", f"--output={out}", large)
        done = subprocess.run(argv, cwd=self.home, capture_output=True, text=True, timeout=timeout)
        # Artemis's tool exits 0 even when it stopped half way with an exception (it prints the trace)
        if done.returncode != 0 or not out.exists() or "Exception" in done.stdout + done.stderr:
            output = done.stdout[-3000:] + done.stderr[-3000:]
            raise RuntimeError(f"artemis data exp exited {done.returncode}:\n{output}")
        return out


RUNNING: set[ArtemisProcess] = set()
