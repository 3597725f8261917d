"""SASL on the Kafka listener, pure: PLAIN and SCRAM-SHA-256/512 (issue 22, KIP-43, KIP-84).

- Credentials are kept salted only, as Kafka keeps SCRAM credentials (KIP-84): per user and SCRAM
  mechanism a salt, an iteration count, StoredKey and ServerKey (RFC 5802). No password is kept
  in clear anywhere. A PLAIN login is checked against the user's SCRAM-SHA-512 credential (or
  SCRAM-SHA-256 when only that exists): the password given is salted with the stored salt and
  iterations, and its StoredKey compared, so one credential serves both mechanisms.
- The SCRAM exchanges and key derivations are scramp's (a maintained RFC 5802/7677
  implementation), never our own crypto.
- `SaslExchange` is one connection's authentication, driven by the SaslAuthenticate payloads:
  `step(payload) -> (reply, principal | None)`; it raises `SaslFailed` with the message Kafka
  puts in SaslAuthenticate's error_message (SASL_AUTHENTICATION_FAILED). Principals are
  `User:<name>`, as Kafka's default principal builder names SASL users.
- Kafka's SCRAM specifics: no channel binding (gs2 header `n,,`); the `tokenauth` extension
  (delegation tokens) is refused; at least 4096 iterations (Kafka's minimum).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from scramp import ScramException, ScramMechanism

PLAIN: Final = "PLAIN"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
SCRAM_MECHANISMS: Final = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS: Final = (PLAIN, *SCRAM_MECHANISMS)
MIN_ITERATIONS: Final = 4096  # Kafka's ScramMechanism.minIterations
DEFAULT_ITERATIONS: Final = 8192


class SaslFailed(Exception):
    """Authentication failed: the message goes to the client (SASL_AUTHENTICATION_FAILED)."""


class CredentialsError(ValueError):
    """A users file or credential that cannot be used: refuse to start."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    if mechanism not in SCRAM_MECHANISMS:
        raise CredentialsError(f"unknown SCRAM mechanism {mechanism!r}")
    if iterations < MIN_ITERATIONS:
        raise CredentialsError(f"iterations must be at least {MIN_ITERATIONS}")
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return ScramCredential(mechanism, salt, stored_key, server_key, count)


_HASHES: Final = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}


