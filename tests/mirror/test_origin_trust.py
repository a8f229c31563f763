"""Origin trust (a hardening beyond Artemis, docs/mirror.md): a mirror link speaks for its remote, for us in
a dual mirror's acknowledgements, and for other brokers only where `mirrorTrustedOrigins` says so.

On whole brokers joined in memory (tests/support/pair.py); tests/mirror/test_hardening_wire.py checks the
same over real sockets against a broker process.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from broker_core.config import ConfigError, load_config
from broker_core.message import build_message
from broker_core.vocabulary import AckReason
from mirror import wire
from mirror.target import UntrustedOrigin
from mirror.trust import OriginTrust
from tests.support.pair import Network

DC1, DC2, DC3 = (str(uuid.UUID(int=n)) for n in (1, 2, 3))


@pytest.fixture
def net(tmp_path: Path) -> Network:
    return Network(tmp_path)


def chain(net: Network, dc3_trusts: str = "") -> None:
    """DC1 -> DC2 -> DC3: DC2 forwards what it applies from DC1 to DC3, naming DC1 as its origin."""
    net.broker("dc1", mirror_to="dc2", node_id=DC1)
    net.broker("dc2", mirror_to="dc3", node_id=DC2)
    params = f"mirrorTrustedOrigins={dc3_trusts}" if dc3_trusts else ""
    net.broker("dc3", node_id=DC3, acceptor_params=params)
    net.start_all()


def stats(net: Network, name: str) -> dict[str, int]:
    target = net.brokers[name].mirror_target
    assert target is not None
    return dict(target.stats)


def test_the_rules(tmp_path: Path) -> None:
    mirrored = OriginTrust("R", "N", (), mirrors_to=lambda remote: remote == "R")
    assert mirrored.allows("R", False) and mirrored.allows("R", True)
    assert mirrored.allows("N", True), "a dual mirror's remote acknowledges our messages"
    assert not mirrored.allows("N", False), "a message never comes back to its origin"
    assert not mirrored.allows("O", False) and not mirrored.allows("O", True)
    stranger = OriginTrust("R", "N", (), mirrors_to=lambda remote: False)
    assert not stranger.allows("N", True), "only a broker we mirror to acknowledges our messages"
    pairs = (("R", "O"), ("X", "P"), ("*", "Q"))
    configured = OriginTrust("R", "N", pairs, mirrors_to=lambda remote: False)
    assert configured.allows("O", False) and configured.allows("Q", True)
    assert not configured.allows("P", False), "P is trusted from X only"
    anything = OriginTrust("R", "N", (("R", "*"),), mirrors_to=lambda remote: False)
    assert anything.allows("Z", False) and anything.allows("N", True) and not anything.allows("N", False)


def test_the_acceptor_parameter_is_read_and_checked(tmp_path: Path) -> None:
    def load(value: str) -> object:
        path = tmp_path / "broker.xml"
        path.write_text(
            '<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">'
            "<security-enabled>false</security-enabled><acceptors>"
            f'<acceptor name="a">tcp://127.0.0.1:5672?protocols=AMQP;mirrorTrustedOrigins={value}</acceptor>'
            "</acceptors></core></configuration>"
        )
        config, warnings = load_config(path)
        assert warnings == []  # a parameter this broker reads: no "unknown parameter" warning
        return config.acceptors[0].mirror_trusted_origins

    assert load(f"{DC2}:{DC1},*:{DC3}") == ((DC2, DC1), ("*", DC3))
    with pytest.raises(ConfigError, match="'dc1' is not a REMOTE:ORIGIN pair"):
        load("dc1")


def test_a_chain_is_refused_where_nothing_allows_it_and_nothing_is_lost(
    net: Network, caplog: pytest.LogCaptureFixture
) -> None:
    chain(net)
    c1, c2 = net.client("dc1"), net.client("dc2")
    c2.send("orders", "from dc2")
    net.pump()
    assert net.depth("dc3", "orders") == 1  # DC2's own messages are DC2's to send
    with caplog.at_level(logging.WARNING, logger="broker.mirror"):
        c1.send("orders", "from dc1")
        net.pump()
        net.loop.advance(1.0)  # the source reconnects every 100 ms; each attempt is refused again
    assert net.depth("dc2", "orders") == 2 and net.depth("dc3", "orders") == 1
    assert net.depth("dc2", wire.snf_name("dc3")) >= 1, "DC2 keeps what DC3 refused"
    assert stats(net, "dc3")["untrusted"] > 1 and stats(net, "dc3")["messages"] == 1
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("MIR101")]
    assert len(refusals) == 1, "said once a minute, not on every attempt"
    assert f"from broker {DC2} closed" in refusals[0] and f"of origin {DC1}" in refusals[0]
    assert f"mirrorTrustedOrigins={DC2}:{DC1}" in refusals[0]


def test_a_configured_chain_carries_messages_and_acknowledgements(net: Network) -> None:
    chain(net, dc3_trusts=f"{DC2}:{DC1}")
    c1 = net.client("dc1")
    c1.send("orders", "first")
    c1.send("orders", "second")
    net.pump()
    assert (net.depth("dc2", "orders"), net.depth("dc3", "orders")) == (2, 2)
    assert len(c1.receive("orders", 1)) == 1  # consumed on DC1: the ack travels DC1 -> DC2 -> DC3
    assert (net.depth("dc2", "orders"), net.depth("dc3", "orders")) == (1, 1)
    assert stats(net, "dc3")["untrusted"] == 0 and stats(net, "dc3")["acks"] == 1


def test_a_dual_mirror_needs_no_configuration(net: Network) -> None:
    """DC2 acknowledges DC1's messages with origin DC1, DC1's own id: trusted because DC1 mirrors to DC2."""
    net.broker("dc1", mirror_to="dc2", node_id=DC1)
    net.broker("dc2", mirror_to="dc1", node_id=DC2)
    net.start_all()
    c1, c2 = net.client("dc1"), net.client("dc2")
    c1.send("orders", "made on dc1")
    net.pump()
    assert len(c2.receive("orders", 1)) == 1
    assert (net.depth("dc1", "orders"), net.depth("dc2", "orders")) == (0, 0)
    assert stats(net, "dc1")["acks"] == 1 and stats(net, "dc1")["untrusted"] == 0


def test_an_event_of_an_untrusted_origin_is_refused_before_anything_is_applied(net: Network) -> None:
    net.broker("dc2", node_id=DC2)
    net.start_all()
    target = net.brokers["dc2"].mirror_target
    assert target is not None
    trust = OriginTrust(DC1, DC2, (), mirrors_to=lambda remote: False)
    forged = wire.replicate(build_message("forged", durable=True), 2**62, DC3, "orders")
    with pytest.raises(UntrustedOrigin, match=f"broker {DC1} may not send message {2**62} of origin {DC3}"):
        target.apply(DC1, forged, trust)
    assert DC3 not in target.dedup, "the forged id reached DC3's duplicate detection"
    ours = wire.replicate(build_message("ours?", durable=True), 5, DC2, "orders")
    with pytest.raises(UntrustedOrigin):
        target.apply(DC1, ours, trust)  # a message claiming to be our own
    ack = wire.post_ack_event("orders", "orders", 1, DC2, AckReason.NORMAL)
    with pytest.raises(UntrustedOrigin, match="an acknowledgement of message 1 of origin"):
        target.apply(DC1, ack, trust)  # we do not mirror to DC1: it has none of our messages
    target.apply(DC1, wire.replicate(build_message("fine", durable=True), 7, None, "orders"), trust)
    net.pump()
    assert net.depth("dc2", "orders") == 1 and target.stats["untrusted"] == 3
