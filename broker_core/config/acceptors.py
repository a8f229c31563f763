"""`<acceptors>`: AMQP listeners, and the web console's. We speak only AMQP: an acceptor for other
protocols only is skipped, and one for AMQP and others serves AMQP, each with a warning (the file Artemis's
`artemis create` writes has both kinds). One acceptor with ``protocols=CONSOLE`` (ours) serves the web
console (docs/console.md) with its host, port and TLS parameters. Every URI parameter is judged by the
support table (parameters.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker_core.config.model import CONSOLE_PROTOCOL, Acceptor, ConsoleSettings, TlsSettings
from broker_core.config.parameters import judge_parameters
from broker_core.config.support import UriKind
from broker_core.config.uri import parse_acceptor_uri
from broker_core.config.values import BadValue, parse_bool, parse_int
from broker_core.config.xmlread import Element, Reader, local_name


def _positive(text: str) -> int:
    return parse_int(text, minimum=1)


def _protocols(text: str) -> tuple[str, ...]:
    return tuple(item.strip().upper() for item in text.split(",") if item.strip())


def _text(text: str) -> str:
    return text


def _trusted_origins(text: str) -> tuple[tuple[str, str], ...]:
    """Ours (docs/mirror.md): the origins a mirror link whose remote is REMOTE may carry events of."""
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        remote, colon, origin = (part.strip() for part in item.partition(":"))
        if not (colon and remote and origin) or ":" in origin:
            raise BadValue(f"{item.strip()!r} is not a REMOTE:ORIGIN pair", "REMOTE:ORIGIN[,...], * for any")
        pairs.append((remote, origin))
    return tuple(pairs)


# URI parameter -> (Acceptor field, converter), for the parameters acted on here (support.py).
_PARAMS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "protocols": ("protocols", _protocols),
    "amqpCredits": ("amqp_credits", _positive),
    "amqpLowCredits": ("amqp_low_credits", lambda t: parse_int(t, minimum=0)),
    "amqpIdleTimeout": ("amqp_idle_timeout", lambda t: parse_int(t, minimum=0)),
    "amqpDuplicateDetection": ("amqp_duplicate_detection", parse_bool),
    "amqpMinLargeMessageSize": ("amqp_min_large_message_size", lambda t: parse_int(t, minimum=-1)),
    "maxFrameSize": ("max_frame_size", lambda t: parse_int(t, minimum=512)),
    "anycastPrefix": ("anycast_prefix", _text),
    "multicastPrefix": ("multicast_prefix", _text),
    "connectionsAllowed": ("connections_allowed", lambda t: parse_int(t, minimum=-1)),
    "handshake-timeout": ("handshake_timeout", lambda t: parse_int(t, minimum=0)),
    "httpUpgradeEnabled": ("http_upgrade", parse_bool),
    "webSocketMaxFramePayloadLength": ("websocket_max_payload", _positive),
    "doNotOffset": ("do_not_offset", parse_bool),
    "mirrorTrustedOrigins": ("mirror_trusted_origins", _trusted_origins),
    "mirrorMaxHeldMessages": ("mirror_max_held_messages", _positive),
    "mirrorHoldTimeout": ("mirror_hold_timeout", _positive),
}
_TLS_PARAMS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "sslEnabled": ("enabled", parse_bool),
    "keyStorePath": ("key_store_path", _text),
    "keyStorePassword": ("key_store_password", _text),
    "trustStorePath": ("trust_store_path", _text),
    "needClientAuth": ("need_client_auth", parse_bool),
    "sslCertPath": ("cert_path", _text),
    "sslKeyPath": ("key_path", _text),
    "sslCaPath": ("ca_path", _text),
}


# ours, read on a console acceptor only: how long a console login lasts without a request (ms)
_SESSION_TIMEOUT = "consoleSessionTimeout"
# what a console acceptor reads: its TLS and its session timeout (an AMQP tuning there has no effect)
_CONSOLE_READS = frozenset({"protocols", _SESSION_TIMEOUT, *_TLS_PARAMS})


def parse_acceptors(reader: Reader, section: Element) -> dict[str, Any]:
    """The BrokerConfig fields of `<acceptors>`: `acceptors` (the AMQP ones) and `console` if one is."""
    reader.check_attributes(section, set())
    acceptors: dict[str, Acceptor] = {}
    names: set[str] = set()
    consoles: list[ConsoleSettings] = []
    for element in reader.children(section):
        if local_name(element) != "acceptor":
            reader.ignore(element)
            continue
        parsed = _parse_acceptor(reader, element)
        if parsed is None:
            continue
        name = parsed.acceptor.name if isinstance(parsed, ConsoleSettings) else parsed.name
        if name in names:
            reader.error(element, f"duplicate acceptor name {name!r}", "a unique name", "name")
            continue
        names.add(name)
        if isinstance(parsed, ConsoleSettings):
            if consoles:
                reader.error(element, "a second console acceptor", "one acceptor with protocols=CONSOLE")
                continue
            consoles.append(parsed)
        else:
            acceptors[name] = parsed
    fields: dict[str, Any] = {"acceptors": tuple(acceptors.values())}
    if consoles:
        fields["console"] = consoles[0]
    return fields


def _parse_acceptor(reader: Reader, element: Element) -> Acceptor | ConsoleSettings | None:
    reader.check_attributes(element, {"name"})
    reader.check_no_children(element)
    name = reader.attr(element, "name", required=True)
    uri = reader.text(element)
    if not uri:
        if uri is not None:
            reader.error(element, "empty acceptor URI", "tcp://host:port?key=value;key=value")
        return None
    parsed = reader.convert(element, uri, parse_acceptor_uri)
    if parsed is None or name is None:
        return None
    protocols = _protocols(parsed.params.get("protocols", "AMQP"))
    if CONSOLE_PROTOCOL in protocols:
        return _parse_console(reader, element, name, uri, parsed.host, parsed.port, parsed.params)
    if "AMQP" not in protocols:
        judge_parameters(reader, element, parsed.params, UriKind.ACCEPTOR, names_only=True)
        reader.warning(element, f"protocols {','.join(protocols)} not supported; acceptor skipped", "AMQP")
        return None
    params = judge_parameters(reader, element, parsed.params, UriKind.ACCEPTOR)
    if params.pop(_SESSION_TIMEOUT, None) is not None:
        reader.warning(element, f"URI parameter {_SESSION_TIMEOUT} has no effect on an AMQP acceptor; "
                       "ignored", "it on the acceptor with protocols=CONSOLE")  # fmt: skip
    fields, tls = _convert_params(reader, element, params)
    if not _certificate_given(reader, element, tls):
        return None
    acceptor = Acceptor(
        name=name, uri=uri, host=parsed.host, port=parsed.port, tls=TlsSettings(**tls), **fields
    )
    others = [protocol for protocol in acceptor.protocols if protocol != "AMQP"]
    if others:
        reader.warning(
            element,
            f"protocols {','.join(others)} not supported; only AMQP is served here",
            "AMQP (clients of the other protocols cannot connect)",
        )
    return acceptor


def _parse_console(
    reader: Reader, element: Element, name: str, uri: str, host: str, port: int, raw: dict[str, str]
) -> ConsoleSettings | None:
    """An acceptor with protocols=CONSOLE: the web console's host, port, TLS and session timeout."""
    protocols = _protocols(raw.get("protocols", ""))
    if protocols != (CONSOLE_PROTOCOL,):
        reader.error(element, f"protocols {','.join(protocols)}: the console has an acceptor of its own",
                     "protocols=CONSOLE alone (and another acceptor for AMQP)")  # fmt: skip
        return None
    params = judge_parameters(reader, element, raw, UriKind.ACCEPTOR)
    for key in sorted(params.keys() - _CONSOLE_READS):
        reader.warning(element, f"URI parameter {key} has no effect on a console acceptor; ignored",
                       "TLS parameters and consoleSessionTimeout")  # fmt: skip
        del params[key]
    _, tls = _convert_params(reader, element, params)
    if not _certificate_given(reader, element, tls):
        return None
    acceptor = Acceptor(name=name, uri=uri, host=host, port=port, protocols=protocols, tls=TlsSettings(**tls))
    settings: dict[str, Any] = {}
    if _SESSION_TIMEOUT in params:
        try:
            settings["session_timeout"] = parse_int(params[_SESSION_TIMEOUT], minimum=1000)
        except BadValue as exc:
            reader.error(element, f"URI parameter {_SESSION_TIMEOUT}: {exc.message}", exc.expected)
    return ConsoleSettings(acceptor=acceptor, **settings)


