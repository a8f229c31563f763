"""Section by section: acceptors, addresses, address-settings merging, security, connections, users."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import WriteConfig

from broker_core.config import ConfigError, load_config
from broker_core.config.model import (
    AddressFullPolicy,
    BrokerConfig,
    LinkKind,
    Permission,
    RoutingType,
    SlowConsumerPolicy,
)

NO_SECURITY = "<security-enabled>false</security-enabled>\n"


def _load(write_config: WriteConfig, body: str) -> tuple[BrokerConfig, list[str]]:
    cfg, warnings = load_config(write_config(NO_SECURITY + body), environ={})
    return cfg, [str(w) for w in warnings]


def _errors(write_config: WriteConfig, body: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(NO_SECURITY + body), environ={})
    return [str(p) for p in caught.value.problems if p.severity == "error"]


def test_acceptor_parameters(write_config: WriteConfig) -> None:
    cfg, notes = _load(
        write_config,
        '<acceptors><acceptor name="tls">tcp://0.0.0.0:5671?protocols=AMQP;sslEnabled=true;keyStorePath=k.pem;'
        "keyStorePassword=pw;trustStorePath=t.pem;needClientAuth=true;sslCertPath=c.pem;sslKeyPath=k.pem;"
        "sslCaPath=ca.pem;amqpCredits=500;amqpLowCredits=100;amqpIdleTimeout=30000;keyStoreType=PEM;"
        "maxFrameSize=65536;tcpSendBufferSize=1M;anycastPrefix=anycast://;"
        "multicastPrefix=multicast://;connectionsAllowed=10</acceptor></acceptors>\n",
    )
    tls = cfg.acceptors[0]
    assert (tls.tls.enabled, tls.tls.key_store_path, tls.tls.need_client_auth) == (True, "k.pem", True)
    assert (tls.tls.cert_path, tls.tls.key_path, tls.tls.ca_path) == ("c.pem", "k.pem", "ca.pem")
    assert (tls.amqp_credits, tls.amqp_low_credits, tls.amqp_idle_timeout) == (500, 100, 30000)
    assert tls.max_frame_size == 65536
    assert (tls.anycast_prefix, tls.multicast_prefix, tls.connections_allowed) == (
        "anycast://",
        "multicast://",
        10,
    )
    assert notes == [
        "broker.xml:4: core/acceptors/acceptor[@name=tls]: URI parameter tcpSendBufferSize has no effect "
        "here: a Netty tuning (sockets are asyncio's)"
    ]


def test_an_unknown_acceptor_parameter_is_an_error_naming_the_closest(write_config: WriteConfig) -> None:
    body = '<acceptors><acceptor name="a">tcp://h:1?amqpCredit=5;frobnicate=1</acceptor></acceptors>'
    assert _errors(write_config, body) == [
        "broker.xml:4: core/acceptors/acceptor[@name=a]: unknown URI parameter 'amqpCredit' "
        "(did you mean amqpCredits or amqpLowCredits?); expected a parameter of an acceptor's URI "
        "(docs/configuration.md lists them)",
        "broker.xml:4: core/acceptors/acceptor[@name=a]: unknown URI parameter 'frobnicate'; expected a "
        "parameter of an acceptor's URI (docs/configuration.md lists them)",
    ]


def test_a_skipped_acceptor_reports_only_misspelt_parameters(write_config: WriteConfig) -> None:
    """It serves nothing, so nothing it asks for can differ; a typo is still a typo."""
    body = '<acceptors><acceptor name="s">tcp://h:1?protocols=STOMP;useEpoll=true;sslProvider=OPENSSL'
    errors = _errors(write_config, body + ";stompEnableMessageID=true</acceptor></acceptors>")
    assert len(errors) == 1 and "'stompEnableMessageID' (did you mean stompEnableMessageId?)" in errors[0]


def test_addresses_and_queues(write_config: WriteConfig) -> None:
    cfg, notes = _load(
        write_config,
        """<addresses>
  <address name="orders">
    <anycast>
      <queue name="orders.q" max-consumers="1" exclusive="false" ring-size="-1" enabled="true">
        <durable>false</durable><filter string="color = 'red'"/><user>bob</user>
      </queue>
    </anycast>
    <multicast><queue name="orders.audit" purge-on-no-consumers="true" non-destructive="false"/></multicast>
  </address>
  <address name="empty"/>
