"""Parse client connection URIs: ``failover:(uri1,...,uriN)?options``, ``discovery:(static://(...))``, or
one plain ``amqp://`` / ``amqps://`` / ``tcp://`` URI, or ``ws://`` / ``wss://`` (AMQP over WebSocket; Qpid
JMS's ``amqpws://`` / ``amqpwss://`` too).

Option names and defaults follow the AMQ 6.3 client failover chapter (Table 2.1, "Failover Transport
Options"); each default below cites its row. ``tcp://`` is mapped to ``amqp://`` because this client only
speaks AMQP 1.0. Everything is validated here, so the client never sees a malformed value: each error is a
``ValueError`` naming the option (or URI) and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any
from urllib.parse import unquote

# Table 2.1, "Failover Transport Options" (AMQ 6.3 client failover chapter), one constant per row.
INITIAL_RECONNECT_DELAY_MS = 10  # initialReconnectDelay  10
MAX_RECONNECT_DELAY_MS = 30000  # maxReconnectDelay  30000
USE_EXPONENTIAL_BACK_OFF = True  # useExponentialBackOff  true
BACK_OFF_MULTIPLIER = 2.0  # backOffMultiplier  2
MAX_RECONNECT_ATTEMPTS = -1  # maxReconnectAttempts  -1 (unlimited)
STARTUP_MAX_RECONNECT_ATTEMPTS = -1  # startupMaxReconnectAttempts  -1 (unlimited)
RANDOMIZE = True  # randomize  true
TIMEOUT_MS = -1  # timeout  -1 (infinite)
WARN_AFTER_RECONNECT_ATTEMPTS = 10  # warnAfterReconnectAttempts  10 (<= 0 disables)
UPDATE_URIS_SUPPORTED = True  # updateURIsSupported  true (learn the brokers a server names)
# Section 2.1.3 "Priority Backup" describes these two without a default; off / empty is the only reading
# under which the plain examples (no priorityBackup) behave as the chapter describes.
PRIORITY_BACKUP = False
PRIORITY_URIS: tuple[str, ...] = ()
# Documented in Table 2.1 but not implemented by this client: accepted only at their documented default.
UNSUPPORTED_DEFAULTS = {
    "backup": "false",
    "trackMessages": "false",
    "maxCacheSize": "131072",
    "updateURIsURL": "",
}

SCHEME_PORTS = {"amqp": 5672, "amqps": 5671, "ws": 80, "wss": 443}
SCHEME_ALIASES = {
    "tcp": "amqp",
    "amqp": "amqp",
    "amqps": "amqps",
    "ws": "ws",
    "wss": "wss",
    "amqpws": "ws",
    "amqpwss": "wss",
}
WEBSOCKET_SCHEMES = ("ws", "wss")
NESTED_PREFIX = "nested."
INFINITE = -1


@dataclass(frozen=True)
class BrokerUri:
    """One broker endpoint; ``options`` are its query options (its own plus any ``nested.*``)."""

    scheme: str
    host: str
    port: int
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    path: str = "/"  # what a WebSocket upgrade asks for

    @property
    def url(self) -> str:
        """The address proton connects to (no query options); a ws:// one with its path."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        path = self.path if self.scheme in WEBSOCKET_SCHEMES and self.path != "/" else ""
        return f"{self.scheme}://{host}:{self.port}{path}"

    @property
    def endpoint(self) -> tuple[str, str, int]:
        """Identity for comparisons: two spellings of one broker compare equal."""
        return (self.scheme, self.host.lower(), self.port)

    def __str__(self) -> str:
        return self.url

    def __hash__(self) -> int:
        return hash(self.endpoint)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrokerUri) and self.endpoint == other.endpoint


@dataclass(frozen=True)
class FailoverOptions:
    """The failover transport options; times are milliseconds as in the URI."""

    initial_reconnect_delay: int = INITIAL_RECONNECT_DELAY_MS
    max_reconnect_delay: int = MAX_RECONNECT_DELAY_MS
    use_exponential_back_off: bool = USE_EXPONENTIAL_BACK_OFF
    back_off_multiplier: float = BACK_OFF_MULTIPLIER
    max_reconnect_attempts: int = MAX_RECONNECT_ATTEMPTS
    startup_max_reconnect_attempts: int = STARTUP_MAX_RECONNECT_ATTEMPTS
    randomize: bool = RANDOMIZE
    timeout: int = TIMEOUT_MS
    priority_backup: bool = PRIORITY_BACKUP
    priority_uris: tuple[BrokerUri, ...] = ()
    warn_after_reconnect_attempts: int = WARN_AFTER_RECONNECT_ATTEMPTS
    update_uris_supported: bool = UPDATE_URIS_SUPPORTED


