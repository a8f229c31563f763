"""The parameters of an acceptor's, a broker connection's or a connector's URI, judged by the support
table: an unknown name is an error with "did you mean", a name that has no effect here a note, one not
implemented yet an error. A typo must never make the broker run otherwise than the file says (a misspelt
`sslEnabled` would connect in plaintext)."""

from __future__ import annotations

from broker_core.config.schema import did_you_mean
from broker_core.config.support import URI_PARAMETERS, Support, UriKind, parameter_rule
from broker_core.config.values import BadValue, parse_bool
from broker_core.config.xmlread import Element, Reader

_BOOLEANS = frozenset({"sslEnabled", "verifyHost", "trustAll", "httpUpgradeEnabled", "doNotOffset"})


def judge_parameters(
    reader: Reader,
    element: Element,
    params: dict[str, str],
    kind: UriKind,
    attr: str | None = None,
    names_only: bool = False,
) -> dict[str, str]:
    """Judge every parameter; return those this broker acts on. With `names_only` (for what is not used
    at all, such as a skipped acceptor), only an unknown name is reported."""
    acted: dict[str, str] = {}
    for key, raw in params.items():
        rule = parameter_rule(kind, key, raw)
        if rule is None:
            known = list(URI_PARAMETERS[kind])
            reader.error(
                element,
                f"unknown URI parameter {key!r}{did_you_mean(key, known, '', '')}",
                f"a parameter of {kind.value}'s URI (docs/configuration.md lists them)",
                attr,
            )
        elif names_only:
            continue
        elif reader.judge(element, rule, raw, name=f"URI parameter {key}", attr=attr) == Support.IMPLEMENTED:
            acted[key] = raw
    return acted


def check_client_tls(reader: Reader, element: Element, params: dict[str, str], attr: str | None) -> None:
    """What an outgoing TLS connection reads must say what it means: true or false, and a key with its
    certificate."""
    for key in _BOOLEANS & params.keys():
        try:
            parse_bool(params[key])
        except BadValue as exc:
            reader.error(element, f"URI parameter {key}: {exc.message}", exc.expected, attr)
    if "sslKeyPath" in params and "sslCertPath" not in params:
        reader.error(element, "sslKeyPath without sslCertPath", "both, or neither (PEM files)", attr)
