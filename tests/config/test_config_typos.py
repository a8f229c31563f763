"""A corpus of realistic broker.xml mistakes: each is an error naming its line and what was meant.

Before, every one of them was "not implemented yet; ignored" and the broker ran without what the operator
meant (a mirror, a listener, a dead-letter address). What Artemis's schema has is judged by the support
table (an error if not implemented yet, a note if it has no effect here); the `artemis create` broker.xml
loads with no error.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker_core.config import ConfigError, load_config

FIXTURES = Path(__file__).parent / "fixtures"
CONNECTION = '<amqp-connection uri="tcp://127.0.0.1:5" name="DC2">{}</amqp-connection>'
MIRROR = f"<broker-connections>{CONNECTION}</broker-connections>"
SETTING = '<address-settings><address-setting match="#">{}</address-setting></address-settings>'
SECURITY = '<security-settings><security-setting match="#">{}</security-setting></security-settings>'
ADDRESS = '<addresses><address name="orders">{}</address></addresses>'

# (what is written, in <core>; what the error must say)
CORPUS = [
    ("<persistance-enabled>true</persistance-enabled>", "did you mean <persistence-enabled>?"),
    ("<jounral-directory>data/j</jounral-directory>", "did you mean <journal-directory>?"),
    ("<security-enable>false</security-enable>", "did you mean <security-enabled>?"),
    ("<adresses/>", "did you mean <addresses>?"),
    ('<acceptor name="amqp">tcp://127.0.0.1:5672</acceptor>', "expected <acceptor> inside <acceptors>"),
    ('<address-setting match="#"/>', "expected <address-setting> inside <address-settings>"),
    ('<acceptors><aceptor name="a">tcp://127.0.0.1:5672</aceptor></acceptors>', "did you mean <acceptor>?"),
    ('<acceptors><acceptor nmae="a">tcp://127.0.0.1:5672</acceptor></acceptors>', "did you mean name?"),
    ('<addresses><adress name="x"/></addresses>', "did you mean <address>?"),
    (ADDRESS.format("<anycats/>"), "did you mean <anycast>?"),
    (ADDRESS.format('<anycast><queue nam="q"/></anycast>'), "did you mean name?"),
    ('<addresses><queue name="q"/></addresses>', "expected <queue> inside <anycast> or <multicast>"),
    (SETTING.format("<dead-leter-address>DLA</dead-leter-address>"), "did you mean <dead-letter-address>?"),
    (
        SETTING.format("<max-delivery-atempts>3</max-delivery-atempts>"),
        "did you mean <max-delivery-attempts>?",
    ),
    ('<address-settings><address-setting mach="#"/></address-settings>', "did you mean match?"),
    (SECURITY.format('<permision type="send" roles="a"/>'), "did you mean <permission>?"),
    (SECURITY.format('<permission typ="send" roles="a"/>'), "did you mean type?"),
    (MIRROR.format("<mirorr/>"), "did you mean <mirror>?"),
    (MIRROR.format('<mirror adress-filter="eu"/>'), "did you mean address-filter?"),
    (MIRROR.format('<sender adress-match="eu.#"/>'), "did you mean address-match?"),
    (
        '<broker-connections><amqp-connection uri="tcp://127.0.0.1:5" name="DC2" retry-intervall="100"/>'
        "</broker-connections>",
        "did you mean retry-interval?",
    ),
    (
        '<broker-connections><amqp-conection uri="tcp://h:5" name="x"/></broker-connections>',
        "<amqp-connection>?",
    ),
    ("<ha-policy><replicaton/></ha-policy>", "did you mean <replication>?"),
    ("<ha-policy><shared-store><primray/></shared-store></ha-policy>", "did you mean <primary>?"),
    (
        "<ha-policy><replication><primary><check-for-live-srever>true</check-for-live-srever></primary>"
        "</replication></ha-policy>",
        "<check-for-live-server>",
    ),
]


def write(tmp_path: Path, snippet: str) -> Path:
    path = tmp_path / "etc" / "broker.xml"
    path.parent.mkdir(exist_ok=True)
    lines = [
        '<?xml version="1.0"?>',
        '<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">',
        "<security-enabled>false</security-enabled>",
        snippet,  # line 4
        "</core></configuration>",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("snippet", "says"), CORPUS, ids=[f"{i:02d}" for i in range(len(CORPUS))])
def test_a_mistake_is_an_error_on_its_line_with_what_was_meant(
    tmp_path: Path, snippet: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, snippet))
    errors = [str(p) for p in caught.value.problems if p.severity == "error"]
    # a misspelt required attribute is also reported missing: both on the line, one saying what was meant
    assert errors and all(e.startswith("broker.xml:4: ") and "; expected " in e for e in errors), errors
    assert any(says in e for e in errors), errors


def test_the_corpus_is_wide() -> None:
    assert len(CORPUS) >= 20
    sections = ("acceptor", "address", "address-setting", "security-setting", "amqp-connection", "ha-policy")
    assert all(any(s in snippet for snippet, _ in CORPUS) for s in sections)


def test_the_artemis_create_broker_xml_loads_with_no_error(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "stock", tmp_path / "stock")
    config, problems = load_config(tmp_path / "stock" / "etc" / "broker.xml")
    assert config.acceptors  # the AMQP acceptor is there
    assert problems and {p.severity for p in problems} == {"warning", "note"}


def test_what_artemis_has_and_we_do_not_implement_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, '<connection-routers><connection-router name="b"/></connection-routers>')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [(p.severity, p.line, p.element_path) for p in caught.value.problems] == [
        ("error", 4, "core/connection-routers")
    ]
