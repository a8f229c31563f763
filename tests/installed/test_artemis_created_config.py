"""The broker.xml, users and roles files that Artemis 2.40's own `artemis create --require-login` writes
run unchanged (but for free ports on loopback): its users file has only ENC(...) hashes, and a client
logs in with the password given to `artemis create`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from proton import Message

from tests.conftest import require
from tests.peers import artemis as artemis_peer
from tests.peers.ports import free_port
from tests.support.client import Capabilities, connect, receive, send
from tests.support.installed import repository_env, stop, wait_listening


@pytest.fixture(scope="module")
def created(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An instance made by `artemis create`, its acceptors moved to free loopback ports."""
    require("Apache ActiveMQ Artemis", *artemis_peer.availability())
    instance = tmp_path_factory.mktemp("created") / "broker"
    tool = artemis_peer.artemis_home() / "bin" / "artemis"
    made = subprocess.run(
        [str(tool), "create", "--user", "admin", "--password", "admin", "--require-login", "--silent",
         "--no-web", str(instance)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    users = (instance / "etc" / "artemis-users.properties").read_text()
    assert re.search(r"^admin ?= ?ENC\(1024:[0-9A-F]+:[0-9A-F]+\)$", users, flags=re.M), users
    config = instance / "etc" / "broker.xml"
    text = re.sub(r"tcp://0\.0\.0\.0:\d+", lambda _: f"tcp://127.0.0.1:{free_port()}", config.read_text())
    config.write_text(text)
    return instance


def _amqp_port(instance: Path) -> int:
    text = (instance / "etc" / "broker.xml").read_text()
    port = re.search(r'<acceptor name="amqp">tcp://127\.0\.0\.1:(\d+)', text)
    assert port, text
    return int(port.group(1))


def test_check_config_accepts_what_artemis_create_writes(created: Path, tmp_path: Path) -> None:
    checked = repository_env().run("check-config", str(created / "etc" / "broker.xml"), cwd=tmp_path)
    said = checked.stdout + checked.stderr
    assert checked.returncode == 0, said
    assert "ENC" not in said and "not in artemis-users.properties" not in said, said


def test_a_client_logs_in_with_the_password_given_to_artemis_create(created: Path, tmp_path: Path) -> None:
    installation = repository_env()
    log = tmp_path / "created.log"
    broker = installation.start("run", "--config", str(created / "etc" / "broker.xml"), cwd=tmp_path, log=log)
    url = f"amqp://127.0.0.1:{_amqp_port(created)}"
    try:
        wait_listening(broker, log)
        with connect(url, "admin", "admin") as conn:  # a queue, asked for as Qpid JMS asks for one
            conn.create_sender("orders", options=Capabilities("queue")).send(Message(body="hello"))
        assert [m.body for m in receive(url, "orders", 1, user="admin", password="admin")] == ["hello"]
        with pytest.raises(Exception, match=r"(?i)authentication"):
            send(url, "orders", ["x"], user="admin", password="wrong")
        status = installation.run(
            "status", "--url", url, "--user", "admin", "--password", "admin", cwd=tmp_path
        )
        assert status.returncode == 0, status.stderr
        text = log.read_text()
        assert "SCRAM not" in text and "ENC: admin" in text, text  # said once: only PLAIN can check a hash
    finally:
        assert stop(broker) == 0
