"""Every error class, with the exact `file:line: path/attr: what; expected` text, all collected at once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, WriteConfig

from broker_core.config import ConfigError, ConfigProblem, load_config


def _errors(path: Path, **kwargs: object) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, **kwargs)  # type: ignore[arg-type]
    return [str(p) for p in caught.value.problems if p.severity == "error"]


def test_all_errors_in_a_file_are_reported_together(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "errors.xml", tmp_path / "broker.xml")
    assert _errors(tmp_path / "broker.xml") == [
        "broker.xml:5: core/journal-file-size: bad size '-5'; "
        "expected a byte size such as 1048576, 10K, 10M, 10MB, 10MiB or 1G",
        "broker.xml:6: core/journal-type: unknown value 'FAST'; expected one of ASYNCIO/NIO/MAPPED",
        "broker.xml:8: core/acceptors/acceptor[@name=amqp]: bad port 'abc'; expected an integer 1-65535",
        "broker.xml:10: core/acceptors/acceptor[@name=dup]/@name: duplicate acceptor name 'dup'; "
        "expected a unique name",
        "broker.xml:11: core/acceptors/acceptor/@name: missing required attribute; "
        'expected a name="..." attribute',
        "broker.xml:17: core/addresses/address[@name=orders]/anycast/queue[@name=orders]/@name: "
        "duplicate queue name 'orders'; expected a broker-wide unique name",
        "broker.xml:23: core/address-settings/address-setting[@match=#]/address-full-policy: "
        "unknown value 'SPILL'; expected one of PAGE/BLOCK/DROP/FAIL",
        "broker.xml:24: core/address-settings/address-setting[@match=#]/max-size-bytes: bad size 'ten'; "
        "expected a byte size such as 1048576, 10K, 10M, 10MB, 10MiB or 1G (or -1)",
        "broker.xml:29: core/security-settings/security-setting[@match=#]/permission[@type=publish]/@type: "
        "unknown permission type 'publish'; expected one of createAddress, deleteAddress, "
        "createDurableQueue, deleteDurableQueue, createNonDurableQueue, deleteNonDurableQueue, "
        "send, consume, manage, browse, view, edit",
    ]


def test_problem_fields_and_format() -> None:
    problem = ConfigProblem(
        "broker.xml",
        42,
        "core/acceptors/acceptor[@name=amqp]",
        None,
        "bad port 'abc'",
        "an integer 1-65535",
        "error",
    )
    assert (
        str(problem)
        == "broker.xml:42: core/acceptors/acceptor[@name=amqp]: bad port 'abc'; expected an integer 1-65535"
    )


def test_file_name_is_the_basename_the_caller_passed(tmp_path: Path) -> None:
    (tmp_path / "my-broker.xml").write_text(
        "<configuration><core><journal-min-files>1</journal-min-files></core></configuration>"
    )
    assert _errors(tmp_path / "my-broker.xml") == [
        "my-broker.xml:1: core/journal-min-files: integer 1 out of range; expected an integer >= 2"
    ]


def test_xml_syntax_error_has_its_line(tmp_path: Path) -> None:
    (tmp_path / "broker.xml").write_text(
        "<configuration>\n<core>\n<name>x</nam>\n</core>\n</configuration>\n"
    )
    errors = _errors(tmp_path / "broker.xml")
    assert errors[0].startswith("broker.xml:3: XML syntax error: ")
    assert errors[0].endswith("; expected well-formed XML")


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    errors = _errors(tmp_path / "absent.xml")
    assert len(errors) == 1 and errors[0].startswith("absent.xml: cannot read the file")


def test_wrong_root_and_missing_core(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text("<beans/>")
    assert _errors(tmp_path / "a.xml") == [
        "a.xml:1: beans: unexpected root element <beans>; expected <configuration> or <core>"
    ]
    (tmp_path / "b.xml").write_text('<configuration xmlns="urn:activemq"/>')
    assert _errors(tmp_path / "b.xml") == [
        'b.xml:1: configuration: missing <core> element; expected <core xmlns="urn:activemq:core">'
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "<persistence-enabled>yes</persistence-enabled>",
            "broker.xml:3: core/persistence-enabled: bad boolean 'yes'; expected true or false",
        ),
        (
            "<id-cache-size>-1</id-cache-size>",
            "broker.xml:3: core/id-cache-size: integer -1 out of range; expected an integer >= 0",
        ),
        (
            "<max-disk-usage>150</max-disk-usage>",
            "broker.xml:3: core/max-disk-usage: max-disk-usage 150 is over 100; "
            "expected a percentage 0-100, or -1 to disable",
        ),
        (
            "<name>a</name><name>b</name>",
            "broker.xml:3: core/name: <name> appears more than once (first at line 3); expected at most once",
        ),
        (
            '<acceptors><acceptor name="a">tcp://h:1?amqpCredits=10;amqpLowCredits=20</acceptor></acceptors>',
            "broker.xml:3: core/acceptors/acceptor[@name=a]: amqpLowCredits 20 is not below amqpCredits 10; "
            "expected amqpLowCredits < amqpCredits",
        ),
        (
            '<acceptors><acceptor name="a">tcp://h:1?maxFrameSize=big</acceptor></acceptors>',
            "broker.xml:3: core/acceptors/acceptor[@name=a]: URI parameter maxFrameSize: bad integer 'big'; "
            "expected an integer >= 512",
        ),
        (
            '<acceptors><acceptor name="a">udp://h:1</acceptor></acceptors>',
            "broker.xml:3: core/acceptors/acceptor[@name=a]: unsupported scheme 'udp'; "
            "expected tcp://host:port?key=value;key=value",
        ),
        (
            '<addresses><address name="a"/><address name="a"/></addresses>',
            "broker.xml:3: core/addresses/address[@name=a]/@name: duplicate address 'a'; "
            "expected each address once",
        ),
        (
            '<addresses><address name="a"><anycast><queue name="q" max-consumers="x"/></anycast></address>'
            "</addresses>",
            "broker.xml:3: core/addresses/address[@name=a]/anycast/queue[@name=q]/@max-consumers: "
            "bad integer 'x'; expected an integer >= -1",
        ),
        (
            '<addresses><address name="a"><anycast><queue name="q"><filter string="color ="/></queue>'
            "</anycast></address></addresses>",
            "broker.xml:3: core/addresses/address[@name=a]/anycast/queue[@name=q]/filter/@string: invalid "
            "filter 'color =': expected a value, a property or '(': found the end at position 8; "
            "expected a filter expression",
        ),
        (
            '<address-settings><address-setting match="a.#.b"/></address-settings>',
            "broker.xml:3: core/address-settings/address-setting[@match=a.#.b]/@match: '#' before the end of "
            "match 'a.#.b'; expected '#' only as the last character, e.g. 'news.#'",
        ),
        (
            '<address-settings><address-setting match="#"><page-size-bytes>-1</page-size-bytes>'
            "</address-setting></address-settings>",
            "broker.xml:3: core/address-settings/address-setting[@match=#]/page-size-bytes: bad size '-1'; "
            "expected a byte size such as 1048576, 10K, 10M, 10MB, 10MiB or 1G",
        ),
        (
            '<security-settings><security-setting match="#"><permission type="send"/></security-setting>'
            "</security-settings>",
            "broker.xml:3: core/security-settings/security-setting[@match=#]/permission[@type=send]/@roles: "
            'missing required attribute; expected a roles="..." attribute',
        ),
    ],
)
def test_single_errors(write_config: WriteConfig, body: str, expected: str) -> None:
    assert _errors(write_config("<security-enabled>false</security-enabled>" + body + "\n")) == [expected]


def test_unresolved_placeholder_is_an_error_with_its_line(write_config: WriteConfig) -> None:
    path = write_config("<security-enabled>false</security-enabled>\n<name>${broker.name.zz9}</name>\n")
    assert _errors(path, environ={}) == [
        "broker.xml:4: core/name: unresolved placeholder ${broker.name.zz9}; "
        "expected a property or environment variable 'broker.name.zz9', or a default: "
        "${broker.name.zz9:value}"
    ]


def test_unresolved_placeholder_in_attribute(write_config: WriteConfig) -> None:
    path = write_config(
        '<security-enabled>false</security-enabled>\n<addresses><address name="${x}"/></addresses>\n'
    )
    errors = _errors(path, environ={})
    assert errors == [
        "broker.xml:4: core/addresses/address[@name=${x}]/@name: unresolved placeholder ${x}; expected a "
        "property or environment variable 'x', or a default: ${x:value}"
    ]
