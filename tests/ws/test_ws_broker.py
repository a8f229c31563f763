"""AMQP over WebSocket and HTTP upgrades against our broker as a process: what connects, what is refused
and said, and that the bytes arrive whole.

One broker, four acceptors: `amqp` (plain: AMQP and WebSocket), `http` (an HTTP upgrade endpoint,
httpUpgradeEnabled=true, handshake-timeout=1), `tls` (TLS: wss), `small` (webSocketMaxFramePayloadLength
1024). Raw requests and frames come from tests/support/websocket.py (written from RFC 6455 by hand);
AMQP clients are the failover client (proton, through its bridge) and plain proton.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from proton import ConnectionException, Message

from connections.failover import FailoverConnection, ReconnectExhaustedError
from tests.conftest import require
from tests.peers.ports import LOOPBACK, free_port, wait_until
from tests.support.broker import BrokerProcess
from tests.support.certs import HOSTNAME, CertFiles, make_certs
from tests.support.client import connect, receive, send
from tests.support.websocket import accept_for, masked_frame, read_frame, request, websocket_request

QUEUES = "".join(
    f'<address name="{q}"><anycast><queue name="{q}"/></anycast></address>' for q in ("q", "big", "t")
)


class Ports:
    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.amqp = broker.port
        self.http = free_port()
        self.tls = free_port()
        self.small = free_port()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    files = make_certs(tmp_path_factory.mktemp("certs"))
    require("a certificate generator", files is not None, "neither the cryptography package nor openssl")
    assert files is not None
    return files


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory, certs: CertFiles) -> Iterator[Ports]:
    broker = BrokerProcess(tmp_path_factory.mktemp("ws"), name="main")
    ports = Ports(broker)
    tls = f"sslEnabled=true;sslCertPath={certs.cert};sslKeyPath={certs.key}"
    broker.xml_kwargs = {
        "addresses": QUEUES,
        "extra_acceptors": f"""
      <acceptor name="http">tcp://{LOOPBACK}:{ports.http}?httpUpgradeEnabled=true;handshake-timeout=1</acceptor>
      <acceptor name="tls">tcp://{LOOPBACK}:{ports.tls}?{tls}</acceptor>
      <acceptor name="small">tcp://{LOOPBACK}:{ports.small}?webSocketMaxFramePayloadLength=1024</acceptor>""",
    }
    broker.start()
    yield ports
    assert broker.stop() == 0
    assert "Traceback" not in broker.log()


def log_says(ports: Ports, text: str) -> None:
    wait_until(lambda: text in ports.broker.log(), 10, f"the broker's log to say {text!r}")


# ------------------------------------------------------------------------------------------ AMQP on it


def test_a_websocket_client_and_a_plain_one_share_the_port_and_the_queue(ports: Ports) -> None:
    with FailoverConnection(f"ws://{LOOPBACK}:{ports.amqp}/any/path") as conn:
        sender = conn.sender("q")
        for i in range(20):
            sender.send(Message(body=f"over websocket {i}"))
    bodies = [m.body for m in receive(f"amqp://{LOOPBACK}:{ports.amqp}", "q", 20)]
    assert bodies == [f"over websocket {i}" for i in range(20)]
    send(f"amqp://{LOOPBACK}:{ports.amqp}", "q", ["over tcp"])
    with FailoverConnection(f"amqpws://{LOOPBACK}:{ports.amqp}") as conn:
        receiver = conn.receiver("q")
        assert receiver.receive(timeout=10).body == "over tcp"
        receiver.accept()


def test_a_large_message_crosses_in_many_frames_both_ways(ports: Ports) -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: many AMQP frames, each cut into WebSocket frames
    # to the upgrade-only acceptor: a client that skipped the upgrade would be closed, not pass unframed
    with FailoverConnection(f"ws://{LOOPBACK}:{ports.http}") as conn:
        conn.sender("big").send(Message(body=body))
        receiver = conn.receiver("big")
        got = receiver.receive(timeout=20)
        receiver.accept()
    assert got.body == body


def test_wss_is_websocket_over_the_tls_acceptor(ports: Ports, certs: CertFiles) -> None:
    trust = f"transport.trustStoreLocation={certs.cert}"
    with FailoverConnection(f"wss://{HOSTNAME}:{ports.tls}?{trust}") as conn:
        conn.sender("t").send(Message(body="over wss"))
    with FailoverConnection(f"wss://{HOSTNAME}:{ports.tls}?{trust}") as conn:
        receiver = conn.receiver("t")
        assert receiver.receive(timeout=10).body == "over wss"
        receiver.accept()
    with pytest.raises(ReconnectExhaustedError, match="CERTIFICATE_VERIFY_FAILED"):
        FailoverConnection(f"wss://{HOSTNAME}:{ports.tls}")  # not trusted: refused, not sent in plaintext


def test_an_http_upgrade_endpoint_takes_upgrades_only(ports: Ports) -> None:
    url = f"tcp://{LOOPBACK}:{ports.http}?httpUpgradeEnabled=true&activemqServerName=main"
    with FailoverConnection(url) as conn:  # Artemis's activemq-remoting upgrade, then AMQP as it is
        conn.sender("q").send(Message(body="through activemq-remoting"))
    with FailoverConnection(f"ws://{LOOPBACK}:{ports.http}?httpUpgradeEndpoint=http") as conn:
        receiver = conn.receiver("q")
        assert receiver.receive(timeout=10).body == "through activemq-remoting"
        receiver.accept()
    with pytest.raises(ConnectionException), connect(f"amqp://{LOOPBACK}:{ports.http}", timeout=5):
        pass
    log_says(ports, "AMQ951121: acceptor http: closed 127.0.0.1:")


