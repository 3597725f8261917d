"""Kafka's own kafka-acls.sh (AclCommand, kafka-tools 4.4) against a secured groupcoord (SASL_SSL,
the ACL authorizer, the tool logged in as the super user through --command-config), compared with
the same tool against an Apache Kafka 4.4 with its StandardAuthorizer, for the same steps:
ConsumerGroup and Topic ACLs added (literal and prefixed, allow and deny, the --consumer
shorthand), listed (all, by resource, by principal) and removed (one entry, then a resource's
all), each output compared whole.

The Kafka here is one of this test's own: the shared `kafka` fixture has no authorizer. It listens
in PLAINTEXT with everyone a super user (User:ANONYMOUS): what the tool prints depends on the
ACLs and not on how it logged in. Kafka's ACLs reach its authorizer through the metadata log a
moment after CreateAcls answers, so its "Current ACLs" after an --add may lag: each step on Kafka
waits until --list shows what the step wrote before the outputs are compared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.support import realclients as rc
from tests.support.kafka import KafkaCluster
from tests.support.kafka_tools import ACLS, KafkaTools, Result, tool_classes, tools
from tests.support.tls import Certs

__all__ = ["tool_classes", "tools"]  # the fixtures

pytestmark = [pytest.mark.clients, pytest.mark.java]

GROUP, TOPIC, PREFIX = "acl-group", "acl-topic", "acl-team-"
# Every step, as kafka-acls.sh arguments after --bootstrap-server (and --command-config).
STEPS: list[tuple[str, ...]] = [
    ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", GROUP),
    ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
     "--topic", TOPIC),
    ("--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1", "--operation", "All",
     "--group", GROUP),
    ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", PREFIX,
     "--resource-pattern-type", "prefixed"),
    ("--add", "--allow-principal", "User:carol", "--consumer", "--topic", TOPIC, "--group",
     GROUP),
    ("--list",),
    ("--list", "--group", GROUP),
    ("--list", "--topic", TOPIC),
    ("--list", "--group", PREFIX, "--resource-pattern-type", "prefixed"),
    ("--list", "--group", "acl-team-x", "--resource-pattern-type", "match"),
    ("--list", "--principal", "User:alice"),
    ("--remove", "--allow-principal", "User:alice", "--operation", "Read", "--group", GROUP,
     "--force"),
    ("--list", "--group", GROUP),
    ("--remove", "--topic", TOPIC, "--force"),
    ("--remove", "--group", PREFIX, "--resource-pattern-type", "prefixed", "--force"),
    ("--list",),
    ("--list", "--topic", "no-such-topic"),
]


@pytest.fixture
def secured_kafka(java_peers: Path, tmp_path: Path) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(java_peers, tmp_path / "kafka-acl", size=1, overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    })  # fmt: skip
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def command_config(path: Path, certs: Certs) -> Path:
    """The tool's client properties for groupcoord: SCRAM-SHA-512 as the super user, over TLS
    trusting the test CA (PEM)."""
    password = su.USERS["admin"]
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{password}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
        "ssl.endpoint.identification.algorithm=\n")
    return path


def run_steps(tools: KafkaTools, boot: tuple[str, ...]) -> list[Result]:
    results = []
    for step in STEPS:
        results.append(tools.run(ACLS, *boot, *step))
    return results


def test_kafka_acls_on_groupcoord_as_on_kafka(
    tmp_path: Path, peers_dir: Path, certs: Certs, users_file: Path, brokers: list[rc.Broker],
    secured_kafka: KafkaCluster, tools: KafkaTools,
) -> None:
    broker = su.start(tmp_path, peers_dir, su.security_args("SASL_SSL", certs, users_file,
                                                            authorizer=True))
    brokers.append(broker)
    config = command_config(tmp_path / "admin.properties", certs)
    ours = run_steps(tools, ("--bootstrap-server", broker.bootstrap, "--command-config",
                             str(config)))
    theirs = run_steps(tools, ("--bootstrap-server", secured_kafka.bootstrap))
    mismatches = [
        f"$ kafka-acls.sh {' '.join(step)}\n--- groupcoord ---\n{_view(a)}\n--- kafka ---\n"
        f"{_view(b)}"
        for step, a, b in zip(STEPS, ours, theirs, strict=True) if a != b
    ]
    assert not mismatches, "\n\n".join(mismatches)
    # ... and the steps did what they say (not two equal errors)
    assert all(r.returncode == 0 and not r.stderr for r in ours), [_view(r) for r in ours]
    listed = ours[STEPS.index(("--list",))].stdout
    assert listed.count("Current ACLs for resource") == 3, listed
    assert "(principal=User:bob, host=10.0.0.1, operation=ALL, permissionType=DENY)" in listed
    left = ours[-2].stdout  # the last --list: bob's deny and carol's --consumer READ on GROUP
    assert left.count("Current ACLs for resource") == 1 and left.count("(principal=") == 2, left


def _view(result: Any) -> str:
    return f"exit {result.returncode}\n{result.stdout}--- stderr ---\n{result.stderr}"
