"""listBrokerConnections (and everything else that shows a broker connection's URI) never shows a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connections.outbound import redacted
from tests.support.pair import Network


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("tcp://h:1", "tcp://h:1"),
        (
            "tcp://h:1?sslEnabled=true;trustStorePassword=hunter2",
            "tcp://h:1?sslEnabled=true;trustStorePassword=*****",
        ),
        ("tcp://h:1?password=p&x=1", "tcp://h:1?password=*****&x=1"),
        (
            "(tcp://a:1?keyStorePassword=p,tcp://b:2?PASSWORD=q)",
            "(tcp://a:1?keyStorePassword=*****,tcp://b:2?PASSWORD=*****)",
        ),
    ],
)
def test_every_password_parameter_is_masked(uri: str, shown: str) -> None:
    assert redacted(uri) == shown


def test_management_lists_connections_without_their_secrets(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1", mirror_to="dc2")
    broker = net.start("dc1")
    assert broker.connections is not None
    [connection] = broker.connections.connections.values()
    connection.config = connection.config.model_copy(
        update={"uri": connection.config.uri + "?trustStorePassword=s3cr3t"}
    )
    listed = json.loads(broker.management.invoke("broker", "listBrokerConnections", []))
    assert "s3cr3t" not in json.dumps(listed) and listed[0]["uri"].endswith("trustStorePassword=*****")