def _certificate_given(reader: Reader, element: Element, tls: dict[str, Any]) -> bool:
    if tls.get("enabled") and not (tls.get("cert_path") or tls.get("key_store_path")):
        reader.error(
            element, "sslEnabled=true without a certificate", "sslCertPath (and sslKeyPath) to PEM files"
        )
        return False
    return True


def _convert_params(
    reader: Reader, element: Element, params: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters this broker acts on, converted to the Acceptor's fields and its TLS settings."""
    fields: dict[str, Any] = {}
    tls: dict[str, Any] = {}
    for key, raw in params.items():
        target, table = (tls, _TLS_PARAMS) if key in _TLS_PARAMS else (fields, _PARAMS)
        if key not in table:
            continue  # acted on without a field of its own (a harmless value of a refused parameter)
        field, convert = table[key]
        try:
            target[field] = convert(raw)
        except BadValue as exc:
            reader.error(element, f"URI parameter {key}: {exc.message}", exc.expected)
    _check_credits(reader, element, fields)
    return fields, tls


def _check_credits(reader: Reader, element: Element, fields: dict[str, Any]) -> None:
    credits, low = fields.get("amqp_credits", 1000), fields.get("amqp_low_credits", 300)
    if low >= credits:
        reader.error(
            element,
            f"amqpLowCredits {low} is not below amqpCredits {credits}",
            "amqpLowCredits < amqpCredits",
        )
        fields.pop("amqp_low_credits", None)
        fields.pop("amqp_credits", None)
