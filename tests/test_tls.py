"""A TLS acceptor (`sslEnabled=true;sslCertPath=...;sslKeyPath=...`) with a certificate made at test time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import ConnectionException, Message, SSLDomain
from proton.utils import BlockingConnection

from tests.conftest import require
from tests.peers.ports import AMQP_HEADER, LOOPBACK, SASL_HEADER, wait_until
from tests.support.broker import REPO, BrokerProcess
from tests.support.certs import HOSTNAME, CertFiles, make_certs
from tests.support.client import send
from tests.support.raw_amqp import RawPeer


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    directory = tmp_path_factory.mktemp("certs")
    files = make_certs(directory)
    require("a certificate generator", files is not None, "neither the cryptography package nor openssl")
    assert files is not None
    return files


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: CertFiles) -> Iterator[BrokerProcess]:
    params = f"sslEnabled=true;sslCertPath={certs.cert};sslKeyPath={certs.key}"
    b = BrokerProcess(
        tmp_path_factory.mktemp("tls"),
        xml_kwargs={
            "acceptor_params": params,
            "addresses": '<address name="orders"><anycast><queue name="orders"/></anycast></address>',
        },
    )
    b.start()
    yield b
    assert b.stop() == 0
    assert "Traceback" not in b.log()


def _tls_url(broker: BrokerProcess) -> str:
    return f"amqps://{LOOPBACK}:{broker.port}"


def _domain(ca: Path | None, mode: int) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    if ca is not None:
        domain.set_trusted_ca_db(str(ca))
    domain.set_peer_authentication(mode)
    return domain


def _round_trip(url: str, domain: SSLDomain, body: str, virtual_host: str | None = None) -> str:
    conn = BlockingConnection(
        url, ssl_domain=domain, allowed_mechs="ANONYMOUS", timeout=10, virtual_host=virtual_host
    )
    try:
        conn.create_sender("orders").send(Message(body=body, durable=True))
        receiver = conn.create_receiver("orders", credit=1)
        msg = receiver.receive(timeout=10)
        receiver.accept()
        return str(msg.body)
    finally:
        conn.close()


def test_acceptor_says_it_serves_tls(broker: BrokerProcess) -> None:
    assert "(TLS)" in broker.log()


def test_client_trusting_the_certificate_sends_and_receives(broker: BrokerProcess, certs: CertFiles) -> None:
    domain = _domain(certs.cert, SSLDomain.VERIFY_PEER)
    assert _round_trip(_tls_url(broker), domain, "over tls") == "over tls"


def test_client_verifying_the_host_name_connects(broker: BrokerProcess, certs: CertFiles) -> None:
    domain = _domain(certs.cert, SSLDomain.VERIFY_PEER_NAME)
    url = f"amqps://{HOSTNAME}:{broker.port}"
    assert _round_trip(url, domain, "name checked", virtual_host=HOSTNAME) == "name checked"


def test_client_not_trusting_the_certificate_is_refused(broker: BrokerProcess, tmp_path: Path) -> None:
    stranger = make_certs(tmp_path)
    assert stranger is not None
    with pytest.raises(ConnectionException):
        _round_trip(_tls_url(broker), _domain(stranger.cert, SSLDomain.VERIFY_PEER), "never")
    assert _round_trip(_tls_url(broker), _domain(None, SSLDomain.ANONYMOUS_PEER), "still up") == "still up"


def test_plain_tcp_client_fails_cleanly_and_the_broker_keeps_serving(
    broker: BrokerProcess, certs: CertFiles
) -> None:
    with RawPeer(LOOPBACK, broker.port, timeout=10) as peer:
        peer.send(SASL_HEADER)
        peer.wait_closed()
        assert peer.headers == []  # no AMQP spoken in clear text
        assert AMQP_HEADER not in peer.buffer and SASL_HEADER not in peer.buffer
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://{LOOPBACK}:{broker.port}", allowed_mechs="ANONYMOUS", timeout=5)
    domain = _domain(certs.cert, SSLDomain.VERIFY_PEER)
    assert _round_trip(_tls_url(broker), domain, "after garbage") == "after garbage"


# ------------------------------------------------------------------------------- bad TLS settings


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "amqp_mirror", *args]
    return subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=30)


def _bad_tls_broker(home: Path, params: str) -> Path:
    return BrokerProcess(home, xml_kwargs={"acceptor_params": params}).write_config()


def test_tls_without_a_certificate_is_a_config_error(tmp_path: Path) -> None:
    config = _bad_tls_broker(tmp_path, "sslEnabled=true")
    result = _cli(tmp_path, "check-config", str(config))
    assert result.returncode != 0
    assert re.search(rf"{re.escape(config.name)}:\d+: .*sslCertPath", result.stderr), result.stderr


def test_run_with_a_missing_certificate_file_says_so_without_a_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "cert.pem"
    config = _bad_tls_broker(tmp_path, f"sslEnabled=true;sslCertPath={missing};sslKeyPath={missing}")
    result = _cli(tmp_path, "run", "--config", str(config))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert str(missing) in output
    assert "Traceback" not in output


# ------------------------------------------------------------------------------------ mutual TLS


def test_need_client_auth_admits_only_clients_with_a_trusted_certificate(
    tmp_path: Path, certs: CertFiles
) -> None:
    client = make_certs(tmp_path)
    assert client is not None
    params = f"sslEnabled=true;sslCertPath={certs.cert};sslKeyPath={certs.key}"
    params += f";needClientAuth=true;sslCaPath={client.cert}"
    b = BrokerProcess(
        tmp_path / "mtls",
        xml_kwargs={
            "acceptor_params": params,
            "addresses": '<address name="orders"><anycast><queue name="orders"/></anycast></address>',
        },
    )
    b.start()
    try:
        without_cert = _domain(certs.cert, SSLDomain.VERIFY_PEER)
        with pytest.raises(ConnectionException):
            _round_trip(_tls_url(b), without_cert, "no certificate")

        with_cert = _domain(certs.cert, SSLDomain.VERIFY_PEER)
        with_cert.set_credentials(str(client.cert), str(client.key), None)
        assert _round_trip(_tls_url(b), with_cert, "mutual") == "mutual"
    finally:
        assert b.stop() == 0


def test_broker_connection_to_a_tls_remote_verifies_it_and_forwards(
    broker: BrokerProcess, certs: CertFiles, tmp_path: Path
) -> None:
    uri = f"tcp://{HOSTNAME}:{broker.port}?sslEnabled=true;trustStorePath={certs.cert}"
    near = BrokerProcess(
        tmp_path / "near",
        xml_kwargs={
            "addresses": '<address name="orders"><anycast><queue name="orders"/></anycast></address>',
            "extra": f'<broker-connections><amqp-connection uri="{uri}" name="tls" retry-interval="200">'
            '<sender address-match="orders"/></amqp-connection></broker-connections>',
        },
    )
    near.start()
    try:
        wait_until(lambda: "AMQ111003" in near.log(), 20, "the TLS broker connection to come up")
        send(near.url, "orders", ["over-tls"])
        assert _round_trip_receive(broker, certs) == "over-tls"
    finally:
        assert near.stop() == 0


def test_broker_connection_refuses_a_remote_it_cannot_verify(broker: BrokerProcess, tmp_path: Path) -> None:
    uri = f"tcp://{HOSTNAME}:{broker.port}?sslEnabled=true"  # no trust store: the self-signed cert fails
    near = BrokerProcess(
        tmp_path / "near",
        xml_kwargs={
            "extra": f'<broker-connections><amqp-connection uri="{uri}" name="tls" retry-interval="200">'
            '<sender address-match="orders"/></amqp-connection></broker-connections>'
        },
    )
    near.start()
    try:
        wait_until(lambda: "AMQ111002" in near.log(), 20, "the connection attempt to fail and be retried")
        assert "CERTIFICATE_VERIFY_FAILED" in near.log() or "certificate verify failed" in near.log()
    finally:
        assert near.stop() == 0


def _round_trip_receive(broker: BrokerProcess, certs: CertFiles) -> str:
    conn = BlockingConnection(
        _tls_url(broker),
        ssl_domain=_domain(certs.cert, SSLDomain.VERIFY_PEER),
        allowed_mechs="ANONYMOUS",
        timeout=10,
    )
    try:
        receiver = conn.create_receiver("orders", credit=1)
        msg = receiver.receive(timeout=10)
        receiver.accept()
        return str(msg.body)
    finally:
        conn.close()
