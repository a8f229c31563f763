"""SCRAM: the RFC 7677 test vector, client <-> server exchanges, and every failure path."""

import base64

import pytest

from broker_core.security import (
    ScramClient,
    ScramError,
    ScramMechanism,
    ScramServer,
    StoredCredentials,
    derive_credentials,
)
from broker_core.security.scram import escape_username, unescape_username

# RFC 7677 section 3.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

SHA256 = ScramMechanism.SHA_256


def rfc_server() -> ScramServer:
    creds = derive_credentials("pencil", RFC_SALT, 4096, SHA256)
    return ScramServer(SHA256, {"user": creds}.get, nonce_factory=lambda: RFC_SERVER_NONCE)


def test_rfc7677_vector_server_side() -> None:
    server = rfc_server()
    assert server.step(RFC_CLIENT_FIRST) == (RFC_SERVER_FIRST, False, False, None)
    assert server.step(RFC_CLIENT_FINAL) == (RFC_SERVER_FINAL, True, True, "user")
    assert server.done


def test_rfc7677_vector_client_side() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


def exchange(server: ScramServer, client: ScramClient) -> tuple[bool, str | None, bytes]:
    first = server.step(client.first())
    assert not first.done
    final = server.step(client.final(first.server_bytes))
    assert final.done
    return final.ok, final.user, final.server_bytes


def store(users: dict[str, str], mechanism: ScramMechanism) -> dict[str, StoredCredentials]:
    return {u: derive_credentials(p, b"salt-" + u.encode(), 4096, mechanism) for u, p in users.items()}


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("user", ["alice", "a,b=c", "zoë"])
def test_client_and_server_agree(mechanism: ScramMechanism, user: str) -> None:
    server = ScramServer(mechanism, store({user: "s3cret"}, mechanism).get)
    client = ScramClient(mechanism, user, "s3cret")
    ok, authenticated, server_final = exchange(server, client)
    assert (ok, authenticated) == (True, user)
    client.verify(server_final)


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_wrong_password_fails_with_invalid_proof(mechanism: ScramMechanism) -> None:
    server = ScramServer(mechanism, store({"alice": "right"}, mechanism).get)
    client = ScramClient(mechanism, "alice", "wrong")
    assert exchange(server, client) == (False, None, b"e=invalid-proof")
    with pytest.raises(ScramError, match="invalid-proof"):
        client.verify(b"e=invalid-proof")


def test_unknown_user_looks_like_wrong_password() -> None:
    secret = b"k" * 32
    servers = [ScramServer(SHA256, store({}, SHA256).get, mock_secret=secret) for _ in range(2)]
    firsts = [s.step(ScramClient(SHA256, "ghost", "x", nonce="n1").first()) for s in servers]
    salts = [dict(p.split("=", 1) for p in f.server_bytes.decode().split(","))["s"] for f in firsts]
    assert salts[0] == salts[1]  # stable fake salt: no tell-tale change between attempts
    assert b",i=4096" in firsts[0].server_bytes
    client = ScramClient(SHA256, "ghost", "x", nonce="n1")
    client.first()
    final = servers[0].step(client.final(firsts[0].server_bytes))
    assert final == (b"e=invalid-proof", True, False, None)


def test_credentials_for_another_mechanism_are_refused() -> None:
    server = ScramServer(SHA256, store({"alice": "pw"}, ScramMechanism.SHA_512).get)
    assert exchange(server, ScramClient(SHA256, "alice", "pw"))[0] is False


@pytest.mark.parametrize(
    ("client_first", "error"),
    [
        (b"p=tls-unique,,n=user,r=abc", b"e=channel-binding-not-supported"),
        (b"x,,n=user,r=abc", b"e=invalid-encoding"),
        (b"n,,r=abc,n=user", b"e=invalid-encoding"),
        (b"n,,n=user", b"e=invalid-encoding"),
        (b"n,,n=user,r=", b"e=invalid-encoding"),
        (b"n,,n=user,r=abc,m=ext", b"e=extensions-not-supported"),
        (b"n,a=admin,n=user,r=abc", b"e=other-error"),
        (b"n,zz,n=user,r=abc", b"e=invalid-encoding"),
        (b"n,,n=us=41er,r=abc", b"e=invalid-username-encoding"),
        (b"\xff\xfe", b"e=invalid-encoding"),
        (b"", b"e=invalid-encoding"),
    ],
)
def test_bad_client_first(client_first: bytes, error: bytes) -> None:
    server = rfc_server()
    assert server.step(client_first) == (error, True, False, None)
    with pytest.raises(RuntimeError):
        server.step(b"n,,n=user,r=abc")


def test_authzid_equal_to_user_is_accepted() -> None:
    server = rfc_server()
    assert not server.step(b"n,a=user,n=user,r=abc").done


@pytest.mark.parametrize(
    ("client_final", "error"),
    [
        (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), b"e=channel-bindings-dont-match"),
        (RFC_CLIENT_FINAL.replace(b"$k0,", b"$k1,"), b"e=other-error"),
        (RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"), b"e=invalid-proof"),
        (RFC_CLIENT_FINAL.split(b",p=")[0], b"e=invalid-encoding"),
        (RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=!!"), b"e=invalid-encoding"),
        (b"c=biws,p=abcd", b"e=invalid-encoding"),
        (RFC_CLIENT_FINAL[:-8] + b"==", b"e=invalid-proof"),  # valid base64, proof too short
    ],
)
def test_bad_client_final(client_final: bytes, error: bytes) -> None:
    server = rfc_server()
    server.step(RFC_CLIENT_FIRST)
    assert server.step(client_final) == (error, True, False, None)


def test_client_rejects_a_server_that_does_not_know_the_password() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    client.final(RFC_SERVER_FIRST)
    with pytest.raises(ScramError, match="server signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize(
    "server_first",
    [
        b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",  # nonce does not extend ours
        b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",  # server added nothing
        b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=many",
        b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096",
    ],
)
def test_client_rejects_bad_server_first(server_first: bytes) -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    with pytest.raises(ScramError):
        client.final(server_first)


def test_client_refuses_weak_iteration_count() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    with pytest.raises(ScramError, match="below the minimum"):
        client.final(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1")


def test_secrets_stay_out_of_reprs() -> None:
    creds = derive_credentials("pencil", RFC_SALT, 4096, SHA256)
    client = ScramClient(SHA256, "user", "pencil")
    assert creds.stored_key.hex() not in repr(creds)
    assert "stored_key" not in repr(creds)
    assert "pencil" not in repr(client)


@pytest.mark.parametrize("name", ["plain", "a,b", "a=b", "=2C", ",=,"])
def test_username_escaping_round_trips(name: str) -> None:
    escaped = escape_username(name)
    assert "," not in escaped
    assert unescape_username(escaped) == name
