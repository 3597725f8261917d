"""Issue 22: the sidecar's own listener secured (TLS, SASL, ACLs) in front of tansu, and a fleet's
ACLs and SCRAM credentials shared through the upstream (coordinator.sidecar.fleet_security).

- A single sidecar with SASL_SSL and the ACL authorizer: a real confluent-kafka consumer logs in
  with SCRAM-SHA-512 over TLS, reads records through the TLS broker listeners and commits in the
  group its ACLs allow; another group is GROUP_AUTHORIZATION_FAILED; a wrong password is
  SASL_AUTHENTICATION_FAILED; a request before authentication closes the connection; ACLs made
  with confluent-kafka's AdminClient through the sidecar are answered by the sidecar.
- A fleet of two: an ACL and a user created on one member judge and log in clients on the other,
  a deletion on the second reaches the first, and a member started afterwards has them all.
- A fleet of two over mutual TLS (coordinator.sidecar.fleet_tls): a group's requests through
  either member are answered (one of them forwards them to the other), while a plaintext client
  and a client with another certificate of the same CA on a member's fleet listener are closed
  without an answer.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.request
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.support import realclients as rc
from tests.support import sidecar_util as sc
from tests.support.sidecar_util import Sidecar, Stack, Tansu, readyz, stack
from tests.support.tls import Certs

__all__ = ["stack"]

pytestmark = pytest.mark.clients

TOPIC = "orders"
GROUP_AUTHORIZATION_FAILED = 30
SASL_AUTHENTICATION_FAILED = 58
NONE = 0


def secured(certs: Certs, users_file: Any, fleet: bool = False) -> list[str]:
    """SASL_SSL with ACLs; a fleet member also gets the CA its peers' certificates (the test
    server certificate, every member's) are verified against."""
    extra = ("--fleet-ssl-cafile", str(certs.ca)) if fleet else ()
    return su.security_args("SASL_SSL", certs, users_file, authorizer=True, extra=extra)


def fleet_port(member: sc.Sidecar) -> int:
    """The port of a member's fleet listener, from its /fleet document."""
    url = f"http://{sc.HOST}:{member.metrics_port}/fleet"
    with urllib.request.urlopen(url, timeout=5) as response:
        return int(json.loads(response.read())["address"].rsplit(":", 1)[1])


def admin(bootstrap: str, certs: Certs) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(su.confluent_conf(bootstrap, su.sasl("SCRAM-SHA-512", "admin", certs)))


def allow(principal: str, resource: str, name: str, operation: str = "READ") -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(ResourceType[resource], name, ResourcePatternType.LITERAL, principal, "*",
                      AclOperation[operation], AclPermissionType.ALLOW)


async def commit_as(port: int, certs: Certs, user: str, group: str,
                    password: str | None = None) -> int:
    """An admin-style OffsetCommit of TOPIC[0] by `user`, through `port` over SASL_SSL: the
    error code (the SASL error code when the login itself fails)."""
    client = await su.connect(port, su.client_context(certs))
    try:
        answer = await su.authenticate(client, user, password or su.USERS[user], "SCRAM-SHA-512")
        if answer.error_code:
            return int(answer.error_code)
        response = await client.call(sc.commit_request(group, TOPIC, {0: 1}))
        return int(response.topics[0].partitions[0].error_code)
    finally:
        client.close()


def consume_and_commit(bootstrap: str, certs: Certs, group: str, want: int) -> tuple[int, Any]:
    """A confluent-kafka consumer as alice: (records read, the commit's error or None)."""
    from confluent_kafka import Consumer, KafkaException

    conf = su.confluent_conf(bootstrap, su.sasl("SCRAM-SHA-512", "alice", certs))
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([TOPIC])
        read = 0
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if read >= want:
                    break
                continue
            if message.error():
                return read, message.error()
            read += 1
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            return read, exc.args[0]
        return read, None
    finally:
        consumer.close()


async def test_a_sidecar_listener_with_sasl_ssl_and_acls(stack: Stack, certs: Certs,
                                                         users_file: Any) -> None:
    tansu = stack.tansu()
    await sc.create_topic(tansu.bootstrap, TOPIC, 1)
    await sc.produce(tansu.bootstrap, TOPIC, [f"k{i}" for i in range(5)])
    sidecar = stack.sidecar(tansu.bootstrap, *secured(certs, users_file))
    await rc.wait_until(lambda: readyz(sidecar)[0] == 200, 20, "the sidecar to be ready")

    # ACLs through the sidecar, with confluent-kafka's AdminClient: answered by groupcoord.
    client = admin(sidecar.bootstrap, certs)
    acls = [allow("User:alice", "GROUP", "alice-group"), allow("User:alice", "TOPIC", TOPIC)]
    for future in client.create_acls(acls, request_timeout=10).values():
        assert future.result(15) is None
    assert "CreateAcls by User:admin" in sidecar.log(), stack.explain()

    # alice reads through the TLS broker listeners and commits in her group...
    read, error = await asyncio.to_thread(consume_and_commit, sidecar.bootstrap, certs,
                                          "alice-group", 5)
    assert (read, error) == (5, None), stack.explain()
    # ...and is refused another group's offsets; bob has no ACL at all.
    assert await commit_as(sidecar.port, certs, "alice", "other-group") == \
        GROUP_AUTHORIZATION_FAILED
    assert await commit_as(sidecar.port, certs, "bob", "alice-group") == \
        GROUP_AUTHORIZATION_FAILED
    assert await commit_as(sidecar.port, certs, "alice", "alice-group", "wrong") == \
        SASL_AUTHENTICATION_FAILED

    # Before authentication only ApiVersions and SASL are served: anything else closes.
    raw = await su.connect(sidecar.port, su.client_context(certs))
    try:
        with pytest.raises(ConnectionError):
            await raw.call(sc.commit_request("alice-group", TOPIC, {0: 1}))
    finally:
        raw.close()
    # A plaintext client on the TLS port is closed; the sidecar serves on.
    plain = await sc.RawClient.connect(sidecar.port)
    try:
        with pytest.raises((ConnectionError, asyncio.TimeoutError)):
            await plain.call(sc.kio(18, 3, "ApiVersionsRequest", client_software_name="x",
                                    client_software_version="1"), timeout=5)
    finally:
        plain.close()
    assert await commit_as(sidecar.port, certs, "alice", "alice-group") == NONE


