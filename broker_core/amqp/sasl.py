"""SASL (AMQP 1.0 part 5.3) and the protocol headers around it, for one connection: state and frames.

The exchange, by role:
- accepting side: header `AMQP\\x03` -> we answer it with our mechanisms; the peer's init (and responses
  to our challenges) -> an outcome of ours; then a fresh `AMQP\\x00` header and the AMQP frames. A peer
  that starts with `AMQP\\x00` skips SASL where `allow_no_sasl`; any other header is answered with the
  one we want, then the socket is closed (part 2.2).
- connecting side: we send `AMQP\\x03`; the peer's mechanisms -> our init; challenges -> our responses;
  its outcome -> `AMQP\\x00` and our open.

No I/O and no policy: frames go to the connection's output list, and what the peer sent goes back to the
connection as the performative itself, for its handler to decide on.
"""

from __future__ import annotations

from typing import Any, Final

from . import errors
from .codec import decode_value
from .framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, frame
from .performatives import SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse


class Phase:
    """What the connection reads next."""

    HEADER: Final = 0
    SASL: Final = 1
    FRAMES: Final = 2


class Sasl:
    def __init__(
        self, out: list[bytes], *, server: bool, mechanisms: tuple[str, ...], allow_no_sasl: bool
    ) -> None:
        self.out = out  # the connection's output: our frames join it in order
        self.server = server
        self.mechanisms = mechanisms  # server: what we offer
        self.allow_no_sasl = allow_no_sasl
        self.used = False  # a SASL header was exchanged
        self.done = False  # SASL is over (or skipped): AMQP frames follow the next header
        self.user: str | None = None  # server: who authenticated
        self.offered: Any = None  # client: the mechanisms the server offered
        self.additional: bytes | None = None  # client: the outcome's additional data (SCRAM's proof)

    def _emit(self, body: bytes) -> None:
        self.out.append(frame(0, body, FRAME_SASL))

    # ---------------------------------------------------------------------------------- headers

    def start_client(self, sasl: bool) -> None:
        self.used = sasl
        self.out.append(SASL_HEADER if sasl else AMQP_HEADER)
        self.done = not sasl

    def on_header(self, header: bytes) -> int | None:
        """The phase after the peer's protocol header; None: refused (answered, the connection closes)."""
        if not self.server:
            expected = AMQP_HEADER if (self.done or not self.used) else SASL_HEADER
            if header != expected:
                raise errors.ProtocolError(errors.FRAMING_ERROR, f"peer answered protocol header {header!r}")
            return Phase.FRAMES if expected == AMQP_HEADER else Phase.SASL
        if header == SASL_HEADER and not self.done:
            self.used = True
            self.out.append(SASL_HEADER)
            self._emit(SaslMechanisms(sasl_server_mechanisms=list(self.mechanisms)).encode_amqp())
            return Phase.SASL
        if header == AMQP_HEADER and (self.done or self.allow_no_sasl):
            self.out.append(AMQP_HEADER)
            return Phase.FRAMES
        self.out.append(SASL_HEADER if not self.done else AMQP_HEADER)
        return None

    # ----------------------------------------------------------------------------------- frames

    def read(self, body: bytes) -> Any:
        """The peer's SASL performative, checked against our role (recording what the client keeps)."""
        perf, _ = decode_value(body, 0)
        allowed = (SaslInit, SaslResponse) if self.server else (SaslMechanisms, SaslChallenge, SaslOutcome)
        if not isinstance(perf, allowed):
            raise errors.ProtocolError(errors.FRAMING_ERROR, f"unexpected SASL frame {type(perf).__name__}")
        if isinstance(perf, SaslMechanisms):
            self.offered = perf.sasl_server_mechanisms
        elif isinstance(perf, SaslOutcome):
            self.additional = perf.additional_data
            self.done = perf.code == 0
        return perf

    def init(self, mechanism: str, initial_response: bytes | None, hostname: str | None) -> None:
        """Client: the mechanism we chose."""
        self._emit(
            SaslInit(mechanism=mechanism, initial_response=initial_response, hostname=hostname).encode_amqp()
        )

    def respond(self, response: bytes) -> None:
        """Client: the answer to a challenge."""
        self._emit(SaslResponse(response=response).encode_amqp())

    def challenge(self, challenge: bytes) -> None:
        """Server: a challenge for the client."""
        self._emit(SaslChallenge(challenge=challenge).encode_amqp())

    def outcome(self, ok: bool, user: str | None, additional: bytes | None) -> None:
        """Server: the end of the exchange (on failure the peer closes the socket)."""
        self._emit(SaslOutcome(code=0 if ok else 1, additional_data=additional).encode_amqp())
        if ok:
            self.user = user
            self.done = True
