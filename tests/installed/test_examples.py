"""The sample configurations in deploy/examples, as a user runs them with the installed command: each one
checks clean, the single broker keeps a first send for a later consumer, and the two data centres
mirror each other with their security settings as written (copied with free ports)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from connections.cli import Management
from tests.peers.ports import free_port, wait_until
from tests.support.client import receive, send
from tests.support.installed import repository_env, stop, wait_listening

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
CONFIGS = sorted(EXAMPLES.glob("*/etc/broker.xml")) + sorted(EXAMPLES.glob("*/*/etc/broker.xml"))
ADMIN = {"user": "admin", "password": "change-me-admin"}
APP = {"user": "app", "password": "change-me-app"}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(EXAMPLES).parent.parent))
def test_each_example_checks_clean(config: Path, tmp_path: Path) -> None:
    checked = repository_env().run("check-config", str(config), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    said = checked.stdout + checked.stderr
    assert said.rstrip().endswith(": 0 errors") and not re.search(
        r"^(error|warning|note)", said, flags=re.M
    ), said


def test_there_is_an_example_of_each_kind() -> None:
    kinds = {str(p.relative_to(EXAMPLES).parent.parent) for p in CONFIGS}
    assert kinds == {"single", "mirror/dc1", "mirror/dc2", "shared-store/primary", "shared-store/backup",
                     "replication/primary", "replication/backup"}  # fmt: skip


def _copy_with_free_ports(example: str, into: Path) -> dict[int, int]:
    """The example's directory copied, every port it names (5672, 5673, 9404, 9405) made a free one."""
    shutil.copytree(EXAMPLES / example, into)
    ports = {p: free_port() for p in (5672, 5673, 9404, 9405)}
    for xml in into.rglob("broker.xml"):
        text = xml.read_text()
        text = re.sub(r"127\.0\.0\.1:(567[23])\b", lambda m: f"127.0.0.1:{ports[int(m[1])]}", text)
        text = re.sub(r'value="(940[45])"', lambda m: f'value="{ports[int(m[1])]}"', text)
        xml.write_text(text)
    return ports


def test_the_single_broker_keeps_messages_for_a_later_consumer(tmp_path: Path) -> None:
    ports = _copy_with_free_ports("single", tmp_path / "single")
    installation = repository_env()
    log = tmp_path / "single.log"
    broker = installation.start("run", "--config", "single/etc/broker.xml", cwd=tmp_path, log=log)
    url = f"amqp://127.0.0.1:{ports[5672]}"
    try:
        wait_listening(broker, log)
        assert send(url, "orders", ["first"], **APP) == 1  # no consumer yet: the queue keeps it
        assert [m.body for m in receive(url, "orders", 1, **APP)] == ["first"]
    finally:
        assert stop(broker) == 0
    assert (tmp_path / "single" / "data" / "journal").is_dir()  # data beside etc/, as Artemis lays it out


def test_the_two_data_centres_mirror_each_other(tmp_path: Path) -> None:
    ports = _copy_with_free_ports("mirror", tmp_path / "mirror")
    installation = repository_env()
    brokers = {}
    try:
        for dc in ("dc1", "dc2"):
            log = tmp_path / f"{dc}.log"
            brokers[dc] = installation.start(
                "run", "--config", f"mirror/{dc}/etc/broker.xml", cwd=tmp_path, log=log
            )
            wait_listening(brokers[dc], log)
        dc1, dc2 = (f"amqp://127.0.0.1:{ports[p]}" for p in (5672, 5673))

        def depth(url: str) -> int:
            with Management(url, **ADMIN) as m:
                return int(m.get("messageCount", resource="queue.orders"))

        assert send(dc1, "orders", [f"from dc1 {i}" for i in range(5)], **APP) == 5
        assert send(dc2, "orders", ["from dc2"], **APP) == 1
        wait_until(lambda: depth(dc1) == 6 and depth(dc2) == 6, 30, "six orders on both sides")
        assert len(receive(dc2, "orders", 2, **APP)) == 2
        wait_until(lambda: depth(dc1) == 4, 30, "DC2's consumption mirrored to DC1")
        for dc in ("dc1", "dc2"):
            text = (tmp_path / f"{dc}.log").read_text()
            assert "mirror link from broker" in text and "as user mirror" in text, text
    finally:
        for process in brokers.values():
            stop(process)
