"""Scale-down in the forms test_scale_down.py leaves out: a queue deep in its pages (the messages read
back from the page files and moved, in order, none left in them), and a *replicated* backup that scales
down instead of activating when its primary is killed (its copy of the journal, received over
replication, is what moves)."""

from __future__ import annotations

from pathlib import Path

from tests.ha.test_scale_down import ORDERS, server
from tests.peers import zookeeper as zookeeper_peer
from tests.peers.ports import LOOPBACK, wait_until
from tests.support.client import receive, send
from tests.support.ha import replicated_servers

PAGED = 400  # messages: with the limits below, most of them only in page files
PAGING = """<address-setting match="orders">
  <max-size-bytes>20000</max-size-bytes>
  <page-size-bytes>10000</page-size-bytes>
  <max-read-page-messages>20</max-read-page-messages>
</address-setting>"""
PADDING = "x" * 300


def bodies(url: str, address: str, count: int) -> list[object]:
    return [m.body for m in receive(url, address, count, timeout=1)]


def test_a_paged_queue_moves_whole_and_in_order(tmp_path: Path) -> None:
    target = server(tmp_path, "target", group="g1", addresses=ORDERS).start()
    source = server(tmp_path, "source", group="g1", scale_to=(target.port,), addresses=ORDERS)
    source.xml_kwargs["address_settings"] = PAGING
    source.start()
    sent = [f"{i:04d}{PADDING}" for i in range(PAGED)]
    send(source.url, "orders", sent)
    pages = source.home / "data" / "paging"
    assert any(pages.rglob("*.page")), "the queue did not page: the test would prove nothing"
    assert source.stop() == 0, source.log()
    log = source.log()
    assert f"scaled queue orders (ANYCAST, address orders) down: {PAGED} messages moved" in log, log
    assert bodies(target.url, "orders", PAGED + 10) == sent
    # nothing is left behind: started again (no member needed, nothing to move), it holds no message
    source.start()
    assert bodies(source.url, "orders", 10) == []
    assert source.stop() == 0
    assert target.stop() == 0


def test_a_replicated_backup_with_scale_down_moves_its_copy_instead_of_activating(
    tmp_path: Path, zookeeper: zookeeper_peer.Ensemble
) -> None:
    target = server(tmp_path, "target", group="g1", addresses=ORDERS).start()
    scale = (
        "<scale-down><group-name>g1</group-name><connectors><connector-ref>m0</connector-ref></connectors>"
    )
    scale += "</scale-down>"
    primary, backup = replicated_servers(
        tmp_path,
        zookeeper.connect_string,
        "scale-down",
        [("primary", "primary", ""), ("backup", "backup", scale)],
    )
    member = f'<connector name="m0">tcp://{LOOPBACK}:{target.port}</connector>'
    for broker in (primary, backup):
        broker.write_config()
        text = broker.config_path.read_text().replace(
            '<connector name="self">', member + '<connector name="self">'
        )
        broker.config_path.write_text(text)
    primary.start()
    backup.start()
    wait_until(lambda: "AMQ221024" in backup.log(), 30, "the backup to synchronize")
    send(primary.url, "orders", list(range(60)))  # confirmed: on the backup's copy too
    primary.kill()
    wait_until(lambda: backup.proc is not None and backup.proc.poll() is not None, 60, "the backup to stop")
    log = backup.log()
    assert backup.proc is not None and backup.proc.returncode == 0, log
    assert "AMQ951164" in log and "60 messages moved" in log, log
    assert "AMQ221010" not in log  # it never served
    assert bodies(target.url, "orders", 100) == list(range(60))
    assert target.stop() == 0