async def secured_fleet(stack: Stack, certs: Certs,
                        users_file: Any) -> tuple[Tansu, Sidecar, Sidecar]:
    """tansu with TOPIC, and two secured fleet members in front of it, both ready."""
    tansu = stack.tansu()
    await sc.create_topic(tansu.bootstrap, TOPIC, 1)
    first, second = (stack.sidecar(tansu.bootstrap, *secured(certs, users_file, True), fleet=True)
                     for _ in range(2))
    for member in (first, second):
        await rc.wait_until(lambda m=member: readyz(m)[0] == 200, 60, "the fleet to be ready")
    return tansu, first, second


async def test_a_fleet_shares_its_acls_and_credentials(stack: Stack, certs: Certs,
                                                       users_file: Any) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    tansu, first, second = await secured_fleet(stack, certs, users_file)

    # An ACL and a user made on the first member...
    client = admin(first.bootstrap, certs)
    for future in client.create_acls([allow("User:alice", "GROUP", "fleet-group"),
                                      allow("User:alice", "TOPIC", TOPIC),
                                      allow("User:dave", "GROUP", "fleet-group"),
                                      allow("User:dave", "TOPIC", TOPIC)],
                                     request_timeout=10).values():
        assert future.result(15) is None
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"dave-secret")
    for future in client.alter_user_scram_credentials([upsert], request_timeout=10).values():
        assert future.result(15) is None

    # ...judge and log in clients on the second (it reads them from the security topic).
    async def on_second(user: str, password: str | None = None) -> int:
        return await commit_as(second.port, certs, user, "fleet-group", password)

    await rc.wait_until(lambda: _is(on_second("alice"), NONE), 20,
                              "the second member to apply the ACL")
    await rc.wait_until(lambda: _is(on_second("dave", "dave-secret"), NONE), 20,
                              "the second member to know dave")

    # A deletion on the second reaches the first.
    from confluent_kafka.admin import AclBindingFilter

    binding = allow("User:alice", "GROUP", "fleet-group")
    deleting = AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type,
                                binding.principal, binding.host, binding.operation,
                                binding.permission_type)
    second_admin = admin(second.bootstrap, certs)  # held: its futures die with it
    for future in second_admin.delete_acls([deleting]).values():
        assert len(future.result(15)) == 1
    await rc.wait_until(
        lambda: _is(commit_as(first.port, certs, "alice", "fleet-group"),
                    GROUP_AUTHORIZATION_FAILED),
        20, "the first member to apply the deletion")

    # A member started now reads all of it before it is ready.
    third = stack.sidecar(tansu.bootstrap, *secured(certs, users_file, True), fleet=True)
    await rc.wait_until(lambda: readyz(third)[0] == 200, 60, "the third member to be ready")
    assert await commit_as(third.port, certs, "dave", "fleet-group", "dave-secret") == NONE
    assert await commit_as(third.port, certs, "alice", "fleet-group") == \
        GROUP_AUTHORIZATION_FAILED


async def test_a_secured_fleet_listener_serves_only_members(stack: Stack, certs: Certs,
                                                            users_file: Any) -> None:
    _, first, second = await secured_fleet(stack, certs, users_file)
    assert "mutual TLS, as User:CN=localhost" in first.log(), first.log()

    # One group, through both members: one of them owns it, the other forwards over mutual TLS.
    async def committed_through_both() -> bool:
        return [await commit_as(m.port, certs, "admin", "members-group") for m in (first, second)
                ] == [NONE, NONE]  # fmt: skip

    await rc.wait_until(committed_through_both, 30, "a group's commits through both members")

    # A plaintext client on a member's fleet listener never gets to send a request...
    port = fleet_port(first)
    plain = await sc.RawClient.connect(port)
    assert await _closed_unanswered(plain), stack.explain()
    # ...nor does a certificate of the same CA that is not the members' (no CLUSTER_ACTION).
    mallory = su.client_context(certs, certs.client("mallory"))
    assert await _closed_unanswered(await su.connect(port, mallory)), stack.explain()
    await rc.wait_until(lambda: "User:CN=mallory,O=groupcoord is not a fleet member"
                        in first.log(), 10, "the refusal to be logged")  # fmt: skip
    # The members still reach each other.
    assert await committed_through_both(), stack.explain()


async def _closed_unanswered(client: sc.RawClient) -> bool:
    """A group request a member would forward (an OffsetCommit of no member, as admin tools
    send): True when the connection is closed without an answer (a timeout is not that)."""
    try:
        await client.send(sc.commit_request("members-group", TOPIC, {0: 2}))
        await client.receive(timeout=10)
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError, OSError):
        return True
    finally:
        client.close()
    return False


async def _is(code: Any, want: int) -> bool:
    return await code == want