</addresses>
""",
    )
    orders, empty = cfg.addresses
    assert orders.routing_types == {RoutingType.ANYCAST, RoutingType.MULTICAST}
    q, audit = orders.queues
    assert (q.name, q.address, q.routing_type, q.durable, q.filter) == (
        "orders.q", "orders", RoutingType.ANYCAST, False, "color = 'red'"
    )  # fmt: skip
    assert (q.max_consumers, q.exclusive, q.ring_size) == (1, False, -1)
    assert (audit.durable, audit.max_consumers, audit.purge_on_no_consumers) == (True, -1, True)
    assert (empty.routing_types, empty.queues) == (frozenset(), ())
    assert [n.split(": ", 2)[2] for n in notes] == [
        "has no effect here: Artemis records it as the queue's creator; nothing reads it"
    ]


def test_a_queue_feature_not_implemented_yet_is_refused(write_config: WriteConfig) -> None:
    body = (
        '<addresses><address name="o"><anycast><queue name="q" exclusive="true" last-value-key="k"/>'
        "</anycast></address></addresses>"
    )
    assert [e.split(": ", 2)[1:] for e in _errors(write_config, body)] == [
        [
            "core/addresses/address[@name=o]/anycast/queue[@name=q]/@exclusive",
            "not implemented yet: exclusive queues; refused; expected false, or left out",
        ],
        [
            "core/addresses/address[@name=o]/anycast/queue[@name=q]/@last-value-key",
            "not implemented yet: last-value queues; refused; expected it left out, until it is implemented",
        ],
    ]


def test_address_settings_merge_most_specific_per_field(write_config: WriteConfig) -> None:
    cfg, _ = _load(
        write_config,
        """<address-settings>
  <address-setting match="#"><max-delivery-attempts>3</max-delivery-attempts>
    <dead-letter-address>DLQ</dead-letter-address><max-size-bytes>1M</max-size-bytes></address-setting>
  <address-setting match="orders.#"><max-delivery-attempts>5</max-delivery-attempts></address-setting>
  <address-setting match="orders.*"><address-full-policy>BLOCK</address-full-policy>
    <max-delivery-attempts>7</max-delivery-attempts></address-setting>
  <address-setting match="orders.eu"><dead-letter-address>EU.DLQ</dead-letter-address>
    <slow-consumer-policy>KILL</slow-consumer-policy></address-setting>
</address-settings>
""",
    )
    eu = cfg.address_settings_for("orders.eu")
    assert (eu.dead_letter_address, eu.max_delivery_attempts, eu.address_full_policy) == (
        "EU.DLQ", 7, AddressFullPolicy.BLOCK
    )  # fmt: skip
    assert (eu.max_size_bytes, eu.slow_consumer_policy) == (1048576, SlowConsumerPolicy.KILL)
    deep = cfg.address_settings_for("orders.us.west")  # "orders.*" needs exactly one word
    assert (deep.max_delivery_attempts, deep.address_full_policy) == (5, AddressFullPolicy.PAGE)
    other = cfg.address_settings_for("billing")
    assert (other.max_delivery_attempts, other.dead_letter_address, other.auto_create_queues) == (
        3,
        "DLQ",
        True,
    )


def test_address_settings_defaults_with_no_entries(write_config: WriteConfig) -> None:
    cfg, _ = _load(write_config, "")
    defaults = cfg.address_settings_for("x")
    assert defaults.max_delivery_attempts == 10
    assert defaults.default_address_routing_type is RoutingType.MULTICAST
    assert defaults.auto_delete_addresses is True


def test_security_settings(write_config: WriteConfig) -> None:
    cfg, _ = _load(
        write_config,
        """<security-settings>
  <security-setting match="#"><permission type="send" roles="amq, guest"/>
    <permission type="consume" roles="amq"/></security-setting>
  <security-setting match="secret.#"><permission type="view" roles="admin"/></security-setting>
