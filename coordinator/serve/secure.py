"""The Kafka listener's security (issue 22): TLS, SASL (KIP-43, KIP-152, KIP-368) and the ACL gate.

With `--security-protocol PLAINTEXT` and `--authorizer none` (the defaults) none of this runs:
the server's connections are the plain ones with their fast paths, and nothing here is on the
request path. Otherwise every connection is a `SecureConnection` and `Gate` sees every request
before it is routed:
- SASL_PLAINTEXT / SASL_SSL: until SaslHandshake + SaslAuthenticate succeed, only ApiVersions
  and the SASL requests are served; anything else closes the connection, as Kafka's
  SaslServerAuthenticator does. A failed authentication answers SASL_AUTHENTICATION_FAILED with
  the reason and closes the connection. With `--sasl-session-lifetime-ms` (Kafka's
  connections.max.reauth.ms) the answer carries session_lifetime_ms, the client
  re-authenticates on the same connection before it runs out (KIP-368; the principal must stay
  the same), and a connection whose session ran out is closed at its next request.
- SSL / SASL_SSL: the listener is TLS (the loop's own TLS transport: our epoll listener,
  coordinator.serve.listener, carries plaintext only). With `--ssl-cafile` client certificates
  are required and verified, and on an SSL listener the principal is `User:` + the
  certificate's subject (RFC 2253, as Kafka's default principal builder names it).
- `--authorizer acl`: every request is judged by coordinator.serve.authz's matrix against the
  ACLs (coordinator.security.acl): refused whole, or routed without what it may not touch and
  its answer amended. Every denial and every ACL or credential change is logged on the
  `groupcoord.audit` logger.

Principals: `User:ANONYMOUS` on a PLAINTEXT listener (as Kafka), the SASL user, or the
certificate subject.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode

from coordinator.broker import security_admin
from coordinator.broker.answers import make
from coordinator.security.acl import ANONYMOUS, Caller, Operation, Resource, ResourceType
from coordinator.security.sasl import (
    MECHANISMS,
    Credentials,
    SaslExchange,
    SaslFailed,
    ScramCredential,
)
from coordinator.serve import adapters, authz
from coordinator.serve.lifecycle import OncePerKey
from protocol import apis, codec
from protocol.codec import RequestHeader

log = logging.getLogger("groupcoord.security")
audit = logging.getLogger("groupcoord.audit")

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
_BEFORE_AUTH: Final = frozenset({apis.API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
_RDN_NAMES: Final = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


@dataclass(frozen=True, slots=True)
class SecurityOptions:
    protocol: str = "PLAINTEXT"
    mechanisms: tuple[str, ...] = MECHANISMS
    authorizer: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    session_lifetime_ms: int = 0  # connections.max.reauth.ms; 0 = sessions do not expire
    ssl_context: ssl.SSLContext | None = None
    users: tuple[tuple[str, str], ...] = ()  # --sasl-users-file, parsed

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def active(self) -> bool:
        return self.sasl or self.tls or self.authorizer


def subject_principal(cert: dict[str, Any] | None) -> str | None:
    """`User:CN=alice,OU=eng` from a peer certificate (ssl.SSLSocket.getpeercert), or None."""
    if not cert or not cert.get("subject"):
        return None
    parts = [  # RFC 2253 lists the most specific first
        "+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn)
        for rdn in reversed(cert["subject"])
    ]
    return "User:" + ",".join(parts)


def tls_principal(transport: Any) -> str | None:
    """The principal of a TLS connection's client certificate (mTLS), or None."""
    ssl_object = transport.get_extra_info("ssl_object")
    return None if ssl_object is None else subject_principal(ssl_object.getpeercert())


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out


class LayeredCredentials(Credentials):
    """The users file's credentials over the log's: a user the file names is the file's."""

    def __init__(self, seeded: Credentials, stored: Credentials) -> None:
        super().__init__()
        self._seeded = seeded
        self._stored = stored

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        if self._seeded.of(user):
            return self._seeded.get(user, mechanism)
        return self._stored.get(user, mechanism)

    def of(self, user: str) -> dict[str, ScramCredential]:
        return self._seeded.of(user) or self._stored.of(user)

    def check_plain(self, user: str, password: str) -> bool:
        # The base class reads its own (here empty) table: PLAIN would refuse everyone.
        layer = self._seeded if self._seeded.of(user) else self._stored
        return layer.check_plain(user, password)


