"""SIGHUP applies new address settings (to existing addresses too) and a new broker connection while
the broker runs; a file with an error changes nothing and says why."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.peers.ports import wait_until
from tests.support.broker import BrokerProcess
from tests.support.client import receive, send, send_all

ADDRESSES = (
    '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
    '<address name="outbound"><anycast><queue name="outbound"/></anycast></address>'
)
CAPPED = """
      <address-setting match="orders">
        <max-size-messages>2</max-size-messages>
        <address-full-policy>FAIL</address-full-policy>
      </address-setting>"""


def _hup(b: BrokerProcess, expect: str) -> None:
    assert b.proc is not None
    before = b.log().count("AMQ9510")
    b.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: b.log().count("AMQ9510") > before, 10, "the reload's log line")
    assert expect in b.log(), b.log()[-2000:]


def test_reload_applies_address_settings_and_broker_connections(tmp_path: Path) -> None:
    far = BrokerProcess(tmp_path / "far", name="far", xml_kwargs={"addresses": ADDRESSES})
    near = BrokerProcess(tmp_path / "near", name="near", xml_kwargs={"addresses": ADDRESSES})
    far.start()
    near.start()
    try:
        assert set(send_all(near.url, "orders", ["a", "b", "c"]).values()) == {"accepted"}
        assert len(receive(near.url, "orders", 3)) == 3

        config = near.config_path
        original = config.read_text()
        link = (
            f'<broker-connections><amqp-connection uri="tcp://127.0.0.1:{far.port}" name="toFar" '
            'retry-interval="200"><sender address-match="outbound"/></amqp-connection></broker-connections>'
        )
        config.write_text(
            original.replace("<address-settings>", "<address-settings>" + CAPPED).replace(
                "<acceptors>", link + "<acceptors>"
            )
        )
        _hup(near, "AMQ951011: near: reloaded: address-settings, broker connections (toFar added)")

        outcomes = send_all(near.url, "orders", ["1", "2", "3"])  # the existing address is capped now
        assert sorted(outcomes.values()) == ["accepted", "accepted", "rejected:amqp:resource-limit-exceeded"]
        wait_until(
            lambda: "AMQ111003: Connected on Server AMQP Connection toFar" in near.log(), 20, "toFar up"
        )
        send(near.url, "outbound", ["over the new link"])
        assert [m.body for m in receive(far.url, "outbound", 1)] == ["over the new link"]

        config.write_text(original.replace("<max-delivery-attempts>3", "<max-delivery-attempts>x"))
        _hup(near, "AMQ951013: near: reload failed: broker.xml: 1 problem; nothing changed")
        outcomes = send_all(near.url, "orders", ["4"])  # still capped: nothing of the bad file applied
        assert list(outcomes.values()) == ["rejected:amqp:resource-limit-exceeded"]
    finally:
        near.stop()
        far.stop()


def test_sigusr2_writes_every_thread_stack_and_the_broker_serves_on(tmp_path: Path) -> None:
    """What an operator attaches to a report of a broker that hangs: the stacks of all its threads."""
    b = BrokerProcess(tmp_path / "b", name="b", xml_kwargs={"addresses": ADDRESSES})
    b.start()
    try:
        assert b.proc is not None
        b.proc.send_signal(signal.SIGUSR2)
        wait_until(lambda: "most recent call first" in b.log(), 10, "the stacks on stderr")
        assert "Thread 0x" in b.log() and "runtime.py" in b.log(), b.log()[-2000:]
        assert set(send_all(b.url, "orders", ["after"]).values()) == {"accepted"}
        assert [m.body for m in receive(b.url, "orders", 1)] == ["after"]
    finally:
        b.stop()
