"""Issue 22: the Java AdminClient (kafka-clients 4.4, what kafka-acls.sh runs) manages
groupcoord's ACLs unchanged over SASL_SSL: createAcls, describeAcls and deleteAcls, a principal
without CLUSTER ALTER is refused, and the ACLs it makes and deletes judge a client at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.support import realclients as rc
from tests.support import sidecar_util as sc
from tests.support.tls import Certs

pytestmark = [pytest.mark.clients, pytest.mark.java]

GROUP = "java-acl-group"
NONE, GROUP_AUTHORIZATION_FAILED = 0, 30


def java_admin(peers: Path, broker: rc.Broker, certs: Certs, user: str, *args: str) -> Any:
    cmd = rc.driver_command("java", peers, [])
    cmd = [*cmd[: cmd.index("ConsumerDriver")], "AdminDriver", broker.bootstrap, *args]
    env = dict(os.environ, ADMIN_SECURITY=json.dumps(su.sasl("SCRAM-SHA-512", user, certs)))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False, env=env)
    assert done.returncode == 0, f"AdminDriver {args}: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


async def alice_commits(broker: rc.Broker, certs: Certs) -> int:
    client = await su.login(broker.port, "alice", su.client_context(certs))
    try:
        response = await client.call(sc.commit_request(GROUP, su.TOPIC, {0: 1}))
        return int(response.topics[0].partitions[0].error_code)
    finally:
        client.close()


async def test_the_java_admin_client_creates_describes_and_deletes_acls(
    tmp_path: Path, peers_dir: Path, java_peers: Path, certs: Certs, users_file: Path,
    brokers: list[rc.Broker],
) -> None:
    broker = su.start(tmp_path, peers_dir, su.security_args("SASL_SSL", certs, users_file,
                                                            authorizer=True))
    brokers.append(broker)

    def admin(user: str, *args: str) -> Any:
        return java_admin(java_peers, broker, certs, user, *args)

    # Without CLUSTER ALTER: refused, nothing made.
    refused = await asyncio.to_thread(admin, "bob", "create-acl", "User:bob", "GROUP", GROUP,
                                      "READ")
    assert refused == {"result": "ClusterAuthorizationException"}
    assert await alice_commits(broker, certs) == GROUP_AUTHORIZATION_FAILED

    for resource, name in (("GROUP", GROUP), ("TOPIC", su.TOPIC)):
        made = await asyncio.to_thread(admin, "admin", "create-acl", "User:alice", resource,
                                       name, "READ")
        assert made == {"result": "OK"}
    described = await asyncio.to_thread(admin, "admin", "describe-acls")
    assert described == {"acls": [f"GROUP:{GROUP}:User:alice:READ:ALLOW",
                                  f"TOPIC:{su.TOPIC}:User:alice:READ:ALLOW"]}
    assert await alice_commits(broker, certs) == NONE

    assert await asyncio.to_thread(admin, "admin", "delete-acls", "User:alice") == {"deleted": 2}
    assert await asyncio.to_thread(admin, "admin", "describe-acls") == {"acls": []}
    assert await alice_commits(broker, certs) == GROUP_AUTHORIZATION_FAILED
