"""The operator's commands (`amqp-mirror queue|browse|produce|consume|user`), each run as a process against
a live broker with security on, with exact counts; and the management operations they stand on where a
command alone cannot show them (pause across a restart, a browse that acquires nothing, paged messages).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message, Timeout

from connections.cli import Management
from tests.support.broker import BrokerProcess
from tests.support.client import connect, receive

REPO = Path(__file__).resolve().parents[2]
ADMIN = ["--user", "admin", "--password", "secret"]
ADDRESSES = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'


def cli(
    broker: BrokerProcess, *args: str, stdin: str | None = None, auth: bool = True
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "amqp_mirror", *args, "--url", broker.url, *(ADMIN if auth else [])]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=env, input=stdin, cwd=broker.home
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    return result.stdout


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(result))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("commands"), xml_kwargs={"security": True, "addresses": ADDRESSES}
    )
    yield b.start()
    b.stop()


def mgmt(broker: BrokerProcess) -> Management:
    return Management(broker.url, user="admin", password="secret")


def depth(broker: BrokerProcess, queue: str) -> int:
    with mgmt(broker) as m:
        return int(m.get("messageCount", resource=f"queue.{queue}"))


def test_produce_stat_list_browse_consume_with_exact_counts(broker: BrokerProcess) -> None:
    sent = as_json(
        cli(
            broker,
            "produce",
            "orders",
            "--count",
            "7",
            "--property",
            "color=red",
            "--property",
            "n=3",
            "--json",
        )
    )
    assert sent["sent"] == 7
    stats = as_json(cli(broker, "queue", "stat", "orders", "--json"))
    assert [(s["name"], s["messageCount"], s["messagesAdded"], s["consumerCount"]) for s in stats] == [
        ("orders", 7, 7, 0)
    ]
    table = ok(cli(broker, "queue", "stat", "orders")).splitlines()
    assert table[0].split() == [
        "NAME",
        "ADDRESS",
        "CONSUMER_COUNT",
        "MESSAGE_COUNT",
        "MESSAGES_ADDED",
        "DELIVERING_COUNT",
        "MESSAGES_ACKED",
        "SCHEDULED_COUNT",
        "ROUTING_TYPE",
    ]
    assert table[1].split() == ["orders", "orders", "0", "7", "7", "0", "0", "0", "ANYCAST"]
    listed = {q["name"]: q for q in as_json(cli(broker, "queue", "list", "--json"))}
    assert listed["orders"]["messageCount"] == 7 and not any(
        n.count("-") == 4 for n in listed
    )  # no temporary

    browsed = as_json(cli(broker, "browse", "orders", "--count", "3", "--json"))
    assert browsed["messageCount"] == 7
    assert [m["text"] for m in browsed["messages"]] == ["message 1", "message 2", "message 3"]
    assert browsed["messages"][0]["StringProperties"] == {"applicationProperties.color": "red"}
    assert browsed["messages"][0]["LongProperties"] == {"applicationProperties.n": 3}
    text = ok(cli(broker, "browse", "orders", "--count", "2", "--page", "2")).splitlines()
    assert (
        text[0].endswith('"message 3" color="red" n=3')
        and text[-1] == "2 of 7 messages in orders shown (page 2)"
    )
    # browsing acquired nothing: every message is still there, never delivered
    with mgmt(broker) as m:
        stats = m.call("getStatistics", [], resource="queue.orders")
    assert (stats["message-count"], stats["delivering-count"], stats["messages-acknowledged"]) == (7, 0, 0)

    got = cli(broker, "consume", "orders", "--count", "4", "--json")
    lines = [json.loads(line) for line in ok(got).splitlines()]
    assert [m["body"] for m in lines[:-1]] == ["message 1", "message 2", "message 3", "message 4"]
    assert lines[0]["properties"] == {"color": "red", "n": 3} and lines[-1]["received"] == 4
    assert depth(broker, "orders") == 3
    rest = ok(cli(broker, "consume", "orders", "--count", "0", "--timeout", "1", "--quiet"))
    assert rest == "3 messages received from orders and acknowledged\n"
    assert depth(broker, "orders") == 0


def test_produce_from_a_file_at_a_rate_non_durable(broker: BrokerProcess, tmp_path: Path) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(b"\x00\x01 payload")
    result = as_json(
        cli(
            broker,
            "produce",
            "orders",
            "--count",
            "5",
            "--file",
            str(body),
            "--rate",
            "20",
            "--no-durable",
            "--json",
        )
    )
    assert result["sent"] == 5 and result["seconds"] >= 0.19  # five at 20 a second: 0.2 s at least
    browsed = as_json(cli(broker, "browse", "orders", "--count", "10", "--json"))["messages"]
    assert len(browsed) == 5 and {m["durable"] for m in browsed} == {False}
    assert {m["text"] for m in browsed} == {"\\x00\\x01 payload"} and {m["type"] for m in browsed} == {4}
    from_stdin = as_json(cli(broker, "produce", "orders", "--file", "-", "--json", stdin="from stdin"))
    assert from_stdin["sent"] == 1
    assert ok(cli(broker, "queue", "purge", "orders")) == "queue orders: 6 messages removed\n"


def test_queue_create_move_purge_delete(broker: BrokerProcess) -> None:
    made = as_json(cli(broker, "queue", "create", "work", "--address", "jobs", "--json"))
    assert (made["name"], made["address"], made["routing-type"], made["durable"]) == (
        "work",
        "jobs",
        "ANYCAST",
        True,
    )
    again = cli(broker, "queue", "create", "work", "--address", "jobs")
    assert again.returncode == 1
    assert again.stderr == "error: createQueue failed: AMQ229019: Queue work already exists on address jobs\n"
    ok(cli(broker, "produce", "orders", "--count", "10"))
    moved = as_json(cli(broker, "queue", "move", "orders", "--to", "work", "--count", "4", "--json"))
    assert moved == {"queue": "orders", "to": "work", "moved": 4}
    assert (depth(broker, "orders"), depth(broker, "work")) == (6, 4)
    assert [
        m.body for m in receive(broker.url, "jobs::work", 1, user="admin", password="secret", accept=None)
    ] == ["message 1"]  # the oldest moved first, received as an ordinary message (then released back)
    assert ok(cli(broker, "queue", "purge", "orders")) == "queue orders: 6 messages removed\n"
    assert depth(broker, "orders") == 0
    with connect(broker.url, "admin", "secret") as conn:
        conn.create_receiver("jobs::work")  # a consumer: delete is refused without --remove-consumers
        refused = cli(broker, "queue", "delete", "work")
        assert refused.returncode == 1 and "has 1 consumers" in refused.stderr
        ok(cli(broker, "queue", "delete", "work", "--remove-consumers", "--auto-delete-address"))
    with mgmt(broker) as m:
        assert "work" not in m.call("getQueueNames", []) and "jobs" not in m.call("getAddressNames", [])
    missing = cli(broker, "queue", "delete", "work")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == "error: destroyQueue failed: AMQ229017: Queue work does not exist\n"
    log = broker.log()
    for line in (
        "AMQ951067: queue work on address jobs (ANYCAST) created by management (user admin)",
        "AMQ951062: queue orders: 4 messages moved to queue work by management (user admin)",
        "AMQ951061: queue orders: 6 messages removed by management (user admin)",
        "AMQ951065: queue work destroyed by management (user admin)",
    ):
        assert line in log


def test_user_add_list_passwd_remove_edit_the_files_and_reload(broker: BrokerProcess) -> None:
    etc = broker.config_path.parent
    users = etc / "artemis-users.properties"
    users.write_text("# the broker's users\n" + users.read_text())
    users.chmod(0o640)
    added = cli(
        broker,
        "user",
        "add",
        "carol",
        "--role",
        "producers,amq",
        "--new-password-file",
        "-",
        stdin="first-secret\n",
    )
    assert ok(added) == "user carol added (producers,amq); the broker reloaded its users\n"
    line = next(x for x in users.read_text().splitlines() if x.startswith("carol"))
    assert line.startswith("carol = ENC(1024:") and "first-secret" not in users.read_text()
    assert users.read_text().startswith("# the broker's users\nadmin = secret\n")  # the rest kept as it was
    assert stat.S_IMODE(users.stat().st_mode) == 0o640
    assert "producers = alice,carol" in (etc / "artemis-roles.properties").read_text()
    listed = as_json(cli(broker, "user", "list", "carol", "--json"))
    assert listed == [{"username": "carol", "roles": ["amq", "producers"]}]
    send_as = ["--user", "carol", "--password", "first-secret"]
    assert as_json(cli(broker, "produce", "orders", "--json", *send_as, auth=False))["sent"] == 1

    ok(cli(broker, "user", "passwd", "carol", "--new-password-file", "-", stdin="second-secret\n"))
    refused = cli(broker, "produce", "orders", *send_as, auth=False)
    assert refused.returncode == 1 and "authentication failed" in refused.stderr
    ok(cli(broker, "produce", "orders", "--user", "carol", "--password", "second-secret", auth=False))

    ok(cli(broker, "user", "remove", "carol"))
    assert "carol" not in users.read_text() and "carol" not in (etc / "artemis-roles.properties").read_text()
    gone = cli(broker, "produce", "orders", "--user", "carol", "--password", "second-secret", auth=False)
    assert gone.returncode == 1
    no_tty = cli(broker, "user", "add", "dave", "--role", "amq")
    assert no_tty.returncode == 1 and "--new-password-file" in no_tty.stderr
    ok(cli(broker, "queue", "purge", "orders"))
    everything = broker.log() + added.stdout + added.stderr
    assert "first-secret" not in everything and "second-secret" not in everything
    assert "AMQ951068: user carol added by management (user admin), roles producers,amq" in broker.log()


def test_commands_need_the_manage_permission(broker: BrokerProcess) -> None:
    """alice may send but not manage: a command says so in one line, and nothing happens."""
    denied = cli(
        broker, "queue", "purge", "orders", "--user", "alice", "--password", "wonderland", auth=False
    )
    assert denied.returncode == 1 and denied.stderr.count("\n") == 1 and "not allowed" in denied.stderr


def _nothing_delivered(receiver: Any, window: float = 1.0) -> bool:
    """Nothing arrives over `window` seconds."""
    try:
        receiver.receive(timeout=window)
    except Timeout:
        return True
    return False


def test_pause_holds_deliveries_and_a_persisted_pause_outlives_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b", xml_kwargs={"addresses": ADDRESSES}).start()
    try:
        with Management(b.url) as m:
            m.call("pause", [True], resource="queue.orders")
        with connect(b.url) as conn:
            conn.create_sender("orders").send(Message(body="held", durable=True))
            assert _nothing_delivered(conn.create_receiver("orders", credit=10)), "a paused queue delivered"
        assert "AMQ951063: queue orders paused by management until resumed, across restarts" in b.log()
        b.stop()
        b.start()
        with Management(b.url) as m:
            assert m.get("paused", resource="queue.orders") is True
            assert m.get("messageCount", resource="queue.orders") == 1
        with connect(b.url) as conn:
            receiver = conn.create_receiver("orders", credit=10)
            assert _nothing_delivered(receiver), "the pause did not outlive the restart"
            with Management(b.url) as m:
                m.call("resume", [], resource="queue.orders")
            assert receiver.receive(timeout=5).body == "held"
            receiver.accept()
        b.stop()
        b.start()  # resumed for good: the journal says so too
        with Management(b.url) as m:
            assert m.get("paused", resource="queue.orders") is False
    finally:
        b.stop()


def test_purge_and_move_reach_paged_messages(tmp_path: Path) -> None:
    settings = """
      <address-setting match="orders">
        <max-size-bytes>20000</max-size-bytes>
        <page-size-bytes>10000</page-size-bytes>
        <address-full-policy>PAGE</address-full-policy>
      </address-setting>"""
    addresses = ADDRESSES + '<address name="spare"><anycast><queue name="spare"/></anycast></address>'
    b = BrokerProcess(
        tmp_path / "b", xml_kwargs={"addresses": addresses, "address_settings": settings}
    ).start()
    try:
        with connect(b.url) as conn:
            sender = conn.create_sender("orders")
            for i in range(300):
                sender.send(Message(body=f"{i:04d}" + "x" * 500, durable=True))
        with Management(b.url) as m:
            assert m.get("paging", resource="address.orders") is True
            assert m.call("getStatistics", [], resource="queue.orders")["paged-count"] > 0
            assert m.call("moveMessages", [500, "", "spare", False, 250], resource="queue.orders") == 250
            assert m.call("removeAllMessages", [], resource="queue.orders") == 50
            assert (
                m.get("messageCount", resource="queue.orders"),
                m.get("messageCount", resource="queue.spare"),
            ) == (0, 250)
        first = receive(b.url, "spare", 250, timeout=5)
        assert [m.body[:4] for m in first] == [f"{i:04d}" for i in range(250)]  # in order, none lost
    finally:
        b.stop()


def test_a_connection_refused_is_one_line(tmp_path: Path) -> None:
    dead = BrokerProcess(tmp_path)
    result = cli(dead, "queue", "list")
    assert result.returncode == 1 and result.stdout == ""
    assert (
        result.stderr.startswith(f"error: {dead.url}: connection refused") and result.stderr.count("\n") == 1
    )