class Gate:
    """What the server calls for every request on a secure listener (see the module docstring)."""

    def __init__(self, server: Any, options: SecurityOptions, seeded: Credentials) -> None:
        self.server = server
        self.options = options
        self.seeded = seeded
        self.denials = 0
        self.authentications = {"ok": 0, "failed": 0}
        # A client retrying a wrong password reconnects in a loop: one line per client and
        # mechanism a minute, with the count of the others (the counters have them all).
        self._auth_failures = OncePerKey(audit, level=logging.INFO)

    # -- the authorizer and the credentials live in the core's state (persisted records) ---------

    @property
    def credentials(self) -> Credentials:
        return LayeredCredentials(self.seeded, self.server.core.state.security.credentials)

    def configure(self, security: Any) -> None:
        """A new core's security state (start-up, recovery): the settings' part of it."""
        security.authorizer.super_users = frozenset(self.options.super_users)
        security.authorizer.allow_everyone_if_no_acl_found = (
            self.options.allow_everyone_if_no_acl_found
        )

    # -- every request -----------------------------------------------------------------------------

    def admit(self, conn: Any, api_key: int) -> bool:
        """On a SASL listener, a request before authentication or after the session ran out
        closes the connection (False); the sidecar calls this for the requests it forwards."""
        if not self.options.sasl or api_key in _BEFORE_AUTH:
            return True
        if not conn.authenticated:
            audit.info("closing %s: %s before SASL authentication", conn.peer, _api_name(api_key))
            conn.abort(f"{_api_name(api_key)} before SASL authentication", quiet=True)
            return False
        expires = conn.session_expires
        if expires is not None and time.monotonic() >= expires:
            audit.info("closing %s (%s): its SASL session expired", conn.peer, conn.principal)
            conn.abort("SASL session expired: re-authentication is required", quiet=True)
            return False
        return True

    def __call__(self, conn: Any, header: RequestHeader, request: Any, t0: int) -> Any:
        """The request to route (maybe without what the caller may not touch), or None: it was
        answered or the connection closed."""
        key = header.api_key
        if not self.admit(conn, key):
            return None
        if not self.options.authorizer:
            return request
        plan = self.judge(conn, header, request)
        if plan.error is not None:
            conn.send(codec.encode_response(header, self._refusal(header, request, plan.error)))
            return None
        if plan.amend is not None:
            conn.amend_next(header, plan.amend)
        return plan.request

    def judge(self, conn: Any, header: RequestHeader, request: Any) -> authz.Plan:
        """The ACLs' verdict on `request` from `conn` (coordinator.serve.authz.plan), denials
        logged; also for the requests the sidecar answers outside the server's codec
        (TxnOffsetCommit: coordinator.sidecar.txn)."""
        key = header.api_key
        authorizer = self.server.core.state.security.authorizer
        caller = Caller(conn.principal, conn.client_host.lstrip("/"))
        denied: list[str] = []

        def may(operation: Operation, resource_type: ResourceType, name: str) -> bool:
            if authorizer.authorize(caller, operation, Resource(resource_type, name)):
                return True
            denied.append(f"{operation.name} {resource_type.name}:{name}")
            return False

        plan = authz.plan(header, request, may)
        if denied:
            self.denials += 1
            audit.info(
                "denied %s from %s (%s): %s",
                _api_name(key),
                caller.principal,
                caller.host,
                "; ".join(denied),
            )
        return plan

    @staticmethod
    def _refusal(header: RequestHeader, request: Any, error: ErrorCode) -> Any:
        if header.api_key in security_admin.SECURITY_ADMIN_APIS:
            return security_admin.denied(header.api_key, header.api_version, request, error)
        return adapters.error_response(header, request, error)

    # -- SaslHandshake (17) and SaslAuthenticate (36) ---------------------------------------------

    def sasl(self, conn: Any, header: RequestHeader, request: Any) -> None:
        if header.api_key == SASL_HANDSHAKE:
            conn.send(codec.encode_response(header, self._handshake(conn, header, request)))
            return
        response, close = self._authenticate(conn, header, request)
        conn.send(codec.encode_response(header, response))
        if close:
            conn.close()

    def _handshake(self, conn: Any, header: RequestHeader, request: Any) -> Any:
        cls = apis.response_class(SASL_HANDSHAKE, header.api_version)
        enabled = self.options.mechanisms
        reauth = conn.authenticated and self.options.session_lifetime_ms > 0
        if not self.options.sasl or (conn.authenticated and not reauth):
            return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
        if request.mechanism not in enabled:
            return cls(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
        conn.sasl_exchange = SaslExchange(request.mechanism, self.credentials)
        return cls(error_code=ErrorCode.none, mechanisms=enabled)

    def _authenticate(self, conn: Any, header: RequestHeader, request: Any) -> tuple[Any, bool]:
        cls = apis.response_class(SASL_AUTHENTICATE, header.api_version)

        def answer(error: ErrorCode, message: str | None, data: bytes, lifetime_ms: int) -> Any:
            return make(
                cls,
                error_code=error,
                error_message=message,
                auth_bytes=data,
                session_lifetime=timedelta(milliseconds=lifetime_ms),
            )

        exchange: SaslExchange | None = conn.sasl_exchange
        if not self.options.sasl or exchange is None:
            message = "SaslAuthenticate without a SaslHandshake"
            return answer(ErrorCode.illegal_sasl_state, message, b"", 0), True
        try:
            reply, principal = exchange.step(bytes(request.auth_bytes))
            if principal is not None and conn.authenticated and principal != conn.principal:
                raise SaslFailed("Cannot change the principal during re-authentication")
        except SaslFailed as exc:
            conn.sasl_exchange = None
            self.authentications["failed"] += 1
            self._auth_failures.log(
                (conn.client_host, exchange.mechanism),
                "SASL %s authentication failed from %s: %s",
                exchange.mechanism,
                conn.peer,
                exc,
            )
            return answer(ErrorCode.sasl_authentication_failed, str(exc), b"", 0), True
        if principal is None:
            return answer(ErrorCode.none, None, reply, 0), False
        conn.sasl_exchange = None
        lifetime_ms = self.options.session_lifetime_ms
        if not conn.authenticated:
            self.authentications["ok"] += 1
            log.debug("%s authenticated as %s (%s)", conn.peer, principal, exchange.mechanism)
        conn.authenticated = True
        conn.principal = principal
        conn.session_expires = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
        return answer(ErrorCode.none, None, reply, lifetime_ms), False

    # -- the security admin APIs: the audit trail of changes -------------------------------------

    def changed(self, conn: Any, header: RequestHeader, records: Iterable[Any]) -> None:
        for record in records:
            audit.info(
                "%s by %s (%s): %s %s",
                _api_name(header.api_key),
                getattr(conn, "principal", ANONYMOUS),
                conn.client_host.lstrip("/"),
                "deleted" if record.value is None else "set",
                _redacted(record.key),
            )


def illegal_sasl_state(header: RequestHeader) -> Any:
    """Kafka's answer to SaslHandshake/SaslAuthenticate on a listener that is not SASL."""
    cls = apis.response_class(header.api_key, header.api_version)
    return make(
        cls,
        error_code=ErrorCode.illegal_sasl_state,
        error_message="SASL is not enabled on this listener",
        mechanisms=(),
        auth_bytes=b"",
        session_lifetime=timedelta(0),
    )


def _redacted(key: Any) -> str:
    """A record key as the audit log shows it (credential keys carry no secret)."""
    return f"{type(key).__name__}{tuple(getattr(key, s) for s in key.__slots__)}"


def _api_name(api_key: int) -> str:
    from coordinator.serve.metrics import api_name

    return api_name(api_key)


def make_ssl_context(certfile: str, keyfile: str, cafile: str | None) -> ssl.SSLContext:
    """The listener's TLS context: TLS 1.2+, the server's certificate, and with `cafile` client
    certificates required and verified against it (mTLS). Raises OSError/ssl.SSLError with the
    file at fault."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if cafile:
        context.load_verify_locations(cafile)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def secure_connection_class(base: type[Any]) -> type[Any]:
    """The server's `Connection` with the per-connection security state (given by the server,
    which imports this module)."""

    class SecureConnection(base):  # type: ignore[misc]
        __slots__ = (
            "_amend",
            "authenticated",
            "principal",
            "sasl_exchange",
            "session_expires",
        )
        _fast = False  # no fast paths: every request goes through the gate

        def __init__(self, server: Any) -> None:
            super().__init__(server)
            self.principal = ANONYMOUS
            self.authenticated = False
            self.sasl_exchange: SaslExchange | None = None
            self.session_expires: float | None = None
            self._amend: tuple[RequestHeader, authz.Amend] | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            principal = tls_principal(transport)
            if principal is not None:
                self.principal = principal

        def amend_next(self, header: RequestHeader, amend: authz.Amend) -> None:
            self._amend = (header, amend)

        def send(self, data: bytes) -> None:
            pending = self._amend
            if pending is not None:
                self._amend = None
                header, amend = pending
                response = codec.decode_response(header, data)  # size prefix included
                data = codec.encode_response(header, amend(response))
            super().send(data)

    return SecureConnection
