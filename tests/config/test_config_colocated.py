"""`<colocated>`: read with the reference's defaults and checked (each bad value an error naming the file,
line, element and what is expected); a hosted backup's configuration made from its host's: its name,
ports moved by n x backup-port-offset (excluded connectors, `doNotOffset` and HTTP-upgrade transports
keep theirs), directories (replication: the name appended; shared store: the requester's); a hosted
backup's `<scale-down>` naming no member goes to its host."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import WriteConfig

from broker_core.config import load_config
from broker_core.config.colocated import (
    HOST_CONNECTOR,
    PRIMARY_CONNECTOR,
    BackupRequest,
    backup_config,
    backup_name,
    backup_request,
)
from broker_core.config.errors import ConfigError
from broker_core.config.model import HaKind, HaRole

SEC = "<security-enabled>false</security-enabled>\n"
TRANSPORTS = """
<acceptors>
  <acceptor name="amqp">tcp://0.0.0.0:61616</acceptor>
  <acceptor name="http">tcp://0.0.0.0:8080?httpUpgradeEnabled=true</acceptor>
  <acceptor name="kept">tcp://0.0.0.0:5672?doNotOffset=true</acceptor>
</acceptors>
<connectors>
  <connector name="self">tcp://node-a:61616</connector>
  <connector name="self-http">tcp://node-a:8080?httpUpgradeEnabled=true</connector>
  <connector name="other">tcp://node-b:61616</connector>
  <connector name="remote">tcp://quorum:61616</connector>
  <connector name="kept">tcp://node-a:5672?doNotOffset=true</connector>
</connectors>
<cluster-connections><cluster-connection name="c">
  <connector-ref>self</connector-ref>
  <static-connectors><connector-ref>other</connector-ref></static-connectors>