@dataclass(frozen=True)
class FailoverUri:
    """A parsed connection URI. ``failover`` is False for a plain URI: no reconnect after a loss."""

    uris: tuple[BrokerUri, ...]
    options: FailoverOptions = FailoverOptions()
    failover: bool = True


def parse_failover_uri(text: str) -> FailoverUri:
    """Parse any supported connection URI; a ``ValueError`` says what is wrong and what was expected."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"connection URI: expected a non-empty string, got {text!r}")
    text = text.strip()
    lowered = text.lower()
    if lowered.startswith("failover:"):
        return _parse_composite(text[len("failover:") :], discovery=False)
    if lowered.startswith("discovery:"):
        return _parse_composite(text[len("discovery:") :], discovery=True)
    uri = parse_broker_uri(text)
    # A plain URI has no failover: one attempt at start-up and none after a loss (as without failover:).
    no_retry = FailoverOptions(max_reconnect_attempts=0, startup_max_reconnect_attempts=0)
    return FailoverUri((uri,), no_retry, failover=False)


def parse_broker_uri(text: str, extra: Mapping[str, str] | None = None) -> BrokerUri:
    """Parse ``scheme://host[:port][?k=v&...]``; ``extra`` (nested.* options) overrides the URI's own."""
    raw = text.strip()
    scheme, sep, rest = raw.partition("://")
    if not sep or scheme.lower() not in SCHEME_ALIASES:
        expected = "amqp://, amqps://, tcp:// (tcp maps to amqp), ws:// or wss://"
        raise ValueError(f"broker URI {raw!r}: expected scheme {expected}")
    authority, _, query = rest.partition("?")
    authority, slash, path = authority.partition("/")
    canonical = SCHEME_ALIASES[scheme.lower()]
    if path and canonical not in WEBSOCKET_SCHEMES:
        raise ValueError(f"broker URI {raw!r}: a path is for ws:// and wss:// URIs only")
    host, port = _split_host_port(raw, authority, scheme.lower())
    options = dict(_parse_query(query, raw))
    options.update(extra or {})
    return BrokerUri(canonical, host, port, MappingProxyType(options), "/" + path if slash else "/")


def _split_host_port(raw: str, authority: str, scheme: str) -> tuple[str, int]:
    if "@" in authority:
        raise ValueError(f"broker URI {raw!r}: credentials in the URI are not supported; pass user/password")
    if authority.startswith("["):
        host, _, tail = authority[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if not host:
        raise ValueError(f"broker URI {raw!r}: expected a host name, e.g. amqp://broker.example:5672")
    if not port_text:
        if scheme == "tcp":
            raise ValueError(f"broker URI {raw!r}: a tcp:// URI needs an explicit port")
        return host, SCHEME_PORTS[SCHEME_ALIASES[scheme]]
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"broker URI {raw!r}: expected a port number 1-65535, got {port_text!r}")
    return host, int(port_text)


def _parse_composite(body: str, *, discovery: bool) -> FailoverUri:
    inner, query = _split_group(body, "discovery:" if discovery else "failover:")
    if discovery:
        inner = _static_agent_list(inner)
    raw_options = dict(_parse_query(query, "failover options"))
    nested = {k[len(NESTED_PREFIX) :]: v for k, v in raw_options.items() if k.startswith(NESTED_PREFIX)}
    own = {k: v for k, v in raw_options.items() if not k.startswith(NESTED_PREFIX)}
    if discovery:
        # Discovery injects every option it does not know itself into the discovered endpoints.
        nested.update({k: own.pop(k) for k in list(own) if k not in _OPTION_FIELDS})
    items = _split_top_level(inner)
    if not items or any(not item.strip() for item in items):
        raise ValueError(f"URI list {inner!r}: expected one or more comma-separated broker URIs")
    uris = tuple(parse_broker_uri(item, nested) for item in items)
    return FailoverUri(uris, _build_options(own, uris))


def _split_group(body: str, what: str) -> tuple[str, str]:
    """Split ``(a,b)?query`` (parentheses may nest); without parentheses the whole body up to ``?``."""
    body = body.strip()
    if not body.startswith("("):
        if what == "discovery:":
            return body.partition("?")[0], body.partition("?")[2]
        raise ValueError(f"{what} URI: expected '(uri1,...,uriN)' after '{what}', got {body!r}")
    depth = 0
    for index, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            rest = body[index + 1 :].strip()
            if rest and not rest.startswith("?"):
                raise ValueError(f"{what} URI: expected '?options' after the URI list, got {rest!r}")
            return body[1:index], rest[1:]
    raise ValueError(f"{what} URI: unbalanced parentheses in {body!r}")


