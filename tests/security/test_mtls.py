"""Issue 22 acceptance, mutual TLS on an SSL listener (`--ssl-cafile`): a client without a
certificate cannot connect; with a certificate the principal is its subject (RFC 2253, as Kafka's
default principal builder names it: `User:CN=alice,O=groupcoord`), which the ACLs then judge; and
SIGHUP reloads the server certificate: a new connection sees the new one, an open one keeps
working.
"""

from __future__ import annotations

import shutil
import signal
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.security.test_authz_wire import (
    ALLOW,
    GROUP_DENIED,
    GROUP_T,
    LITERAL,
    MEMBER_ID_REQUIRED,
    PREFIXED,
    READ,
    TOPIC_T,
    acl_creation,
    join,
)
from tests.support import realclients as rc
from tests.support.sidecar_util import RawClient, kio
from tests.support.tls import Certs, serial

pytestmark = pytest.mark.clients

ALICE = "User:CN=alice,O=groupcoord"
ADMIN = "User:CN=admin,O=groupcoord"


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory, peers_dir: Path,
         certs: Certs) -> Iterator[tuple[rc.Broker, Path, Path]]:
    """An SSL listener requiring client certificates, with the ACL authorizer (super user: the
    admin certificate). Its certificate files are copies the SIGHUP test may replace."""
    tmp = tmp_path_factory.mktemp("mtls")
    cert, key = tmp / "server.pem", tmp / "server.key"
    shutil.copy(certs.server_cert, cert)
    shutil.copy(certs.server_key, key)
    args = ["--security-protocol", "SSL", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key),
            "--ssl-cafile", str(certs.ca), "--authorizer", "acl", "--super-users", ADMIN]
    broker = su.start(tmp, peers_dir, args)
    yield broker, cert, key
    broker.stop()


async def as_(broker: rc.Broker, certs: Certs, name: str) -> RawClient:
    return await su.connect(broker.port, su.client_context(certs, certs.client(name)))


def peer_serial(client: RawClient) -> int:
    cert = client.writer.get_extra_info("ssl_object").getpeercert()
    return int(cert["serialNumber"], 16)


API_VERSIONS = kio(18, 3, "ApiVersionsRequest", client_software_name="t",
                   client_software_version="1")


async def test_a_client_without_a_certificate_cannot_connect(
    mtls: tuple[rc.Broker, Path, Path], certs: Certs,
) -> None:
    broker, _, _ = mtls
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        # (TLS 1.3: the handshake may end on the client's side before the server refuses, so
        # the refusal can arrive with the first answer)
        client = await su.connect(broker.port, su.client_context(certs))
        try:
            await client.call(API_VERSIONS)
        finally:
            client.close()
    ok = await as_(broker, certs, "admin")  # and the server still serves the others
    assert (await ok.call(API_VERSIONS)).error_code == 0
    ok.close()


async def test_the_certificate_subject_is_the_principal(
    mtls: tuple[rc.Broker, Path, Path], certs: Certs, members: Any,
) -> None:
    broker, _, _ = mtls
    admin = await as_(broker, certs, "admin")
    try:
        created = await admin.call(kio(30, 3, "CreateAclsRequest", creations=(
            acl_creation(ALICE, GROUP_T, "mtls-", PREFIXED, READ, ALLOW),
            acl_creation(ALICE, TOPIC_T, su.TOPIC, LITERAL, READ, ALLOW))))
        assert [r.error_code for r in created.results] == [0, 0], created
    finally:
        admin.close()
    alice = await as_(broker, certs, "alice")
    bob = await as_(broker, certs, "bob")
    try:
        assert (await alice.call(join("mtls-g"))).error_code == MEMBER_ID_REQUIRED
        assert (await alice.call(join("other"))).error_code == GROUP_DENIED
        assert (await bob.call(join("mtls-g"))).error_code == GROUP_DENIED
    finally:
        alice.close()
        bob.close()
    log = broker.log_path.read_text()
    assert f"denied JoinGroup from {ALICE}" in log and "User:CN=bob,O=groupcoord" in log
    # a real client with alice's certificate: the same principal, so the ACL lets it in
    cert, key = certs.client("alice")
    security = {"protocol": "SSL", "cafile": str(certs.ca), "certfile": str(cert),
                "keyfile": str(key)}
    m = await members("confluent", "alice-mtls", bootstrap=broker.bootstrap, group="mtls-c",
                      topic=su.TOPIC, security=security)
    await rc.wait_until(lambda: m.owned == frozenset(range(su.PARTITIONS)), 60,
                        "alice's consumer to form its group over mTLS",
                        explain=lambda: rc.explain_members([m], broker))
    await m.close()


async def test_sighup_reloads_the_certificate_and_keeps_open_connections(
    mtls: tuple[rc.Broker, Path, Path], certs: Certs,
) -> None:
    broker, cert, key = mtls
    old = await as_(broker, certs, "admin")
    try:
        old_serial = peer_serial(old)
        assert old_serial == serial(cert)
        new_cert, new_key = certs.server("server-rotated")
        assert serial(new_cert) != old_serial
        shutil.copy(new_cert, cert)
        shutil.copy(new_key, key)
        broker.proc.send_signal(signal.SIGHUP)

        async def new_connection_serial() -> bool:
            client = await as_(broker, certs, "admin")
            try:
                return peer_serial(client) == serial(new_cert)
            finally:
                client.close()

        await rc.wait_until(new_connection_serial, 10,
                            "a new connection to see the reloaded certificate",
                            explain=broker.log_tail)
        assert "TLS certificate reloaded" in broker.log_path.read_text()
        # the connection opened before the reload still works, on the certificate it had
        assert (await old.call(API_VERSIONS)).error_code == 0
        assert (await old.call(join("x"))).error_code == MEMBER_ID_REQUIRED  # admin: super user
        assert peer_serial(old) == old_serial
        assert broker.alive()
    finally:
        old.close()