</cluster-connection></cluster-connections>
"""


def load(write_config: WriteConfig, body: str):  # type: ignore[no-untyped-def]
    return load_config(write_config(SEC + body))


def errors(write_config: WriteConfig, body: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + body))
    return [str(p) for p in info.value.problems if p.severity == "error"]


def policy(kind: str, colocated: str) -> str:
    return f"<ha-policy><{kind}><colocated>{colocated}</colocated></{kind}></ha-policy>"


def test_defaults_are_the_references(write_config: WriteConfig) -> None:
    config, problems = load(write_config, policy("replication", "<primary/><backup/>"))
    assert problems == []
    ha = config.ha_policy
    assert (ha.kind, ha.role) == (HaKind.REPLICATION, HaRole.PRIMARY)
    c = ha.colocated
    assert c is not None
    assert (c.request_backup, c.max_backups, c.backup_request_retries, c.backup_request_retry_interval) == (
        False,
        1,
        -1,
        5000,
    )
    assert c.backup_port_offset == 100 and c.excludes == ()
    assert (c.backup.kind, c.backup.role, c.backup.restart_backup) == (
        HaKind.REPLICATION,
        HaRole.BACKUP,
        False,
    )


def test_parameters_and_nested_roles_are_read(write_config: WriteConfig) -> None:
    body = policy(
        "replication",
        "<request-backup>true</request-backup><max-backups>3</max-backups>"
        "<backup-request-retries>44</backup-request-retries>"
        "<backup-request-retry-interval>33</backup-request-retry-interval>"
        "<backup-port-offset>7</backup-port-offset>"
        "<excludes><connector-ref>remote</connector-ref></excludes>"
        "<primary><group-name>purple</group-name><check-for-active-server>true</check-for-active-server>"
        "</primary><backup><group-name>tiddles</group-name><restart-backup>true</restart-backup>"
        "<max-saved-replicated-journals-size>22</max-saved-replicated-journals-size></backup>",
    )
    config, _ = load(write_config, TRANSPORTS + body)
    ha = config.ha_policy
    c = ha.colocated
    assert c is not None
    assert (c.request_backup, c.max_backups, c.backup_request_retries) == (True, 3, 44)
    assert (c.backup_request_retry_interval, c.backup_port_offset, c.excludes) == (33, 7, ("remote",))
    assert (ha.group_name, ha.check_for_active_server) == ("purple", True)
    assert (c.backup.group_name, c.backup.max_saved_replicated_journals_size) == ("tiddles", 22)
    assert c.backup.restart_backup is False  # a hosted backup never restarts as a backup (the reference's)


def test_bad_values_are_clear_errors(write_config: WriteConfig) -> None:
    found = errors(
        write_config,
        TRANSPORTS
        + policy(
            "shared-store",
            "<max-backups>-1</max-backups><backup-port-offset>0</backup-port-offset>"
            "<request-backup>maybe</request-backup><excludes><connector-ref>nowhere</connector-ref></excludes>"
            "<primary><allow-failback>true</allow-failback></primary><backup-count>2</backup-count>",
        ),
    )
    text = "\n".join(found)
    assert "broker.xml:" in text
    assert "colocated/max-backups" in text and "colocated/backup-port-offset" in text
    assert "colocated/request-backup" in text
    assert "no <connector> named 'nowhere'" in text
    assert "<allow-failback> does not apply to <shared-store><primary>" in text
    assert "colocated/backup-count" in text  # a name Artemis does not have
    assert len(found) == 6, found


def test_two_primaries_in_colocated_is_an_error(write_config: WriteConfig) -> None:
    found = errors(write_config, policy("replication", "<primary/><primary/>"))
    assert any("more than one <primary> in <colocated>" in e for e in found)


def host(write_config: WriteConfig, kind: str = "replication", offset: int = 100):  # type: ignore[no-untyped-def]
    body = policy(
        kind,
        f"<backup-port-offset>{offset}</backup-port-offset>"
        "<excludes><connector-ref>remote</connector-ref></excludes><primary/><backup/>",
    )
    return load(write_config, TRANSPORTS + body)[0]


def request(
    connector: str = "tcp://node-b:61616", directories: dict[str, str] | None = None
) -> BackupRequest:
    return BackupRequest("node-b", "id-b", connector, directories)


def test_naming_is_two_digits() -> None:
    assert [backup_name(n) for n in (1, 2, 10)] == [
        "colocated_backup_01",
        "colocated_backup_02",
        "colocated_backup_10",
    ]


def test_ports_move_by_n_offsets_but_excluded_upgrade_and_do_not_offset_keep_theirs(
    write_config: WriteConfig,
) -> None:
    config = host(write_config)
    second = backup_config(config, 2, request())
    assert second.name == "colocated_backup_02"
    # the HTTP-upgrade and doNotOffset acceptors are the host's: the backup does not listen on them
    assert [(a.name, a.port) for a in second.acceptors] == [("amqp", 61816)]
    ports = {c.name: c.uri for c in second.connectors}
    assert ports["self"] == "tcp://node-a:61816"
    assert ports["other"] == "tcp://node-b:61816"
    assert ports["remote"] == "tcp://quorum:61616"  # excluded
    assert ports["kept"] == "tcp://node-a:5672?doNotOffset=true"
    assert (
        ports["self-http"]
        == "tcp://node-a:8080?httpUpgradeEnabled=true;activemqServerName=colocated_backup_02"
    )
    assert backup_config(host(write_config, offset=33), 1, request()).acceptors[0].port == 61649


def test_the_backup_follows_the_requester_with_the_backup_policy(write_config: WriteConfig) -> None:
    backup = backup_config(host(write_config), 1, request("tcp://node-b:8080?httpUpgradeEnabled=true"))
    assert (backup.ha_policy.kind, backup.ha_policy.role) == (HaKind.REPLICATION, HaRole.BACKUP)
    assert backup.ha_policy.colocated is None
    partner = backup.ha_partner()
    assert partner is not None and partner.name == PRIMARY_CONNECTOR
    assert partner.uri == "tcp://node-b:8080?httpUpgradeEnabled=true"  # as the requester named itself
    assert backup.cluster_connection() is not None


def test_replication_directories_have_the_name_appended(write_config: WriteConfig) -> None:
    config = host(write_config)
    backup = backup_config(config, 1, request())
    for field in ("journal_directory", "bindings_directory", "paging_directory", "large_messages_directory"):
        assert getattr(backup, field) == Path(f"{getattr(config, field)}_colocated_backup_01"), field


def test_shared_store_directories_are_the_requesters(write_config: WriteConfig, tmp_path: Path) -> None:
    config = host(write_config, "shared-store")
    asking = config.model_copy(update={"journal_directory": tmp_path / "b-journal", "name": "node-b"})
    ask = backup_request(asking, "id-b")
    assert ask.directories is not None and ask.connector == "tcp://node-a:61616"  # its connector-ref
    backup = backup_config(config, 1, ask)
    assert backup.journal_directory == tmp_path / "b-journal"
    assert backup.node_manager_lock_directory == tmp_path / "b-journal"  # the lock lives with the journal
    assert backup.paging_directory == config.paging_directory


@pytest.mark.parametrize("kind", ["replication", "shared-store"])
def test_a_hosted_backups_scale_down_naming_no_member_goes_to_its_host(
    write_config: WriteConfig, kind: str
) -> None:
    body = "<primary/><backup><scale-down><group-name>g1</group-name></scale-down></backup>"
    config, _ = load(write_config, TRANSPORTS + policy(kind, body))
    colocated = config.ha_policy.colocated
    assert colocated is not None and colocated.backup.scale_down is not None
    assert colocated.backup.scale_down.connectors == ()  # accepted without members: it has its host
    backup = backup_config(config, 1, request())
    scale_down = backup.ha_policy.scale_down
    assert scale_down is not None and scale_down.connectors == (HOST_CONNECTOR,)
    assert scale_down.group_name == "g1"
    to_host = {c.name: c.uri for c in backup.connectors}[HOST_CONNECTOR]
    assert to_host == "tcp://node-a:61616"  # the host's own connector-ref, not offset
    # members named: those, as any backup's (moved as its other connectors are)
    named = "<primary/><backup><scale-down><connectors><connector-ref>other</connector-ref></connectors>"
    config, _ = load(write_config, TRANSPORTS + policy(kind, named + "</scale-down></backup>"))
    backup = backup_config(config, 1, request())
    assert backup.ha_policy.scale_down is not None and backup.ha_policy.scale_down.connectors == ("other",)
    assert HOST_CONNECTOR not in {c.name for c in backup.connectors}


def test_a_stand_alone_backups_scale_down_still_needs_members(write_config: WriteConfig) -> None:
    body = "<ha-policy><replication><backup><scale-down/></backup></replication></ha-policy>"
    assert any("needs the members" in e for e in errors(write_config, body))
