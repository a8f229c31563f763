"""A scripted AMQP 1.0 peer over real sockets, with a codec independent of ours (for conformance tests).

Every performative and message section is encoded and decoded with python-qpid-proton's `Data`, so a
bug in our codec cannot hide itself. Two roles:
- `ScriptedServer` plays a remote endpoint our broker connects out to (e.g. an Artemis mirror target);
- `ScriptedClient` plays a remote broker connecting to ours (e.g. an Artemis mirror source).

Modules, each importing only those before it: codec (proton encoding, frame vocabulary), frames (views
of received frames, sections and deliveries; `LinkReply`), connection (socket, reader thread, answers),
script (protonj2-style attach expectations), server, client.
"""

from tests.support.peer.client import AttachAnswer, SaslFailed, ScriptedClient
from tests.support.peer.codec import decode_one, encode_value, performative
from tests.support.peer.connection import PeerClosed, PeerConnection, Records
from tests.support.peer.frames import Frame, LinkReply, Section, TransferRecord, parse_frame
from tests.support.peer.script import AttachExpectation
from tests.support.peer.server import ScriptedServer

__all__ = [
    "AttachAnswer",
    "AttachExpectation",
    "Frame",
    "LinkReply",
    "PeerClosed",
    "PeerConnection",
    "Records",
    "SaslFailed",
    "ScriptedClient",
    "ScriptedServer",
    "Section",
    "TransferRecord",
    "decode_one",
    "encode_value",
    "parse_frame",
    "performative",
]
