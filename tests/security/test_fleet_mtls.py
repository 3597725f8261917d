"""The fleet listener of a secured sidecar fleet (coordinator.sidecar.fleet_tls): mutual TLS
between members, and only members (this member's own principal, or CLUSTER_ACTION) served.

The rule (`admits_fleet_member`, Kafka's inter-broker rule) is pinned in test_acl.py. Here: an
in-process member (Server with a SASL_SSL gate and ACLs, Sidecar, Fleet) whose fleet listener is
probed by its own peer links, a plaintext client, and a client with another certificate of the
same CA. No upstream is started: the fleet keeps retrying it in the background, and with no
state partition loaded every group is loading: a Heartbeat is answered NONE (Kafka answers a
loading coordinator's Heartbeats so), which is all an answer needs to be here. The end-to-end
fleet over tansu is
tests/security/test_sidecar_security.py.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator import cli
from coordinator.core.effects import CoordinatorConfig
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from coordinator.serve import config
from coordinator.serve.secure import SecurityOptions, make_ssl_context
from coordinator.serve.server import Server, ServerOptions
from coordinator.sidecar import rewrite
from coordinator.sidecar.fleet import Fleet, FleetOptions
from coordinator.sidecar.fleet_journal import FleetJournal
from coordinator.sidecar.fleet_tls import FleetTls
from coordinator.sidecar.proxy import Sidecar, SidecarOptions
from tests.support.realclients import free_port
from tests.support.sidecar_util import HOST, RawClient, decode, kio
from tests.support.tls import Certs

OWN = "User:CN=localhost"  # the test server certificate's subject: every member's here
MALLORY = "User:CN=mallory,O=groupcoord"
LOADING_HEARTBEAT = ErrorCode.none  # a Heartbeat to a loading group (coordinator.sidecar.forward)


def heartbeat(group: str = "g") -> Any:
    return kio(12, 4, "HeartbeatRequest", group_id=group, generation_id=1, member_id="m",
               group_instance_id=None)  # fmt: skip


# -- the ACL of a fleet member ------------------------------------------------------------------


def cluster_action(principal: str, permission: Permission = Permission.ALLOW) -> AclBinding:
    return AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, principal, "*",
                      Operation.CLUSTER_ACTION, permission)  # fmt: skip


# The rule itself, admits_fleet_member, is pinned in tests/security/test_acl.py (fast, so
# `make mutation` runs it).


# -- sockets: one member's fleet listener ----------------------------------------------------------


@dataclass
class Member:
    server: Server
    sidecar: Sidecar
    fleet: Fleet

    @property
    def port(self) -> int:
        return int(self.fleet.address.rsplit(":", 1)[1])


@pytest.fixture
async def member(certs: Certs) -> AsyncIterator[Member]:
    security = SecurityOptions(
        protocol="SASL_SSL",
        authorizer=True,
        super_users=("User:admin",),
        ssl_context=make_ssl_context(str(certs.server_cert), str(certs.server_key), None),
    )
    server = Server(
        ServerOptions(host=HOST, port=0, coordinator=CoordinatorConfig(), security=security),
        TopicCatalog((TopicInfo("orders", uuid.uuid4(), 1),)),
        lambda prefix: f"{prefix}-{uuid.uuid4()}",
        journal=FleetJournal(4),
    )
    sidecar = Sidecar(server, SidecarOptions(upstream=[(HOST, free_port())]))  # never started
    tls = FleetTls(str(certs.server_cert), str(certs.server_key), str(certs.ca))
    options = FleetOptions(bootstrap=f"{HOST}:{free_port()}", partitions=4, listen=(HOST, 0),
                           tls=tls)  # fmt: skip
    team = Fleet(server, sidecar, options)
    await server.start()
    await team.start()
    try:
        yield Member(server, sidecar, team)
    finally:
        await team.stop()
        await server.stop()
        await team.close()
        await sidecar.stop()


async def tls_client(port: int, certs: Certs, cert: tuple[Path, Path] | None) -> RawClient:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    async with asyncio.timeout(10):
        reader, writer = await asyncio.open_connection(HOST, port, ssl=context,
                                                       server_hostname=HOST)  # fmt: skip
    return RawClient(reader, writer)


async def closed_without_answer(client: RawClient) -> bool:
    """Send a forwarded group request: True when the connection closes with no answer (not
    merely a late one: a timeout is a failure)."""
    try:
        await client.send(heartbeat())
        await client.receive(timeout=10)
    except TimeoutError:
        return False
    except (ConnectionError, OSError):  # closed; with TLS, an ssl.SSLError may say so
        return True
    finally:
        client.close()
    return False


async def test_a_member_reaches_another_over_mutual_tls(member: Member) -> None:
    # The member's own peer links (what forwarding, ListGroups and notices use) present its
    # certificate: its listener serves them; a group still loading answers a Heartbeat NONE.
    assert member.sidecar.peer_links.security.tls
    link = member.sidecar.peer_links.member((HOST, member.port))
    request = heartbeat()
    answer = decode(12, 4, await link.request(request))
    assert answer.error_code == LOADING_HEARTBEAT
    assert member.fleet.admission is not None and member.fleet.admission.refused == 0


async def test_the_shared_forwarding_link_is_mutual_tls_too(member: Member) -> None:
    # Forwarded group requests share one link per member (coordinator.sidecar.fleet_mux): it is
    # made as every fleet link is, so it presents the member's certificate and is served.
    answered: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
    frame = rewrite.encode_request(heartbeat(), 7, "client")
    member.sidecar.peer_links.shared.send((HOST, member.port), frame, 7, answered.set_result)
    data = await asyncio.wait_for(answered, 10)
    assert data is not None and int.from_bytes(data[4:8], "big") == 7  # the client's id again
    assert decode(12, 4, data).error_code == LOADING_HEARTBEAT
    assert member.fleet.admission is not None and member.fleet.admission.refused == 0


async def test_a_plaintext_client_on_the_fleet_listener_gets_no_answer(member: Member) -> None:
    client = await RawClient.connect(member.port)
    assert await closed_without_answer(client)
    # and the listener serves members on
    link = member.sidecar.peer_links.member((HOST, member.port))
    assert decode(12, 4, await link.request(heartbeat())).error_code == LOADING_HEARTBEAT


async def test_a_client_certificate_without_cluster_action_is_closed(
    member: Member, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    mallory = certs.client("mallory")
    caplog.set_level(logging.WARNING, logger="groupcoord.audit")
    for _ in range(2):
        assert await closed_without_answer(await tls_client(member.port, certs, mallory))
    assert member.fleet.admission is not None and member.fleet.admission.refused == 2
    refusals = [r for r in caplog.records if "is not a fleet member" in r.getMessage()]
    assert len(refusals) == 1, caplog.text  # once per principal
    assert MALLORY in refusals[0].getMessage()
    # A certificate of the same CA but no client certificate at all: no handshake either.
    assert await closed_without_answer(await tls_client(member.port, certs, None))


async def test_cluster_action_on_the_cluster_admits_another_principal(
    member: Member, certs: Certs
) -> None:
    member.server.core.state.security.authorizer.add(cluster_action(MALLORY))
    client = await tls_client(member.port, certs, certs.client("mallory"))
    try:
        assert (await client.call(heartbeat())).error_code == LOADING_HEARTBEAT
    finally:
        client.close()


# -- start-up and SIGHUP ---------------------------------------------------------------------------


def resolve(argv: list[str]) -> config.Settings:
    return config.resolve(cli.build_parser().parse_args(["serve", *argv]), {})


def fleet_settings(certs: Certs, *extra: str) -> Any:
    return resolve(["--upstream", f"{HOST}:9092", "--security-protocol", "SSL",
                    "--ssl-certfile", str(certs.server_cert),
                    "--ssl-keyfile", str(certs.server_key), *extra])  # fmt: skip


def test_a_certificate_the_fleet_ca_did_not_sign_refuses_to_start(
    certs: Certs, tmp_path: Path
) -> None:
    from tests.support.tls import make_certs

    other = make_certs(tmp_path / "other")
    settings = fleet_settings(certs, "--fleet-ssl-cafile", str(other.ca))
    with pytest.raises(cli.StartupError, match=r"^ssl_certfile/ssl_keyfile/fleet_ssl_cafile: "):
        cli._fleet_tls(settings)
    tls = cli._fleet_tls(fleet_settings(certs, "--ssl-cafile", str(certs.ca)))
    assert tls is not None and tls.principal == OWN
    assert cli._fleet_tls(fleet_settings(certs, "--ssl-cafile", str(certs.ca),
                                         "--state", "local")) is None  # fmt: skip


def test_sighup_reloads_the_fleet_certificate(certs: Certs, tmp_path: Path) -> None:
    cert, key = tmp_path / "member.pem", tmp_path / "member.key"
    shutil.copy(certs.server_cert, cert)
    shutil.copy(certs.server_key, key)
    settings = fleet_settings(certs, "--fleet-ssl-cafile", str(certs.ca))
    tls = FleetTls(str(cert), str(key), str(certs.ca))
    assert tls.principal == OWN
    renewed = certs.client("renewed")
    shutil.copy(renewed[0], cert)
    shutil.copy(renewed[1], key)
    cli.reload_certificates(settings, [], tls)
    assert tls.principal == "User:CN=renewed,O=groupcoord"
    cert.write_text("not a certificate")  # a broken file: the old ones stay
    cli.reload_certificates(settings, [], tls)
    assert tls.principal == "User:CN=renewed,O=groupcoord"