def credential_from_salted(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """A credential from what AlterUserScramCredentials carries (KIP-554: the client salts the
    password, the server never sees it): StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key") (RFC 5802 section 3). scramp exposes this step
    only privately; these two lines of the standard library's HMAC are pinned against scramp's
    own make_auth_info in the tests."""
    if mechanism not in SCRAM_MECHANISMS:
        raise CredentialsError(f"unknown SCRAM mechanism {mechanism!r}")
    if iterations < MIN_ITERATIONS:
        raise CredentialsError(f"iterations must be at least {MIN_ITERATIONS}")
    name = _HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", name)
    server_key = hmac.digest(salted_password, b"Server Key", name)
    return ScramCredential(
        mechanism, salt, hashlib.new(name, client_key).digest(), server_key, iterations
    )


class Credentials:
    """user -> SCRAM credentials by mechanism."""

    def __init__(self) -> None:
        self._by_user: dict[str, dict[str, ScramCredential]] = {}
        # PLAIN logins already verified: user -> (the credential checked, SHA-256 of its salt and
        # the password). The salted derivation costs milliseconds of CPU (>= 4096 PBKDF2 rounds),
        # paid again by every reconnect of a PLAIN client; a match here costs one hash. Tied to
        # the credential object, so a changed or deleted credential is derived again; a wrong
        # password always pays the full derivation. (Kafka's PLAIN compares the JAAS file's clear
        # passwords; we keep none in clear.)
        self._plain_ok: dict[str, tuple[ScramCredential, bytes]] = {}

    def __len__(self) -> int:
        return len(self._by_user)

    def users(self) -> list[str]:
        return sorted(self._by_user)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def of(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._by_user.get(user, {}))

    def put(self, user: str, credential: ScramCredential) -> None:
        self._by_user.setdefault(user, {})[credential.mechanism] = credential

    def delete(self, user: str, mechanism: str) -> bool:
        mine = self._by_user.get(user)
        if mine is None or mechanism not in mine:
            return False
        del mine[mechanism]
        if not mine:
            del self._by_user[user]
        self._plain_ok.pop(user, None)
        return True

    def add_password(self, user: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> None:
        """Both SCRAM credentials for a user (what a users-file line seeds)."""
        for mechanism in SCRAM_MECHANISMS:
            self.put(user, make_credential(mechanism, password, iterations))

    def check_plain(self, user: str, password: str) -> bool:
        mine = self._by_user.get(user, {})
        credential = mine.get(SCRAM_SHA_512) or mine.get(SCRAM_SHA_256)
        if credential is None:
            return False
        digest = hashlib.sha256(credential.salt + password.encode()).digest()
        known = self._plain_ok.get(user)
        if known is not None and known[0] is credential and hmac.compare_digest(known[1], digest):
            return True
        candidate = make_credential(
            credential.mechanism, password, credential.iterations, credential.salt
        )
        if not hmac.compare_digest(candidate.stored_key, credential.stored_key):
            return False
        self._plain_ok[user] = (credential, digest)
        return True


def parse_users_file(text: str, source: str = "users file") -> list[tuple[str, str]]:
    """Lines `user:password` (blank lines and `#` comments skipped). Raises CredentialsError
    naming the line of the first malformed one."""
    users: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise CredentialsError(f"{source}, line {number}: expected user:password")
        if user in seen:
            raise CredentialsError(f"{source}, line {number}: user {user!r} given twice")
        seen.add(user)
        users.append((user, password))
    return users


def credentials_from(users: Iterable[tuple[str, str]]) -> Credentials:
    credentials = Credentials()
    for user, password in users:
        credentials.add_password(user, password)
    return credentials


class SaslExchange:
    """One connection's SASL authentication with `mechanism`, step by step."""

    def __init__(
        self, mechanism: str, credentials: Credentials, server_nonce: str | None = None
    ) -> None:
        """`server_nonce`: SCRAM's server nonce, random unless given (a test pins the RFC's)."""
        if mechanism not in MECHANISMS:
            raise ValueError(mechanism)
        self.mechanism = mechanism
        self._credentials = credentials
        self._user: str | None = None
        self._server = None
        if mechanism in SCRAM_MECHANISMS:
            self._server = ScramMechanism(mechanism).make_server(
                self._auth_info, s_nonce=server_nonce
            )
        self.principal: str | None = None

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        credential = self._credentials.get(user, self.mechanism)
        if credential is None:
            # scramp raises it out of set_client_first and _scram answers every ScramException
            # with one message: this one is never seen.
            raise ScramException("unknown user")  # pragma: no mutate
        self._user = user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, payload: bytes) -> tuple[bytes, str | None]:
        """The reply to one SaslAuthenticate payload, and the principal once authenticated."""
        if self.principal is not None:
            raise SaslFailed("already authenticated")
        if self._server is None:
            return b"", self._plain(payload)
        return self._scram(payload)

    def _plain(self, payload: bytes) -> str:
        parts = payload.split(b"\0")
        if len(parts) != 3:
            raise SaslFailed("Invalid SASL/PLAIN request: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslFailed("Invalid SASL/PLAIN request: not UTF-8") from None
        if not user or not password:
            raise SaslFailed("Authentication failed: username or password empty")
        if authzid and authzid != user:
            raise SaslFailed("Authentication failed: authorization id differs from user")
        if not self._credentials.check_plain(user, password):
            raise SaslFailed("Authentication failed: Invalid username or password")
        self.principal = f"User:{user}"
        return self.principal

    def _scram(self, payload: bytes) -> tuple[bytes, str | None]:
        server = self._server
        assert server is not None
        try:
            text = payload.decode()
        except UnicodeDecodeError:
            raise SaslFailed("Authentication failed: SCRAM message not UTF-8") from None
        try:
            if self._user is None:
                if not text.startswith("n,"):
                    raise SaslFailed("Authentication failed: channel binding is not supported")
                if ",tokenauth=" in text:  # Kafka's extension for delegation tokens
                    raise SaslFailed("Authentication failed: delegation tokens are not supported")
                server.set_client_first(text)
                return server.get_server_first().encode(), None
            server.set_client_final(text)
            reply = server.get_server_final().encode()
        except ScramException:
            raise SaslFailed(
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            ) from None
        self.principal = f"User:{self._user}"
        return reply, self.principal
