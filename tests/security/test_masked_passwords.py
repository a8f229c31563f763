"""Artemis's masked passwords, checked against values Artemis 2.40's own tools wrote: `artemis create
--user admin --password admin` (the users file's one-way hash), `artemis mask` (two-way, the default key
and another), `artemis mask --hash`."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.config import ConfigError, load_config
from broker_core.config.errors import ProblemLog
from broker_core.config.model import User
from broker_core.config.users import load_users
from broker_core.inbound_sasl import mechanisms
from broker_core.security import ScramMechanism, UserStore, masked

# artemis create --user admin --password admin: its artemis-users.properties line
CREATED_ADMIN = (
    "1024:71A1B95D244211C2C966435F7E19517568DBE79A4811CB9D2579E097EFB8AC9E:8879CE7897775C970322B7F40C6C1E7"
    "3A7176FDDA408D5A62AF63502F4744AB12CE43BE3B7DE7B98576C5617941323BAFE6F760CFF9DDEB2A075A4FB3E05F6C2"
)
# artemis mask --hash admin
HASHED_ADMIN = (
    "1024:E42710511354DB95E9B75AB4C765D2E96DCD44F2DDA8503C8A0845E4FF132862:57A0533D42F93C8AF9CC6F8C6680DDF"
    "3E5586DE79FE272C7458CA3A08D55B09570BD4A85CF4BF5A0A5FE1523F4B17B5B7EA4B7774797F91A93B8CFB1A1A8C580"
)
# artemis mask PASSWORD (two-way, the default key "clusterpassword")
MASKED = {
    "admin": "-4db652271cf8b661",
    "secret": "-41e444c3ed07d6dd",
    "x": "-2dbd0e4caa70a911",
    "a longer password with spaces": "7b43caeb9ceedf31540f7e47381c33d96563098bb50c7fcf76ae02754de4d710",
    "ünïcode-pässword": "-60810c487a55ebd90739181803f9ca9076107e0038239189",
}


@pytest.mark.parametrize("mask", [CREATED_ADMIN, HASHED_ADMIN])
def test_a_one_way_hash_verifies_its_password_only(mask: str) -> None:
    assert masked.is_one_way(mask)
    assert masked.verify(mask, "admin")
    assert (
        not masked.verify(mask, "Admin") and not masked.verify(mask, "") and not masked.verify(mask, "admin ")
    )


def test_a_hash_made_here_is_one_artemis_would_verify() -> None:
    salt = bytes.fromhex("71A1B95D244211C2C966435F7E19517568DBE79A4811CB9D2579E097EFB8AC9E")
    assert masked.hash_password("admin", salt) == CREATED_ADMIN


@pytest.mark.parametrize("password", sorted(MASKED))
def test_two_way_masks_decode_and_encode_as_artemis_does(password: str) -> None:
    assert masked.decode(MASKED[password]) == password
    assert masked.encode(password) == MASKED[password]


def test_a_two_way_mask_with_another_key() -> None:
    assert masked.decode("3b1cf0aaf701f16e", key="myKey12345") == "secret"  # artemis mask --key=myKey12345
    with pytest.raises(masked.MaskError):
        masked.decode("3b1cf0aaf701f16e")  # not under the default key


def test_enc_is_recognised_and_nonsense_is_refused() -> None:
    assert masked.masked("ENC(-4db652271cf8b661)") == "-4db652271cf8b661"
    assert masked.masked(" ENC( abc ) ") == "abc"
    assert masked.masked("plain") is None and masked.masked("ENC(") is None
    for bad in ("zz", "1024:nothex:00", ""):
        with pytest.raises(masked.MaskError):
            masked.decode(bad) if ":" not in bad else masked.verify(bad, "x")
    with pytest.raises(masked.MaskError):
        masked.verify("0:00:00", "x")


# ---------------------------------------------------------------------- the users file and the store


def _users(tmp_path: Path, text: str) -> tuple[tuple[User, ...], ProblemLog]:
    path = tmp_path / "artemis-users.properties"
    path.write_text(text)
    log = ProblemLog(path.name)
    return load_users(path, log), log


def test_the_users_file_takes_both_masked_forms(tmp_path: Path) -> None:
    users, log = _users(
        tmp_path, f"admin = ENC({CREATED_ADMIN})\nbob = ENC({MASKED['secret']})\ncarol = plain\n"
    )
    assert log.problems == []
    store = UserStore({u.name: u.password for u in users}, {})
    assert store.check_plain("admin", "admin") and not store.check_plain("admin", "wrong")
    assert store.check_plain("bob", "secret")  # a two-way mask is decoded when read
    assert store.check_plain("carol", "plain")
    assert store.hashed_users == {"admin"}
    assert store.check_sasl_plain(b"\0admin\0admin") == "admin"


def test_a_hashed_user_cannot_use_scram_and_scram_is_not_offered(tmp_path: Path) -> None:
    users, _ = _users(tmp_path, f"admin = ENC({CREATED_ADMIN})\n")
    store = UserStore({u.name: u.password for u in users}, {})
    assert store.scram_credentials("admin", ScramMechanism.SHA_512) is None
    assert mechanisms(True, scram=not store.hashed_users) == ("PLAIN",)
    assert "SCRAM-SHA-512" in mechanisms(True, scram=True)


def test_an_unreadable_mask_is_an_error_at_its_line(tmp_path: Path) -> None:
    users, log = _users(tmp_path, "ok = fine\nadmin = ENC(not-a-mask)\nbob = ENC(0:00:00)\n")
    assert [u.name for u in users] == ["ok"]
    [first, second] = log.problems
    assert (first.line, first.severity, first.element_path) == (2, "error", "admin")
    assert "ENC(...) password not readable" in first.message and "artemis user add" in (first.expected or "")
    assert (second.line, second.severity) == (3, "error")


# ------------------------------------------------------------------------------- broker.xml passwords


def _broker_xml(tmp_path: Path, password: str) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir(parents=True)
    path = etc / "broker.xml"
    path.write_text(
        '<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core"><name>b</name>'
        "<security-enabled>false</security-enabled>"
        f"<cluster-user>cluster</cluster-user><cluster-password>{password}</cluster-password>"
        '<broker-connections><amqp-connection uri="tcp://127.0.0.1:5673" name="dc2" user="mirror" '
        f'password="{password}"><mirror/></amqp-connection></broker-connections>'
        "</core></configuration>"
    )
    return path


def test_passwords_the_broker_sends_may_be_masked_two_way(tmp_path: Path) -> None:
    config, _ = load_config(_broker_xml(tmp_path, f"ENC({MASKED['secret']})"))
    assert config.cluster_password == "secret"
    assert config.broker_connections[0].password == "secret"


def test_a_one_way_hash_cannot_be_sent_and_says_so_at_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_broker_xml(tmp_path, f"ENC({HASHED_ADMIN})"))
    said = [str(p) for p in caught.value.problems]
    assert len(said) == 2 and all("a one-way hash (ENC(n:salt:hash)) cannot be sent" in s for s in said), said
    assert any("cluster-password" in s for s in said) and any("amqp-connection" in s for s in said)
