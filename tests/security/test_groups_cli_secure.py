"""`groupcoord groups --command-config FILE` against a secured groupcoord (SASL_SSL, SCRAM-SHA-512,
the ACL authorizer), with the properties file Kafka's own tools take (coordinator.tools.
command_config): the super user lists and describes a group and resets its offsets; a user
without ACLs sees no group; without the file the connection is refused in one line; a file we
cannot honour (a JKS truststore) is refused before any connection.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support import sidecar_util as sc
from tests.support.tls import Certs

pytestmark = pytest.mark.clients

GROUP = "secured-group"


def command_config(tmp: Path, certs: Certs, user: str, **extra: str) -> Path:
    path = tmp / f"{user}.properties"
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{su.USERS[user]}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        **extra,
    }
    path.write_text("# as kafka-consumer-groups.sh --command-config takes it\n"
                    + "".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def cli(broker: rc.Broker, *args: str) -> Any:
    return ops_util.groupcoord_cli("groups", *args, "--bootstrap-server", broker.bootstrap)


async def test_groups_over_sasl_ssl_with_a_command_config(
    tmp_path: Path, peers_dir: Path, certs: Certs, users_file: Path, brokers: list[rc.Broker],
) -> None:
    broker = su.start(tmp_path, peers_dir, su.security_args("SASL_SSL", certs, users_file,
                                                            authorizer=True))
    brokers.append(broker)
    admin = await su.login(broker.port, "admin", su.client_context(certs), "SCRAM-SHA-512")
    try:
        response = await admin.call(sc.commit_request(GROUP, su.TOPIC, {0: 7, 1: 9}))
        assert {p.error_code for t in response.topics for p in t.partitions} == {0}
    finally:
        admin.close()
    config = str(command_config(tmp_path, certs, "admin"))

    listed = cli(broker, "list", "--command-config", config, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["group_id"] for row in json.loads(listed.stdout)] == [GROUP]
    described = cli(broker, "describe", GROUP, "--command-config", config, "--json")
    assert described.returncode == 0, described.stderr
    offsets = {(r["partition"], r["current_offset"]) for r in json.loads(described.stdout)[0]
               ["offsets"]}
    assert {(0, 7), (1, 9)} <= offsets, described.stdout
    reset = cli(broker, "reset-offsets", GROUP, "--topic", su.TOPIC, "--to-offset", "0",
                "--execute", "--command-config", config, "--json")
    assert reset.returncode == 0, reset.stderr
    after = cli(broker, "describe", GROUP, "--command-config", config, "--json")
    assert {(r["partition"], r["current_offset"]) for r in json.loads(after.stdout)[0]
            ["offsets"]} >= {(0, 0), (1, 0)}, after.stdout

    # bob may describe nothing: ListGroups hides the group from him.
    bobs = cli(broker, "list", "--command-config",
               str(command_config(tmp_path, certs, "bob")), "--json")
    assert bobs.returncode == 0, bobs.stderr
    assert json.loads(bobs.stdout) == []
    # Without the file: a plaintext client on a SASL_SSL port, refused in one line.
    plain = cli(broker, "list", "--timeout-ms", "3000")
    assert plain.returncode == 1 and plain.stderr.count("\n") == 1, plain.stderr
    # A value we cannot honour is refused before connecting.
    jks = cli(broker, "list", "--command-config",
              str(command_config(tmp_path, certs, "admin", **{"ssl.truststore.type": "JKS"})))
    assert jks.returncode == 2 and "PEM" in jks.stderr, jks.stderr
