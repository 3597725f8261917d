"""SASL PLAIN and SCRAM on the server side (coordinator.security.sasl).

SCRAM is driven by scramp's client, and by the RFC 7677 section 3 example exchange (an
independent, published vector: user "user", password "pencil", its salt, nonces and proofs)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from scramp import ScramClient

from coordinator.security import sasl
from coordinator.security.sasl import (
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    Credentials,
    CredentialsError,
    SaslExchange,
    SaslFailed,
    credential_from_salted,
    credentials_from,
    make_credential,
    parse_users_file,
)

USERS = credentials_from([("alice", "alice-secret"), ("bob", "b0b")])


def test_plain_accepts_the_password_and_names_the_principal() -> None:
    exchange = SaslExchange(PLAIN, USERS)
    assert exchange.step(b"\0alice\0alice-secret") == (b"", "User:alice")
    assert exchange.principal == "User:alice"
    assert SaslExchange(PLAIN, USERS).step(b"alice\0alice\0alice-secret")[1] == "User:alice"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"\0bob\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"bob\0alice\0alice-secret",
         "Authentication failed: authorization id differs from user"),
        (b"\0alice", "Invalid SASL/PLAIN request: expected 3 tokens"),
        (b"\0\0x", "Authentication failed: username or password empty"),
        (b"\0\xff\0x", "Invalid SASL/PLAIN request: not UTF-8"),
    ],
)
def test_plain_refuses(payload: bytes, message: str) -> None:
    """The messages are the client's (SaslAuthenticate's error_message), word for word (Kafka's
    PlainSaslServer's where it has one)."""
    with pytest.raises(SaslFailed) as refused:
        SaslExchange(PLAIN, USERS).step(payload)
    assert str(refused.value) == message


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_with_a_real_client(mechanism: str) -> None:
    client = ScramClient([mechanism], "alice", "alice-secret")
    exchange = SaslExchange(mechanism, USERS)
    server_first, principal = exchange.step(client.get_client_first().encode())
    assert principal is None
    client.set_server_first(server_first.decode())
    server_final, principal = exchange.step(client.get_client_final().encode())
    assert principal == "User:alice"
    client.set_server_final(server_final.decode())  # raises if the server's signature is wrong


@pytest.mark.parametrize(("user", "password"), [("alice", "nope"), ("mallory", "alice-secret")])
def test_scram_refuses_a_wrong_password_or_user(user: str, password: str) -> None:
    client = ScramClient([SCRAM_SHA_512], user, password)
    exchange = SaslExchange(SCRAM_SHA_512, USERS)
    with pytest.raises(SaslFailed, match="invalid credentials"):
        server_first, _ = exchange.step(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        exchange.step(client.get_client_final().encode())
    assert exchange.principal is None


def test_scram_refuses_channel_binding_and_delegation_tokens() -> None:
    with pytest.raises(SaslFailed,
                       match=r"^Authentication failed: channel binding is not supported$"):
        SaslExchange(SCRAM_SHA_256, USERS).step(b"p=tls-unique,,n=alice,r=abc")
    with pytest.raises(SaslFailed,
                       match=r"^Authentication failed: delegation tokens are not supported$"):
        SaslExchange(SCRAM_SHA_256, USERS).step(b"n,,n=alice,r=abc,tokenauth=true")


def test_the_rfc_7677_example_exchange() -> None:
    """RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil", 4096 iterations."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credentials = Credentials()
    credentials.put("user", make_credential(SCRAM_SHA_256, "pencil", 4096, salt))
    # The server nonce is random; pinned to the RFC's.
    exchange = SaslExchange(SCRAM_SHA_256, credentials, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first, _ = exchange.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final, principal = exchange.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert principal == "User:user"


def test_credentials_are_salted_and_plain_checks_them() -> None:
    credentials = credentials_from([("carol", "s3cret")])
    for mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
        c = credentials.get("carol", mechanism)
        assert c is not None and c.iterations >= 4096 and len(c.salt) >= 16
        assert b"s3cret" not in c.salt + c.stored_key + c.server_key
    assert credentials.check_plain("carol", "s3cret")
    assert not credentials.check_plain("carol", "s3cre")
    credentials.delete("carol", SCRAM_SHA_512)
    assert credentials.check_plain("carol", "s3cret")  # falls back to SCRAM-SHA-256
    credentials.delete("carol", SCRAM_SHA_256)
    assert not credentials.check_plain("carol", "s3cret") and credentials.users() == []


def test_a_verified_plain_login_is_not_derived_again(monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = credentials_from([("carol", "s3cret")])
    derived: list[str] = []

    def counting(mechanism: str, password: str, *args: Any) -> sasl.ScramCredential:
        derived.append(password)
        return make_credential(mechanism, password, *args)

    monkeypatch.setattr(sasl, "make_credential", counting)
    assert credentials.check_plain("carol", "s3cret") and derived == ["s3cret"]
    assert credentials.check_plain("carol", "s3cret") and derived == ["s3cret"]  # remembered
    # A wrong password always pays the derivation, and is refused.
    assert not credentials.check_plain("carol", "s3cre") and derived[-1] == "s3cre"
    # A new credential (AlterUserScramCredentials) forgets what the old one accepted.
    credentials.put("carol", make_credential(SCRAM_SHA_512, "n3w"))
    assert not credentials.check_plain("carol", "s3cret")
    assert credentials.check_plain("carol", "n3w")
    credentials.delete("carol", SCRAM_SHA_512)
    credentials.delete("carol", SCRAM_SHA_256)
    assert not credentials.check_plain("carol", "n3w")


def test_users_file() -> None:
    text = "# team\nalice:pw:with:colons\n\nbob:x\n"
    assert parse_users_file(text) == [("alice", "pw:with:colons"), ("bob", "x")]
    for bad, line in (("alice\n", 1), ("ok:1\n:nouser\n", 2), ("a:1\na:2\n", 2), ("a:\n", 1)):
        with pytest.raises(CredentialsError, match=f"line {line}"):
            parse_users_file(bad)
    with pytest.raises(CredentialsError, match="at least 4096"):
        make_credential(SCRAM_SHA_256, "pw", iterations=100)


@pytest.mark.parametrize(("mechanism", "hash_name"), [(SCRAM_SHA_256, "sha256"),
                                                       (SCRAM_SHA_512, "sha512")])
def test_a_credential_from_a_salted_password_matches_scramps(mechanism: str,
                                                             hash_name: str) -> None:
    """AlterUserScramCredentials carries Hi(password, salt, i) (RFC 5802's SaltedPassword,
    i.e. PBKDF2-HMAC): the keys derived from it equal scramp's from the password itself."""
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac(hash_name, b"pencil", salt, 4096)
    ours = credential_from_salted(mechanism, salt, salted, 4096)
    assert ours == make_credential(mechanism, "pencil", 4096, salt)


def test_users_file_errors_name_their_source_and_indented_comments_are_skipped() -> None:
    text = "  # an indented comment\n\t#another\n   \nalice:pw\n"
    assert parse_users_file(text) == [("alice", "pw")]
    with pytest.raises(CredentialsError, match=r"^users file, line 2: expected user:password$"):
        parse_users_file("a:1\nbroken\n")
    with pytest.raises(CredentialsError, match=r"^/etc/users, line 2: user 'a' given twice$"):
        parse_users_file("a:1\na:2\n", "/etc/users")


def test_bad_scram_credentials_and_messages_are_refused_with_what_is_wrong() -> None:
    with pytest.raises(CredentialsError, match=r"^unknown SCRAM mechanism 'PLAIN'$"):
        make_credential(PLAIN, "pw")
    with pytest.raises(ValueError, match=r"^GSSAPI$"):
        SaslExchange("GSSAPI", USERS)
    exchange = SaslExchange(PLAIN, USERS)
    exchange.step(b"\0alice\0alice-secret")
    with pytest.raises(SaslFailed, match=r"^already authenticated$"):
        exchange.step(b"\0alice\0alice-secret")
    with pytest.raises(CredentialsError, match=r"^unknown SCRAM mechanism 'SCRAM-SHA-1'$"):
        credential_from_salted("SCRAM-SHA-1", b"salt", b"x" * 32, 4096)
    with pytest.raises(CredentialsError, match=r"^iterations must be at least 4096$"):
        credential_from_salted(SCRAM_SHA_256, b"salt", b"x" * 32, 4095)
    with pytest.raises(SaslFailed, match=r"^Authentication failed: SCRAM message not UTF-8$"):
        SaslExchange(SCRAM_SHA_256, USERS).step(b"n,,n=alice,r=\xff")


def test_credentials_keep_their_iterations_and_delete_one_mechanism() -> None:
    assert make_credential(SCRAM_SHA_256, "pw", 5000).iterations == 5000
    credentials = Credentials()
    credentials.add_password("alice", "pw", iterations=4097)
    assert credentials.get("alice", SCRAM_SHA_512).iterations == 4097  # type: ignore[union-attr]
    assert credentials.get("nobody", SCRAM_SHA_256) is None
    assert not credentials.delete("nobody", SCRAM_SHA_256)
    assert credentials.delete("alice", SCRAM_SHA_256)
    assert not credentials.delete("alice", SCRAM_SHA_256)  # gone already; the user is not
    assert credentials.users() == ["alice"] and credentials.check_plain("alice", "pw")
    assert credentials.delete("alice", SCRAM_SHA_512) and credentials.users() == []