</security-settings>
""",
    )
    catch_all = cfg.security_setting_for("orders")
    assert catch_all is not None
    assert catch_all.permissions == {Permission.SEND: {"amq", "guest"}, Permission.CONSUME: {"amq"}}
    secret = cfg.security_setting_for("secret.plans")
    assert secret is not None and secret.permissions == {Permission.VIEW: {"admin"}}


BROKER_CONNECTION = """<broker-connections>
  <amqp-connection uri="tcp://dc2a:5672?sslEnabled=true#dc2b:5672,dc2c:5672" name="dc2" user="u" password="p"
                   retry-interval="100" reconnect-attempts="3" auto-start="false">
    <mirror queue-removal="false" address-filter="eu,!eu.uk" sync="true">
      <property key="initial-sync" value="true"/>
    </mirror>
    <sender address-match="orders.#"/>
    <receiver queue-name="inbound"/>
    <peer address-match="peer.#"/>
  </amqp-connection>
  <amqp-connection uri="tcp://dc3:5672" name="dc3"><mirror/></amqp-connection>
</broker-connections>
"""


def test_broker_connections(write_config: WriteConfig) -> None:
    cfg, warnings = _load(write_config, BROKER_CONNECTION)
    assert warnings == []
    dc2, dc3 = cfg.broker_connections
    assert [(e.host, e.port) for e in dc2.endpoints] == [("dc2a", 5672), ("dc2b", 5672), ("dc2c", 5672)]
    assert (dc2.user, dc2.password, dc2.retry_interval, dc2.reconnect_attempts, dc2.auto_start) == (
        "u", "p", 100, 3, False
    )  # fmt: skip
    mirror = dc2.mirrors[0]
    assert (mirror.message_acknowledgements, mirror.queue_creation, mirror.queue_removal) == (
        True,
        True,
        False,
    )
    assert (mirror.address_filter, mirror.durable, mirror.sync, mirror.properties) == (
        "eu,!eu.uk",
        True,
        True,
        {"initial-sync": "true"},
    )
    assert [(link.kind, link.address_match, link.queue_name) for link in dc2.links] == [
        (LinkKind.SENDER, "orders.#", None),
        (LinkKind.RECEIVER, None, "inbound"),
        (LinkKind.PEER, "peer.#", None),
    ]
    assert [e.params for e in dc2.endpoints] == [
        {"sslEnabled": "true"}
    ] * 3  # an alternate takes the primary's
    assert (dc3.retry_interval, dc3.reconnect_attempts, dc3.auto_start) == (5000, -1, True)
    assert (dc3.mirrors[0].durable, dc3.mirrors[0].sync, dc3.mirrors[0].address_filter) == (True, False, None)


def test_mirror_filter_whitespace_warns(write_config: WriteConfig) -> None:
    body = '<broker-connections><amqp-connection uri="tcp://h:1" name="c">\n'
    body += '<mirror address-filter="eu, !eu.uk"/>\n'
    _, warnings = _load(write_config, body + "</amqp-connection></broker-connections>\n")
    # one finding: the entry ' !eu.uk' keeps its space, so it is an allow, not the deny it looks like
    [warning] = warnings
    where = "broker.xml:5: core/broker-connections/amqp-connection[@name=c]/mirror/@address-filter: "
    assert warning.startswith(where)
    assert "' !eu.uk'" in warning and "allow" in warning


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        (
            'uri="tcp://h:1" name="c" retry-interval="0"',
            "@retry-interval: integer 0 out of range; expected an integer >= 1",
        ),
        (
            'uri="tcp://h:1" name="c" reconnect-attempts="0"',
            "@reconnect-attempts: reconnect-attempts 0; expected -1 (forever) or a positive integer",
        ),
        (
            'uri="tcp://h:1" name="c" auto-start="maybe"',
            "@auto-start: bad boolean 'maybe'; expected true or false",
        ),
        ('name="c"', '@uri: missing required attribute; expected a uri="..." attribute'),
        ('uri="tcp://h:1#"', '@name: missing required attribute; expected a name="..." attribute'),
        ('uri="tcp://h:1#x" name="c"', "@uri: bad host:port 'x'; expected host:port, or [ipv6]:port"),
    ],
)
def test_broker_connection_errors(write_config: WriteConfig, attributes: str, expected: str) -> None:
    path = write_config(
        NO_SECURITY + f"<broker-connections><amqp-connection {attributes}/></broker-connections>\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (error,) = [str(p) for p in caught.value.problems if p.severity == "error"]
    assert error.startswith("broker.xml:4: core/broker-connections/amqp-connection")
    assert error.endswith(expected)


def test_link_needs_address_match_or_queue_name(write_config: WriteConfig) -> None:
    path = write_config(
        NO_SECURITY + '<broker-connections><amqp-connection uri="tcp://h:1" name="c"><sender/>'
        "</amqp-connection></broker-connections>\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [str(p) for p in caught.value.problems] == [
        "broker.xml:4: core/broker-connections/amqp-connection[@name=c]/sender: missing address-match or "
        'queue-name; expected an address-match="..." or queue-name="..."'
    ]


def test_federation_is_not_implemented_yet(write_config: WriteConfig) -> None:
    body = '<broker-connections><amqp-connection uri="tcp://h:1" name="c">\n<federation/>\n'
    assert _errors(write_config, body + "</amqp-connection></broker-connections>\n") == [
        "broker.xml:5: core/broker-connections/amqp-connection[@name=c]/federation: not implemented yet: "
        "AMQP federation; refused; expected it left out, until it is implemented"
    ]


CONNECTION_URI = '<broker-connections><amqp-connection uri="{}" name="c"/></broker-connections>'


def test_a_misspelt_connection_parameter_is_an_error_not_a_plaintext_connection(
    write_config: WriteConfig,
) -> None:
    errors = _errors(write_config, CONNECTION_URI.format("tcp://h:1?sslEnabeld=true;reconectAttempts=3"))
    where = "broker.xml:4: core/broker-connections/amqp-connection[@name=c]/@uri: "
    assert errors == [
        f"{where}unknown URI parameter 'sslEnabeld' (did you mean sslEnabled?); "
        "expected a parameter of a broker connection's URI (docs/configuration.md lists them)",
        f"{where}unknown URI parameter 'reconectAttempts' (did you mean reconnectAttempts?); "
        "expected a parameter of a broker connection's URI (docs/configuration.md lists them)",
    ]


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("tcp://h:1#tcp://g:2?sslEnabeld=true", "'sslEnabeld' (did you mean sslEnabled?)"),  # an alternate's
        ("tcp://h:1?sslEnabled=yes", "URI parameter sslEnabled: bad boolean 'yes'"),
        ("tcp://h:1?sslEnabled=true;sslKeyPath=k.pem", "sslKeyPath without sslCertPath"),
        ("tcp://h:1?sslEnabled=true;trustStorePath=t.jks", "trustStorePath is not implemented yet: Java key"),
        (
            "tcp://h:1?sslEnabled=true;keyStorePath=c.pem",
            "keyStorePath is not implemented yet: a client cert",
        ),
        ("tcp://h:1?enabledProtocols=TLSv1.3", "enabledProtocols is not implemented yet: TLS versions"),
        ("tcp://h:1?reconnectAttempts=3", "reconnect-attempts attribute"),
        ("tcp://h:1?needClientAuth=true", "unknown URI parameter 'needClientAuth'"),  # an acceptor's
    ],
)
def test_connection_parameters_that_would_not_do_what_they_say(
    write_config: WriteConfig, uri: str, says: str
) -> None:
    errors = _errors(write_config, CONNECTION_URI.format(uri))
    assert len(errors) == 1 and says in errors[0], errors


def test_connection_parameters_acted_on_and_noted(write_config: WriteConfig) -> None:
    uri = (
        "tcp://h:1?sslEnabled=true;trustStorePath=ca.pem;trustStoreType=PEM;verifyHost=false;tcpNoDelay=true"
    )
    cfg, notes = _load(write_config, CONNECTION_URI.format(uri))
    assert cfg.broker_connections[0].endpoints[0].params == {
        "sslEnabled": "true",
        "trustStorePath": "ca.pem",
        "trustStoreType": "PEM",
        "verifyHost": "false",
    }
    assert [n.split(": ", 2)[2] for n in notes] == [
        "URI parameter tcpNoDelay has no effect here: a Netty tuning (sockets are asyncio's)"
    ]


def test_connector_parameters_are_judged_like_a_connections(write_config: WriteConfig) -> None:
    body = '<connectors><connector name="p">tcp://h:1?sslEnabeld=true;localPort=1</connector></connectors>'
    errors = _errors(write_config, body)
    assert [e.split(": ", 2)[2].split(";")[0] for e in errors] == [
        "unknown URI parameter 'sslEnabeld' (did you mean sslEnabled?)",
        "URI parameter localPort is not implemented yet: the outgoing port is the one the system picks",
    ]


def test_connection_ttl_override_is_every_amqp_connections_idle_timeout(write_config: WriteConfig) -> None:
    acceptors = (
        '<acceptors><acceptor name="a">tcp://h:1</acceptor>'
        '<acceptor name="b">tcp://h:2?amqpIdleTimeout=5000</acceptor></acceptors>'
    )
    body = (
        acceptors
        + CONNECTION_URI.format("tcp://h:3")
        + "<connection-ttl-override>20000</connection-ttl-override>"
    )
    cfg, notes = _load(write_config, body)
    assert [a.amqp_idle_timeout for a in cfg.acceptors] == [20000, 5000]  # an acceptor's own wins
    assert cfg.broker_connections[0].idle_timeout == 20000
    assert notes == []
    cfg, _ = _load(write_config, acceptors + CONNECTION_URI.format("tcp://h:3"))
    assert [a.amqp_idle_timeout for a in cfg.acceptors] == [60000, 5000]
    assert cfg.broker_connections[0].idle_timeout == 60000


def test_mirror_properties(write_config: WriteConfig) -> None:
    mirror = '<broker-connections><amqp-connection uri="tcp://h:1" name="c"><mirror>{}</mirror>'
    mirror += "</amqp-connection></broker-connections>"
    cfg, notes = _load(
        write_config,
        mirror.format(
            '<property key="initial-sync" value="true"/><property key="tunnel-core-messages" value="true"/>'
        ),
    )
    assert cfg.broker_connections[0].mirrors[0].properties["initial-sync"] == "true"
    assert len(notes) == 1 and "mirror property tunnel-core-messages has no effect here" in notes[0]
    errors = _errors(write_config, mirror.format('<property key="initial-synk" value="true"/>'))
    assert len(errors) == 1 and "'initial-synk' (did you mean initial-sync?)" in errors[0]


def _write_security(tmp_path: Path, users: str, roles: str) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "artemis-users.properties").write_text(users)
    (etc / "artemis-roles.properties").write_text(roles)
    path = etc / "broker.xml"
    path.write_text("<configuration><core><name>s</name></core></configuration>")
    return path


def test_users_and_roles_next_to_broker_xml(tmp_path: Path) -> None:
    path = _write_security(tmp_path, "admin = s3cret\nbob: pw\n", "amq = admin, bob\nview=bob\n")
    cfg, warnings = load_config(path)
    assert warnings == []
    assert [(u.name, u.password) for u in cfg.users] == [("admin", "s3cret"), ("bob", "pw")]
    assert cfg.roles_of("bob") == {"amq", "view"}


def test_explicit_users_and_roles_paths(tmp_path: Path) -> None:
    path = _write_security(tmp_path, "ignored = x\n", "r = ignored\n")
    (tmp_path / "u.properties").write_text("alice = a\n")
    (tmp_path / "r.properties").write_text("amq = alice, ghost\n")
    cfg, warnings = load_config(
        path, users_file=tmp_path / "u.properties", roles_file=tmp_path / "r.properties"
    )
    assert [u.name for u in cfg.users] == ["alice"]
    assert [str(w) for w in warnings] == [
        "r.properties:1: amq: user 'ghost' is not in artemis-users.properties; expected a defined user"
    ]


def test_masked_passwords_load_and_an_unreadable_one_is_reported(tmp_path: Path) -> None:
    path = _write_security(tmp_path, "# users\nadmin = ENC(1024:ABCD:EF01)\n", "amq = admin\n")
    cfg, warnings = load_config(path)  # Artemis's one-way form: checked at each login
    assert [u.name for u in cfg.users] == ["admin"] and warnings == []
    (tmp_path / "bad").mkdir()
    path = _write_security(tmp_path / "bad", "# users\nadmin = ENC(not hex)\n", "amq = admin\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    errors = [str(p) for p in caught.value.problems if p.severity == "error"]
    assert len(errors) == 1 and errors[0].startswith(
        "artemis-users.properties:2: admin: ENC(...) password not readable: not a two-way mask"
    ), errors


def test_an_empty_password_warns_at_its_line(tmp_path: Path) -> None:
    """`alice` alone and `bob =` are both a user with an empty password (as java.util.Properties reads
    them), which cannot log in: each is said at its line; a space is a separator, as in Java."""
    users = "# users\nadmin = s3cret\nalice\nbob =\ncarol wonder\n"
    path = _write_security(tmp_path, users, "amq = admin, alice, bob, carol\n")
    cfg, warnings = load_config(path)
    assert [str(w) for w in warnings] == [
        "artemis-users.properties:3: alice: no '=': read as a user with an empty password, and an empty "
        "password cannot log in; expected alice = <password>",
        "artemis-users.properties:4: bob: empty password: an empty password cannot log in; "
        "expected bob = <password>",
    ]
    assert [(u.name, u.password) for u in cfg.users][1:] == [("alice", ""), ("bob", ""), ("carol", "wonder")]


def test_security_on_without_a_roles_file_warns(tmp_path: Path) -> None:
    path = _write_security(tmp_path, "admin = s3cret\n", "")
    (path.parent / "artemis-roles.properties").unlink()
    _, warnings = load_config(path)
    assert [str(w) for w in warnings] == [
        "artemis-roles.properties: security is enabled but there is no roles file: every user is denied "
        "every permission; expected artemis-roles.properties beside broker.xml "
        "(or <security-enabled>false</security-enabled>)"
    ]
    off = path.read_text().replace("<core>", "<core><security-enabled>false</security-enabled>")
    path.write_text(off)
    assert load_config(path)[1] == []  # with security off, neither file matters


def test_missing_explicit_users_file_is_an_error(tmp_path: Path) -> None:
    path = _write_security(tmp_path, "a = b\n", "")
    with pytest.raises(ConfigError) as caught:
        load_config(path, users_file=tmp_path / "nope.properties")
    assert str(caught.value).startswith("nope.properties: cannot read nope.properties")
