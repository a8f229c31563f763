"""Failed logins in the log: once, naming the user the client claimed, summarised per (user, host).

SASL exchanges on our engine, in memory: a client connection (PLAIN, or SCRAM with `ScramClient`) against
a server connection whose SASL side is the acceptor's own `ServerSasl` over a real `Server` (security on,
users from the properties files, a cluster user). The failed-login table's clock is the test's.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from broker_core.amqp.connection import Connection
from broker_core.config import load_config
from broker_core.failed_logins import FailedLogins
from broker_core.inbound_sasl import ServerSasl, mechanisms
from broker_core.security import ScramClient
from broker_core.server import Server

BROKER_XML = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>s</name><persistence-enabled>false</persistence-enabled><security-enabled>{security}</security-enabled>
  <cluster-user>cluster</cluster-user><cluster-password>{cluster_password}</cluster-password>
</core></configuration>"""
USERS = "admin = secret\nalice = wonderland\nempty =\n"
ROLES = "amq = admin\n"
LOCAL = "127.0.0.1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_server(
    tmp_path: Path, cluster_password: str = "cluster-secret", security: bool = True
) -> tuple[Server, Clock]:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    xml = BROKER_XML.format(cluster_password=cluster_password, security=str(security).lower())
    (etc / "broker.xml").write_text(xml)
    (etc / "artemis-users.properties").write_text(USERS)
    (etc / "artemis-roles.properties").write_text(ROLES)
    config, _ = load_config(etc / "broker.xml")
    server = Server(config)
    clock = Clock()
    server.failed_logins = FailedLogins(clock=clock)
    return server, clock


class Accepting:
    """The accepting side: SASL answered by `ServerSasl`, as the acceptor's endpoint does."""

    def __init__(self, server: Server, peer: str) -> None:
        self.sasl = ServerSasl(server, peer, "amqp")
        self.conn = Connection(
            self, server=True, container_id="server", sasl_mechanisms=mechanisms(True), allow_no_sasl=False
        )

    def on_sasl_init(self, conn: Connection, mechanism: str, response: bytes | None) -> None:
        self.sasl.init(conn, mechanism, response)

    def on_sasl_response(self, conn: Connection, response: bytes) -> None:
        self.sasl.response(conn, response)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args: None
        raise AttributeError(name)


class Connecting:
    """The connecting side: PLAIN, or SCRAM-SHA-512 as our broker connections log in."""

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.mechanism, self.user, self.password = mechanism, user, password
        self.scram: ScramClient | None = None
        self.outcome: int | None = None
        self.conn = Connection(self, server=False, container_id="client")
        self.conn.start_client(sasl=True)

    def on_sasl_mechanisms(self, conn: Connection, offered: list[str]) -> None:
        if self.mechanism == "PLAIN":
            conn.sasl_init("PLAIN", f"\0{self.user}\0{self.password}".encode())
        else:
            self.scram = ScramClient(self.mechanism, self.user, self.password)
            conn.sasl_init(self.mechanism, self.scram.first())

    def on_sasl_challenge(self, conn: Connection, challenge: bytes) -> None:
        assert self.scram is not None
        conn.sasl_respond(self.scram.final(challenge))

    def on_sasl_outcome(self, conn: Connection, code: int) -> None:
        self.outcome = code

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args: None
        raise AttributeError(name)


def login(
    server: Server,
    user: str,
    password: str,
    mechanism: str = "SCRAM-SHA-512",
    port: int = 40001,
    host: str = LOCAL,
) -> int:
    """One login from `host:port`; the SASL outcome code (0: authenticated)."""
    client, accepting = Connecting(mechanism, user, password), Accepting(server, f"{host}:{port}")
    for _ in range(20):  # bytes back and forth until the client hears the outcome
        out = client.conn.take_output()
        if out:
            accepting.conn.receive(out)
        back = accepting.conn.take_output()
        if back:
            client.conn.receive(back)
        if client.outcome is not None:
            return client.outcome
        if not out and not back:
            break
    raise AssertionError("the SASL exchange did not finish")