def _static_agent_list(agent: str) -> str:
    agent = agent.strip()
    lowered = agent.lower()
    for prefix in ("static://", "static:"):
        if lowered.startswith(prefix):
            inner, rest = _split_group(agent[len(prefix) :], "static:")
            if rest:
                raise ValueError(f"static discovery agent {agent!r}: options belong after discovery:(...)")
            return inner
    raise ValueError(
        f"discovery agent {agent!r}: only the static agent is supported: static://(uri1,...,uriN)"
    )


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    items.append(text[start:])
    return [item.strip() for item in items] if text.strip() else []


def _parse_query(query: str, where: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for part in query.split("&"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{where}: expected 'name=value', got {part!r}")
        if key in seen:
            raise ValueError(f"{where}: option {key!r} given twice")
        seen.add(key)
        pairs.append((key, unquote(value.strip())))
    return pairs


def _int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"option {name}={text!r}: expected an integer") from None
    if value < minimum:
        raise ValueError(f"option {name}={text!r}: expected an integer >= {minimum}")
    return value


def _ms(name: str, text: str) -> int:
    return _int(name, text, 0)


def _attempts(name: str, text: str) -> int:
    return _int(name, text, INFINITE)


def _bool(name: str, text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"option {name}={text!r}: expected true or false")
    return text.lower() == "true"


def _multiplier(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"option {name}={text!r}: expected a number >= 1") from None
    if not value >= 1.0 or value == float("inf"):
        raise ValueError(f"option {name}={text!r}: expected a finite number >= 1")
    return value


def _warn(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"option {name}={text!r}: expected an integer (<= 0 disables)") from None


# URI option name -> (FailoverOptions field, converter).
_OPTION_FIELDS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "initialReconnectDelay": ("initial_reconnect_delay", _ms),
    "maxReconnectDelay": ("max_reconnect_delay", _ms),
    "useExponentialBackOff": ("use_exponential_back_off", _bool),
    "backOffMultiplier": ("back_off_multiplier", _multiplier),
    "maxReconnectAttempts": ("max_reconnect_attempts", _attempts),
    "startupMaxReconnectAttempts": ("startup_max_reconnect_attempts", _attempts),
    "randomize": ("randomize", _bool),
    "timeout": ("timeout", _attempts),
    "priorityBackup": ("priority_backup", _bool),
    "warnAfterReconnectAttempts": ("warn_after_reconnect_attempts", _warn),
    "updateURIsSupported": ("update_uris_supported", _bool),
}
assert {name for name, _ in _OPTION_FIELDS.values()} | {"priority_uris"} == {
    f.name for f in fields(FailoverOptions)
}


def _build_options(raw: dict[str, str], uris: tuple[BrokerUri, ...]) -> FailoverOptions:
    values: dict[str, Any] = {}
    for key, text in raw.items():
        if key in _OPTION_FIELDS:
            attr, convert = _OPTION_FIELDS[key]
            values[attr] = convert(key, text)
        elif key == "priorityURIs":
            values["priority_uris"] = _priority_uris(text, uris)
        elif key in UNSUPPORTED_DEFAULTS:
            _check_unsupported(key, text)
        else:
            known = sorted([*_OPTION_FIELDS, "priorityURIs", *UNSUPPORTED_DEFAULTS, "nested.*"])
            raise ValueError(f"unknown failover option {key!r}: expected one of {', '.join(known)}")
    return FailoverOptions(**values)


def _priority_uris(text: str, uris: tuple[BrokerUri, ...]) -> tuple[BrokerUri, ...]:
    items = [item for item in _split_top_level(text) if item]
    if not items:
        raise ValueError("option priorityURIs: expected a comma-separated list of URIs of the failover list")
    chosen = tuple(parse_broker_uri(item) for item in items)
    for uri in chosen:
        if uri not in uris:
            listed = ", ".join(str(u) for u in uris)
            raise ValueError(f"option priorityURIs: {uri} is not in the failover URI list ({listed})")
    return tuple(next(u for u in uris if u == c) for c in chosen)


def _check_unsupported(key: str, text: str) -> None:
    default = UNSUPPORTED_DEFAULTS[key]
    if text.lower() != default:
        shown = default or "empty"
        raise ValueError(
            f"option {key}={text!r} is not supported by this client: expected its default ({shown})"
        )
