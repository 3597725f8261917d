"""Issue 22 acceptance: ACLs created with a real admin client (confluent-kafka's AdminClient
create_acls) and SCRAM credentials created with AlterUserScramCredentials (its
alter_user_scram_credentials) are records of the log: after a SIGTERM and a start on the same
data dir, describe_acls returns the same ACLs, and the new user logs in with its password and
runs a real consumer the ACLs allow.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.support import realclients as rc

pytestmark = pytest.mark.clients

USER, PASSWORD = "erin", "erin-secret"


def admin_client(broker: rc.Broker) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(su.confluent_conf(broker.bootstrap, su.sasl(
        "SCRAM-SHA-512", "admin", protocol="SASL_PLAINTEXT")))


def erins_acls() -> list[Any]:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    allow = AclPermissionType.ALLOW
    principal = f"User:{USER}"
    return [
        AclBinding(ResourceType.GROUP, "erin-", ResourcePatternType.PREFIXED, principal, "*",
                   AclOperation.READ, allow),
        AclBinding(ResourceType.TOPIC, su.TOPIC, ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.READ, allow),
        AclBinding(ResourceType.GROUP, "erin-private", ResourcePatternType.LITERAL,
                   "User:bob", "127.0.0.1", AclOperation.DELETE, AclPermissionType.DENY),
    ]


def described(admin: Any) -> set[tuple[Any, ...]]:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    return {_key(b) for b in admin.describe_acls(every, request_timeout=10).result(15)}


def _key(b: Any) -> tuple[Any, ...]:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
            b.permission_type)


def alter_scram(admin: Any) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    upserts = [UserScramCredentialUpsertion(USER, ScramCredentialInfo(mechanism, 8192),
                                            PASSWORD.encode())
               for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(15)


def scram_mechanisms(admin: Any) -> set[str]:
    description = admin.describe_user_scram_credentials([USER])[USER].result(15)
    return {info.mechanism.name for info in description.scram_credential_infos}


async def test_acls_and_scram_credentials_survive_a_restart(
    tmp_path: Path, peers_dir: Path, users_file: Path, brokers: list[rc.Broker], members: Any,
) -> None:
    args = su.security_args("SASL_PLAINTEXT", None, users_file, authorizer=True)
    first = su.start(tmp_path, peers_dir, args)
    brokers.append(first)
    admin = admin_client(first)
    for future in admin.create_acls(erins_acls(), request_timeout=10).values():
        assert future.result(15) is None
    await asyncio.to_thread(alter_scram, admin)
    before = await asyncio.to_thread(described, admin)
    assert before == {_key(b) for b in erins_acls()}
    assert await asyncio.to_thread(scram_mechanisms, admin) == {"SCRAM_SHA_256", "SCRAM_SHA_512"}
    del admin

    su.stop_gracefully(first)
    assert first.proc.returncode == 0, first.log_tail()
    second = su.start(tmp_path, peers_dir, args, data_dir=first.data_dir, port=first.port)
    brokers.append(second)

    admin = admin_client(second)
    assert await asyncio.to_thread(described, admin) == before
    assert await asyncio.to_thread(scram_mechanisms, admin) == {"SCRAM_SHA_256", "SCRAM_SHA_512"}
    # erin logs in with the password given through AlterUserScramCredentials: both SCRAM
    # mechanisms, and PLAIN (checked against the salted SCRAM credential, the only one stored)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        client = await su.connect(second.port)
        answer = await su.authenticate(client, USER, PASSWORD, mechanism)
        client.close()
        assert answer.error_code == 0, (mechanism, answer)
    wrong = await su.connect(second.port)
    assert (await su.authenticate(wrong, USER, "not-erins", "SCRAM-SHA-512")).error_code == 58
    wrong.close()
    # and a real consumer as erin forms its group (the restored ACLs allow it) and commits
    security = {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-512", "username": USER,
                "password": PASSWORD}
    m = await members("confluent", "erin-consumer", bootstrap=second.bootstrap,
                      group="erin-group", topic=su.TOPIC, security=security)
    await rc.wait_until(lambda: m.owned == frozenset(range(su.PARTITIONS)), 60,
                        "erin's consumer to take every partition",
                        explain=lambda: rc.explain_members([m], second))
    assert m.proc.stdin is not None
    m.proc.stdin.write(b"commit 3\n")
    await rc.wait_until(lambda: any(e["event"] in ("committed", "commit_failed")
                                    for e in m.events), 30, "erin's commit")
    assert [e for e in m.events if e["event"] == "commit_failed"] == []
    # outside its prefix, the same user is denied
    denied = await rc.wait_until(lambda: _join_error(second.port), 10, "a JoinGroup answer")
    assert denied == 30
    await m.close()


async def _join_error(port: int) -> int:
    from tests.security.test_authz_wire import join

    client = await su.connect(port)
    try:
        answer = await su.authenticate(client, USER, PASSWORD, "SCRAM-SHA-512")
        assert answer.error_code == 0, answer
        return int((await client.call(join("not-erins"))).error_code)
    finally:
        client.close()
