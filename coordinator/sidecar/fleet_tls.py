"""The fleet listener's security: mutual TLS between members, and Kafka's inter-broker rule.

A request that arrives on the fleet listener is not judged by the ACLs again: the member the
client is connected to judged it against the client's principal before forwarding it
(coordinator.sidecar.forward). So with a secured client listener (`SSL`, `SASL_SSL`) only
another member may reach that listener's request path, as only brokers may send Kafka's
inter-broker requests:
- The fleet listener is TLS with this member's certificate (`--ssl-certfile`/`--ssl-keyfile`)
  and requires a client certificate verified against `--fleet-ssl-cafile` (default
  `--ssl-cafile`). A plaintext or certificate-less client never completes the handshake.
- Every connection a member opens to another's fleet listener (forwarded group requests,
  ListGroups, transaction outcome notices: coordinator.sidecar.forward `PeerLinks`) presents
  the same certificate and verifies the peer's against the same CAs.
- After the handshake a connection is admitted only if its certificate's principal
  (`User:CN=...`, as the client listener names mTLS principals) is this member's own (every
  member mounts the same certificate) or, with `--authorizer acl`, may CLUSTER_ACTION the
  cluster (super users may): `coordinator.security.acl.admits_fleet_member`, the pure decision.
  Anything else is closed before a byte of it is read, logged once a minute per principal.
- SASL_PLAINTEXT in a fleet is refused at start-up (coordinator.serve.config): no certificates.
  A PLAINTEXT listener keeps a plaintext fleet listener (docs/security.md, "The fleet listener").

SIGHUP reloads the certificate, key and CAs into both contexts (coordinator.cli), and this
member's own principal with them.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

from coordinator.security.acl import admits_fleet_member
from coordinator.security.client import ClientSecurity
from coordinator.serve.lifecycle import OncePerKey
from coordinator.serve.secure import make_ssl_context, subject_principal, tls_principal

if TYPE_CHECKING:
    from coordinator.serve.server import Server

audit = logging.getLogger("groupcoord.audit")

_HANDSHAKE_ROUNDS = 8  # a TLS 1.2/1.3 handshake takes 2-3 round trips; more is a bug


class FleetTls:
    """The fleet listener's server context, the peer links' client context, and the principal
    this member's certificate names. Construction and `reload` raise OSError/ssl.SSLError
    (ValueError for a certificate without a subject) naming what is wrong."""

    def __init__(self, certfile: str, keyfile: str, cafile: str) -> None:
        self.certfile = certfile
        self.keyfile = keyfile
        self.cafile = cafile
        self.server_context = make_ssl_context(certfile, keyfile, cafile)  # CERT_REQUIRED
        self.client_context = _client_context(certfile, keyfile, cafile)
        self.principal = _own_principal(self.server_context, self.client_context)

    @property
    def client_security(self) -> ClientSecurity:
        """How a member reaches another's fleet listener (coordinator.sidecar.upstream.Broker):
        TLS with our certificate, no SASL. No host name check: members are reached by pod IP,
        which is in no certificate; who the peer is, is its certificate's chain to the fleet's
        CAs (and our own side's admission by principal)."""
        return ClientSecurity("SSL", check_hostname=False, ssl_context=self.client_context)

    def reload(self) -> None:
        """SIGHUP: the files again, checked on fresh contexts first; the live contexts change
        only if they are usable (new handshakes use them, open connections keep theirs)."""
        fresh = FleetTls(self.certfile, self.keyfile, self.cafile)
        for context in (self.server_context, self.client_context):
            context.load_cert_chain(self.certfile, self.keyfile)
            context.load_verify_locations(self.cafile)
        self.principal = fresh.principal


def _client_context(certfile: str, keyfile: str, cafile: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # Peers are reached by pod IP (--fleet-advertise), not by a name in their certificate:
    # the chain to the fleet's CAs is verified, and the listener admits by principal.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cafile)
    context.load_cert_chain(certfile, keyfile)
    return context


def _own_principal(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """Our certificate's principal, as a peer's listener sees it: a handshake of the two
    contexts with each other in memory. It also proves a member presenting this certificate is
    accepted by one trusting these CAs (else ssl.SSLCertVerificationError)."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(to_client, to_server, server_side=False)
    server_side = server.wrap_bio(to_server, to_client, server_side=True)
    for _ in range(_HANDSHAKE_ROUNDS):
        done = True
        for end in (client_side, server_side):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                done = False
        if done:
            break
    else:
        raise ssl.SSLError("the certificate's TLS handshake with itself did not complete")
    principal = subject_principal(server_side.getpeercert())
    if principal is None:
        raise ValueError("the certificate has no subject to name a fleet member by")
    return principal


class PeerAdmission:
    """Called with every accepted fleet connection's transport (after its TLS handshake): True
    to serve it, False to close it (the module docstring's rule)."""

    def __init__(self, tls: FleetTls, server: Server) -> None:
        self.tls = tls
        self.server = server
        self.refused = 0
        self._log = OncePerKey(audit, level=logging.WARNING)

    def __call__(self, transport: asyncio.BaseTransport) -> bool:
        principal = tls_principal(transport)
        peername = transport.get_extra_info("peername")
        host = str(peername[0]) if peername else "unknown"
        gate = self.server.gate
        authorizer = None
        if gate is not None and gate.options.authorizer:
            authorizer = self.server.core.state.security.authorizer
        if admits_fleet_member(principal, self.tls.principal, host, authorizer):
            return True
        self.refused += 1
        self._log.log(
            principal,
            "closing fleet listener connection from %s: %s is not a fleet member (not %s, "
            "and no CLUSTER_ACTION on the cluster)",
            host,
            principal or "a client without a certificate",
            self.tls.principal,
        )
        return False
