"""Every setting of groupcoord's own Kafka clients toward the upstream cluster, in one place,
and the upstream's security (TLS, SASL: issue 22).

- The fleet's producer, readers, admin client and membership consumer (coordinator.sidecar.fleet,
  coordinator.sidecar.state_topic) are aiokafka clients built from `client_options`.
- The sidecar's own links (coordinator.sidecar.upstream: forwarded client traffic, metadata
  refreshes, lag reads) open TLS with `ClientSecurity.ssl_context` and authenticate with
  `authenticate` (SaslHandshake v1, then SaslAuthenticate v1 steps: PLAIN, or SCRAM through
  scramp's client) before any request of theirs is sent.

The model for forwarded client traffic (docs/security.md): clients talk to their own
sidecar over the pod's loopback (PLAINTEXT, or secured: docs/security.md); the sidecar reaches
the cluster as one upstream
identity (--upstream-sasl-username), so that identity needs the ACLs of every application the
sidecar fronts (READ/WRITE on their topics, the fleet's state topic and group).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from scramp import ScramClient, ScramException

from coordinator.security.client import PLAINTEXT, ClientSecurity, aiokafka_options

CLIENT_ID = "groupcoord-fleet"


class UpstreamAuthError(Exception):
    """The upstream refused our SASL authentication (wrong credentials or mechanism)."""


def security_from_settings(settings: Any) -> ClientSecurity:
    return ClientSecurity.create(
        settings.upstream_security_protocol,
        settings.upstream_sasl_mechanism,
        settings.upstream_sasl_username,
        settings.upstream_sasl_password,
        settings.upstream_ssl_cafile or None,
    )


def client_options(
    bootstrap: str, security: ClientSecurity = PLAINTEXT, request_timeout_ms: int = 10_000
) -> dict[str, Any]:
    """Keyword arguments common to AIOKafkaProducer, AIOKafkaConsumer and AIOKafkaAdminClient."""
    return {
        "bootstrap_servers": bootstrap,
        "client_id": CLIENT_ID,
        "request_timeout_ms": request_timeout_ms,
        "retry_backoff_ms": 100,
        "metadata_max_age_ms": 30_000,
        **aiokafka_options(security),
    }


Call = Callable[[Any], Awaitable[Any]]  # a request entity -> its decoded response


async def authenticate(call: Call, security: ClientSecurity) -> None:
    """SASL on a fresh upstream link: `call` sends one request on it and returns the decoded
    response. Raises UpstreamAuthError when the upstream refuses."""
    handshake = await call(SaslHandshakeRequest(mechanism=security.mechanism))
    if handshake.error_code != ErrorCode.none:
        raise UpstreamAuthError(
            f"SaslHandshake {security.mechanism}: {handshake.error_code.name.upper()} "
            f"(the upstream offers {', '.join(handshake.mechanisms) or 'nothing'})"
        )
    if security.mechanism == "PLAIN":
        token = f"\0{security.username}\0{security.password}".encode()
        await _step(call, token)
        return
    client = ScramClient([security.mechanism], security.username, security.password)
    try:
        server_first = await _step(call, client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final = await _step(call, client.get_client_final().encode())
        client.set_server_final(server_final.decode())  # the upstream proves it knows us too
    except (ScramException, UnicodeDecodeError) as exc:
        raise UpstreamAuthError(f"SASL {security.mechanism}: {exc}") from None


async def _step(call: Call, token: bytes) -> bytes:
    response = await call(SaslAuthenticateRequest(auth_bytes=token))
    if response.error_code != ErrorCode.none:
        raise UpstreamAuthError(
            f"SaslAuthenticate: {response.error_code.name.upper()}: {response.error_message or ''}"
        )
    return bytes(response.auth_bytes)
