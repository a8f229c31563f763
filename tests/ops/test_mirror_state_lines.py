"""A mirror whose target is gone falls behind, and says so once; when the target is back and has
everything, one line says it caught up. Metrics say the same meanwhile."""

from __future__ import annotations

import re
from pathlib import Path

from tests.peers.ports import free_port, wait_until
from tests.support.client import send
from tests.support.ops import metered, mirror_xml


def test_falling_behind_and_catching_up_are_one_line_each(tmp_path: Path) -> None:
    p1, p2 = free_port(), free_port()
    dc1 = metered(tmp_path, "dc1", p1, mirror_xml("DC2", p2))
    text = dc1.broker.write_config().read_text()
    dc1.broker.config_path.write_text(
        text.replace(
            '<property key="queues"',
            '<property key="mirror-behind-seconds" value="1"/><property key="queues"',
        )
    )
    dc2 = metered(tmp_path, "dc2", p2)
    dc1.broker.start()
    try:
        send(dc1.broker.url, "orders", [f"m{i}" for i in range(5)])  # DC2 is not there: they wait
        wait_until(lambda: "AMQ951002" in dc1.broker.log(), 20, "the falling-behind line")
        [(pending, link)] = re.findall(
            r"AMQ951002: mirror DC2 of dc1 is falling behind: (\d+) events pending, "
            r"the oldest [\d.]+ s old \(link (\w+)\)",
            dc1.broker.log(),
        )
        assert int(pending) >= 5 and link == "down"  # the five sends, after the topology events
        assert dc1.value("amqp_mirror_mirror_oldest_pending_age_seconds", mirror="DC2") > 1
        assert dc1.value("amqp_mirror_broker_connection_up", connection="DC2") == 0
        assert (
            dc1.value("amqp_mirror_broker_connection_attempts_total", connection="DC2", result="failure") >= 1
        )

        dc2.broker.start()
        wait_until(lambda: "AMQ951001" in dc1.broker.log(), 20, "the caught-up line")
        assert "AMQ951001: mirror DC2 of dc1 caught up: 0 events pending" in dc1.broker.log()
        assert dc1.broker.log().count("AMQ951002") == 1  # said once, not at every look
        assert dc1.value("amqp_mirror_mirror_pending_events", mirror="DC2") == 0
    finally:
        dc1.broker.stop()
        dc2.broker.stop()