# ------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("acceptor", "extra", "status", "line"),
    [
        (
            "amqp",
            {"activemqServerName": "nobody"},
            404,
            "no server named nobody in this process (server: main)",
        ),
        ("amqp", {"httpUpgradeEndpoint": "elsewhere"}, 404, "no HTTP upgrade endpoint elsewhere here"),
        ("amqp", {"Sec-WebSocket-Protocol": "mqtt"}, 400, "WebSocket subprotocols mqtt offered"),
        ("http", {"Sec-WebSocket-Version": "8"}, 426, "speaks version 13"),
    ],
)
def test_an_upgrade_no_server_here_can_take_is_refused_saying_why(
    ports: Ports, acceptor: str, extra: dict[str, str], status: int, line: str
) -> None:
    port = getattr(ports, acceptor)
    data = websocket_request(LOOPBACK, port, **extra)
    if "Sec-WebSocket-Version" in extra:  # the header given replaces the one the request has
        data = data.replace(b"Sec-WebSocket-Version: 13\r\n", b"", 1)
    answer = request(LOOPBACK, port, data)
    assert answer.status == status
    assert line in answer.body.decode()
    assert answer.sock.recv(1) == b""  # and the connection is closed
    answer.close()
    log_says(ports, f"AMQ951120: acceptor {acceptor}: HTTP request from 127.0.0.1:")
    log_says(ports, line)


def test_artemis_remoting_upgrade_on_a_plain_acceptor_is_forbidden_as_artemis_answers(ports: Ports) -> None:
    data = (
        b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: activemq-remoting\r\nConnection: Upgrade\r\n"
        b"Sec-ActiveMQRemoting-Key: a2V5\r\n\r\n"
    )
    answer = request(LOOPBACK, ports.amqp, data)
    assert answer.status == 403
    assert "httpUpgradeEnabled=true" in answer.body.decode()
    answer.close()
    with pytest.raises(
        ReconnectExhaustedError, match="HTTP 403 Forbidden: acceptor amqp is not an HTTP upgrade"
    ):
        FailoverConnection(f"tcp://{LOOPBACK}:{ports.amqp}?httpUpgradeEnabled=true")


def test_a_browser_opening_the_port_is_told_what_it_is(ports: Ports) -> None:
    answer = request(LOOPBACK, ports.amqp, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    assert (answer.status, answer.headers["upgrade"]) == (426, "websocket")
    assert "this is an AMQP acceptor" in answer.body.decode()
    answer.close()


# ------------------------------------------------------------------------------------------ framing


def upgraded(port: int) -> tuple[socket.socket, bytearray]:
    key = "x3JJHMbDL1EzLkh9GBhXDw=="
    answer = request(
        LOOPBACK, port, websocket_request(LOOPBACK, port, key=key, Sec_WebSocket_Protocol="amqp")
    )
    assert answer.status == 101
    assert answer.headers["sec-websocket-accept"] == accept_for(key)
    assert answer.headers["sec-websocket-protocol"] == "amqp"
    return answer.sock, bytearray(answer.rest)


def test_the_amqp_header_comes_back_in_a_binary_frame_and_a_ping_is_answered(ports: Ports) -> None:
    sock, buffered = upgraded(ports.amqp)
    sock.sendall(masked_frame(0x9, b"still there?"))
    assert read_frame(sock, buffered) == (0xA, b"still there?")
    sock.sendall(masked_frame(0x2, b"AM") + masked_frame(0x2, b"QP\x03\x01\x00\x00"))  # split anywhere
    opcode, payload = read_frame(sock, buffered)
    assert opcode == 0x2 and payload.startswith(b"AMQP\x03\x01\x00\x00")  # SASL header, then mechanisms
    sock.sendall(masked_frame(0x8, struct.pack("!H", 1000)))
    while (frame := read_frame(sock, buffered))[0] != 0x8:
        pass
    assert frame == (0x8, struct.pack("!H", 1000))  # the close answered with its code
    assert sock.recv(1) == b""
    sock.close()


@pytest.mark.parametrize(
    ("port_name", "frame", "code", "why"),
    [
        (
            "amqp",
            masked_frame(0x2, b"AMQP\x00\x01\x00\x00", mask=False),
            1002,
            "a client must mask every frame",
        ),
        ("amqp", masked_frame(0x1, b"AMQP"), 1003, "a text frame"),
        (
            "small",
            masked_frame(0x2, b"x" * 1025),
            1009,
            "a frame of 1025 bytes, over webSocketMaxFramePayloadLength",
        ),
    ],
)
def test_a_framing_violation_closes_with_its_code_and_a_log_line(
    ports: Ports, port_name: str, frame: bytes, code: int, why: str
) -> None:
    sock, buffered = upgraded(getattr(ports, port_name))
    sock.sendall(frame)
    opcode, payload = read_frame(sock, buffered)
    assert (opcode, struct.unpack("!H", payload[:2])[0]) == (0x8, code)
    assert why in payload[2:].decode()
    assert sock.recv(1) == b""
    sock.close()
    log_says(ports, "AMQ951122: WebSocket connection 127.0.0.1:")
    log_says(ports, why)


def test_a_connection_that_says_nothing_is_closed_after_the_handshake_timeout(ports: Ports) -> None:
    sock = socket.create_connection((LOOPBACK, ports.http), timeout=10)
    sock.sendall(b"GET / HTTP/1.1\r\n")  # and nothing more
    assert sock.recv(1) == b""  # closed by the broker (handshake-timeout=1), well before our 10 s
    sock.close()
    log_says(
        ports, 'AMQ224088: Timeout (1 seconds) on acceptor "http" during protocol handshake with 127.0.0.1:'
    )