def failure_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def test_a_wrong_cluster_password_is_one_line_naming_the_cluster_user_then_a_summary(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    server, clock = make_server(tmp_path)
    for attempt in range(5):  # a backup retrying every second or two, each from a new port
        assert login(server, "cluster", "wrong-cluster-password", port=40001 + attempt) == 1
        clock.now += 2
    assert failure_lines(logs) == [
        "AMQ951040: authentication failed for user cluster from 127.0.0.1:40001 (SCRAM-SHA-512: wrong "
        "password for the cluster user: check <cluster-password> on both servers)"
    ]
    clock.now += 60  # a minute after the line: the next failure says how many went unsaid
    logs.clear()
    assert login(server, "cluster", "wrong-cluster-password", port=40100) == 1
    assert failure_lines(logs) == [
        "AMQ951040: authentication failed for user cluster from 127.0.0.1:40100 (SCRAM-SHA-512: wrong "
        "password for the cluster user: check <cluster-password> on both servers); 4 more from that host "
        "since the last such line"
    ]
    assert server.stats.acceptor("amqp").auth_failures == 6  # counted every time
    assert "wrong-cluster-password" not in logs.text


def test_another_user_or_another_host_is_news(tmp_path: Path, logs: pytest.LogCaptureFixture) -> None:
    server, _ = make_server(tmp_path)
    login(server, "alice", "nope", mechanism="PLAIN")
    login(server, "alice", "nope", mechanism="PLAIN")  # a repeat: quiet
    login(server, "admin", "nope", mechanism="PLAIN")
    login(server, "alice", "nope", mechanism="PLAIN", host="10.0.0.9")
    assert [line.split(" (")[0] for line in failure_lines(logs)] == [
        "AMQ951040: authentication failed for user alice from 127.0.0.1:40001",
        "AMQ951040: authentication failed for user admin from 127.0.0.1:40001",
        "AMQ951040: authentication failed for user alice from 10.0.0.9:40001",
    ]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_one_failed_login_is_one_line_saying_why(
    tmp_path: Path, logs: pytest.LogCaptureFixture, mechanism: str
) -> None:
    server, _ = make_server(tmp_path)
    assert login(server, "alice", "not-her-password", mechanism) == 1
    assert login(server, "mallory", "anything", mechanism) == 1
    assert login(server, "empty", "", mechanism) == 1  # an empty password cannot log in
    assert login(server, "alice", "wonderland", mechanism) == 0
    reasons = [line.split(f"({mechanism}: ")[1] for line in failure_lines(logs)]
    assert reasons == [
        "wrong password)",
        "unknown user)",
        "the user's password is empty, and an empty password cannot log in)",
    ]
    assert "not-her-password" not in logs.text


def test_a_malformed_login_names_no_user(tmp_path: Path, logs: pytest.LogCaptureFixture) -> None:
    server, _ = make_server(tmp_path)
    accepting = Accepting(server, "127.0.0.1:40001")
    accepting.sasl.init(accepting.conn, "PLAIN", b"only-one-part")
    accepting = Accepting(server, "10.0.0.9:40002")  # another host: news (the same one would be a repeat)
    accepting.sasl.init(accepting.conn, "SCRAM-SHA-512", b"not a client-first message")
    assert failure_lines(logs) == [
        "AMQ951040: authentication failed from 127.0.0.1:40001 (PLAIN: malformed response)",
        "AMQ951040: authentication failed from 10.0.0.9:40002 (SCRAM-SHA-512: SCRAM error invalid-encoding)",
    ]


def test_an_empty_cluster_password_logs_nobody_in(tmp_path: Path) -> None:
    server, _ = make_server(tmp_path, cluster_password="")
    assert login(server, "cluster", "", "PLAIN") == 1
    assert login(server, "cluster", "", "SCRAM-SHA-512") == 1


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_with_security_off_the_cluster_user_still_needs_the_cluster_password(
    tmp_path: Path, logs: pytest.LogCaptureFixture, mechanism: str
) -> None:
    """Security off lets any other name in, whatever its password; the cluster user, which may replicate
    everything, only with the cluster password: a backup with the wrong one is refused and told so."""
    server, _ = make_server(tmp_path, security=False)
    assert login(server, "cluster", "wrong-cluster-password", mechanism) == 1
    assert login(server, "cluster", "cluster-secret", mechanism) == 0
    assert login(server, "anyone", "anything", "PLAIN") == 0
    [said] = failure_lines(logs)
    assert said.startswith("AMQ951040: authentication failed for user cluster from 127.0.0.1:40001")


def test_the_table_is_bounded_and_forgets_what_is_older_than_its_interval() -> None:
    clock = Clock()
    table = FailedLogins(interval=60, clock=clock, capacity=2)
    assert table.due("a", "h") == 0 and table.due("b", "h") == 0
    assert table.due("c", "h") is None  # full: a third name goes unsaid
    clock.now += 61
    assert table.due("c", "h") == 0  # the old pairs expired and were forgotten
    assert table.due("a", "h") == 0  # forgotten: news again
