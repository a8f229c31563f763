"""The initial copy of a replicated pair, held at a chosen packet by a relay between the backup and its
primary (tests/support/ha.py `Relay.pause_when`): a primary that dies before the copy is complete leaves
a backup that never activates on it; an address that pages is copied page for page, a page consumed
while the copy is under way goes on the backup too, and a failover drains what is left exactly once."""

from __future__ import annotations

from pathlib import Path

from broker_core.ha.replication_wire import PAGE, SYNCHRONIZED
from connections.cli import Management
from tests.peers.ports import wait_until
from tests.peers.zookeeper import Ensemble
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send
from tests.support.ha import Relay, packet_of_type, replicated_pair, stays

PAGED = (
    '<address-setting match="paged"><max-size-bytes>20000</max-size-bytes>'
    "<page-size-bytes>8000</page-size-bytes><address-full-policy>PAGE</address-full-policy></address-setting>"
)


def status(broker: BrokerProcess) -> dict:  # type: ignore[type-arg]
    with Management(broker.url) as management:
        return dict(management.call("getHAStatus", []))


def through_relay(backup: BrokerProcess, primary: BrokerProcess) -> Relay:
    """The backup's connector to its primary goes through a relay of the test's."""
    relay = Relay(primary.port)
    backup.write_config()
    text = backup.config_path.read_text()
    backup.config_path.write_text(text.replace(f"127.0.0.1:{primary.port}<", f"127.0.0.1:{relay.port}<"))
    return relay


def pages(broker: BrokerProcess) -> dict[str, bytes]:
    root = broker.home / "data" / "paging"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.page"))}


def test_a_primary_that_dies_during_the_copy_leaves_a_backup_that_never_activates(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "c1")
    primary.start()
    assert send(primary.url, "orders", [f"m{i}" for i in range(200)]) == 200
    with through_relay(backup, primary) as relay:
        relay.pause_when(packet_of_type(SYNCHRONIZED))  # all of the copy but its last word
        backup.start()
        assert relay.paused.wait(30), "the copy never reached its end"
        primary.kill()
        stays(lambda: "AMQ221010" in backup.log(), 4, "a backup activating on a partial copy")  # session 2 s
        assert "AMQ221024" not in backup.log()
        relay.resume()
        primary.start()  # its own journal, in sync: it activates as it was, and the backup copies again
        wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to copy again")
    assert [m.body for m in receive(primary.url, "orders", 300, timeout=2)] == [f"m{i}" for i in range(200)]
    primary.stop()
    backup.stop()


def test_an_address_that_pages_is_copied_page_for_page_and_drained_once_after_failover(
    tmp_path: Path, zookeeper: Ensemble
) -> None:
    primary, backup = replicated_pair(tmp_path, zookeeper.connect_string, "c2")
    for broker in (primary, backup):  # the paged address and its limits, beside the defaults
        broker.xml_kwargs["addresses"] += (
            '<address name="paged"><anycast><queue name="paged"/></anycast></address>'
        )
        broker.write_config()
        text = broker.config_path.read_text()
        broker.config_path.write_text(text.replace("<address-settings>", "<address-settings>" + PAGED, 1))
    primary.start()
    bodies = [f"p{i:04d}-" + "x" * 1000 for i in range(120)]
    assert send(primary.url, "paged", bodies) == 120
    before = pages(primary)
    assert len(before) >= 4, before.keys()  # it pages
    relay = through_relay(backup, primary)  # open until the failover: the stream runs through it
    try:
        relay.pause_when(packet_of_type(PAGE))  # the journal copied, its pages not yet
        backup.start()
        assert relay.paused.wait(30), "the copy never reached the pages"
        taken = [m.body for m in receive(primary.url, "paged", 40, timeout=5)]  # a page or more done with
        assert taken == bodies[:40]
        wait_until(lambda: not set(pages(primary)) >= set(before), 10, "a page to be removed on the primary")
        relay.resume()
        wait_until(lambda: status(primary)["synchronized"] is True, 30, "the backup to synchronize")
        assert send(primary.url, "paged", ["after"]) == 1  # confirmed: on the backup too
        wait_until(lambda: pages(backup) == pages(primary), 10, "the page files to be equal on the backup")
        assert set(before) - set(pages(backup)), "the page consumed during the copy is still on the backup"
        primary.kill()
        wait_until(lambda: "AMQ221010" in backup.log(), 30, "the backup to take over")
    finally:
        relay.close()
    rest = [m.body for m in receive(backup.url, "paged", 200, timeout=3)]
    assert rest == [*bodies[40:], "after"]  # each once, in order, nothing consumed before
    backup.stop()
