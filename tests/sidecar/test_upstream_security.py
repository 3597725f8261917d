"""Sidecar mode in front of a secured upstream (issue 22, item 4; issue 34).

The real one: Apache Kafka 4.4 with SSL and SASL_SSL (SCRAM-SHA-512) listeners (the
`kafka_secure` fixture, tests/support/kafka.py `Secured`). A sidecar carries records and a
consumer group through it, every link of its own verified TLS and, on SASL_SSL, authenticated
before it carries anything (a fleet member's aiokafka clients too); a wrong password or a CA that
did not sign the broker's certificate keeps it unready, with the reason on /readyz.

tansu 0.6.0 cannot serve TLS (its `--cert` and `--key` flags refuse each other) and keeps users
only in its memory engine; the PLAIN mechanism, which the Kafka fixture does not enable, is
checked against groupcoord itself, standalone with --security-protocol SASL_SSL: a
Kafka-compatible listener that verifies SCRAM and PLAIN and answers Metadata, ApiVersions and the
topic admin APIs, which is what the sidecar's own links need."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.security.client import ClientSecurity
from coordinator.sidecar.upstream_clients import (
    client_options,
    security_from_settings,
)
from tests.support import kafka as kafka_support
from tests.support import realclients as rc
from tests.support.sidecar_util import (
    REPO,
    Sidecar,
    Stack,
    create_topic,
    fetch,
    produce,
    readyz,
    stack,
)
from tests.support.tls import Certs, make_certs

pytestmark = pytest.mark.clients
__all__ = ["stack"]

USERS = "fleet:fleet-secret\n"


@pytest.fixture
def groupcoord_upstream(tmp_path: Path) -> Iterator[tuple[int, Certs]]:
    """groupcoord standalone with SASL_SSL (users: fleet/fleet-secret): (port, certs)."""
    certs = make_certs(tmp_path / "certs")
    users = tmp_path / "users"
    users.write_text(USERS)
    port = rc.free_port()
    log = (tmp_path / "upstream.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "upstream-data"), "--metrics-listen", "",
         "--security-protocol", "SASL_SSL", "--ssl-certfile", str(certs.server_cert),
         "--ssl-keyfile", str(certs.server_key), "--sasl-users-file", str(users)],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
    )  # fmt: skip
    try:
        rc.wait_until_sync(lambda: proc.poll() is not None or rc.can_connect("127.0.0.1", port),
                           20, "the SASL_SSL upstream to listen")  # fmt: skip
        assert proc.poll() is None, (tmp_path / "upstream.log").read_text()
        yield port, certs
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def sasl_flags(mechanism: str, password: str, ca: Path, user: str = "fleet") -> list[str]:
    return ["--upstream-security-protocol", "SASL_SSL", "--upstream-sasl-mechanism", mechanism,
            "--upstream-sasl-username", user, "--upstream-sasl-password", password,
            "--upstream-ssl-cafile", str(ca)]  # fmt: skip


# ------------------------------------------------------------------------ against Apache Kafka


def kafka_flags(protocol: str, ca: Path, password: str | None = None) -> list[str]:
    """The sidecar's flags for `kafka_secure`'s `protocol` listener (SASL_SSL as alice)."""
    if protocol == "SSL":
        return ["--upstream-security-protocol", "SSL", "--upstream-ssl-cafile", str(ca)]
    user, secret = next(iter(kafka_support.SECURE_USERS.items()))
    return sasl_flags("SCRAM-SHA-512", secret if password is None else password, ca, user)


async def consume_and_commit(bootstrap: str, group: str, topic: str, n: int) -> list[str]:
    """`n` records of `topic` read in `group` through `bootstrap`, then their offsets committed."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    keys: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while len(keys) < n and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            keys += [m.key.decode() for records in batches.values() for m in records]
        await consumer.commit()
    finally:
        await consumer.stop()
    return keys


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
async def test_a_sidecar_carries_records_and_groups_through_a_secured_kafka(
    stack: Stack, kafka_secure: Any, protocol: str
) -> None:
    """A fleet member (its state topic and fleet group on the upstream, through its aiokafka
    clients) in front of Kafka's SSL or SASL_SSL listener: a topic created, records produced and
    consumed in a group, offsets committed, all through the sidecar's verified links."""
    bootstrap = kafka_secure.bootstrap_for(protocol)
    sidecar = stack.sidecar(bootstrap, *kafka_flags(protocol, kafka_secure.security.ca),
                            fleet=True)  # fmt: skip
    await rc.wait_until(lambda: readyz(sidecar)[0] == 200, 60, "the sidecar to be ready",
                        explain=stack.explain)  # fmt: skip
    view = sidecar.upstream()
    assert view["state"] == "reachable" and view["brokers"] == 1, view
    topic, group = kafka_support.unique("secured"), kafka_support.unique("secured-group")
    await create_topic(sidecar.bootstrap, topic, 1)
    keys = [f"k{i}" for i in range(10)]
    await produce(sidecar.bootstrap, topic, keys)
    assert await consume_and_commit(sidecar.bootstrap, group, topic, 10) == keys
    assert await fetch(sidecar.port, group, topic, 1) == {0: 10}
    assert group in {g["group_id"] for g in sidecar.groups()}


async def wrong(stack: Stack, bootstrap: str, flags: list[str], reason: str) -> Sidecar:
    sidecar = stack.sidecar(bootstrap, *flags)
    await rc.wait_until(lambda: reason in readyz(sidecar)[1], 30,
                        f"/readyz to say {reason!r}", explain=stack.explain)  # fmt: skip
    assert readyz(sidecar)[0] == 503
    return sidecar


async def test_a_wrong_password_for_kafka_keeps_the_sidecar_unready(
    stack: Stack, kafka_secure: Any
) -> None:
    flags = kafka_flags("SASL_SSL", kafka_secure.security.ca, password="wrong")
    sidecar = await wrong(stack, kafka_secure.bootstrap_for("SASL_SSL"), flags,
                          "SASL_AUTHENTICATION_FAILED")  # fmt: skip
    assert "SASL_AUTHENTICATION_FAILED" in sidecar.log()


async def test_a_ca_that_did_not_sign_kafka_keeps_the_sidecar_unready(
    stack: Stack, kafka_secure: Any, tmp_path: Path
) -> None:
    other = make_certs(tmp_path / "other-ca")  # a CA of its own, not the broker's
    for protocol in ("SSL", "SASL_SSL"):
        await wrong(stack, kafka_secure.bootstrap_for(protocol), kafka_flags(protocol, other.ca),
                    "certificate verify failed")  # fmt: skip


# --------------------------------------------------------- against groupcoord's own listener


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_a_sidecar_reaches_a_sasl_ssl_upstream(
    stack: Stack, groupcoord_upstream: tuple[int, Certs], mechanism: str
) -> None:
    port, certs = groupcoord_upstream
    sidecar = stack.sidecar(f"127.0.0.1:{port}", *sasl_flags(mechanism, "fleet-secret", certs.ca))
    await rc.wait_until(lambda: readyz(sidecar)[0] == 200, 20, "the sidecar to be ready",
                        explain=stack.explain)  # fmt: skip
    view = sidecar.upstream()
    assert view["state"] == "reachable" and view["brokers"] == 1, view
    # A client's request, forwarded on an authenticated TLS link: CreateTopics upstream.
    await create_topic(sidecar.bootstrap, "secured", 2)
    await rc.wait_until(lambda: "upstream topic secured has 2 partitions" in sidecar.log(), 10,
                        "the sidecar's refresh to see the topic", explain=stack.explain)


async def test_a_wrong_upstream_password_keeps_the_sidecar_unready(
    stack: Stack, groupcoord_upstream: tuple[int, Certs]
) -> None:
    port, certs = groupcoord_upstream
    sidecar = stack.sidecar(f"127.0.0.1:{port}", *sasl_flags("SCRAM-SHA-256", "wrong", certs.ca))
    await rc.wait_until(lambda: "SASL_AUTHENTICATION_FAILED" in readyz(sidecar)[1], 20,
                        "/readyz to name the refused authentication", explain=stack.explain)
    assert readyz(sidecar)[0] == 503


def test_the_fleets_aiokafka_clients_get_the_same_security() -> None:
    class Settings:
        upstream_security_protocol = "SASL_SSL"
        upstream_sasl_mechanism = "SCRAM-SHA-512"
        upstream_sasl_username = "fleet"
        upstream_sasl_password = "pw"
        upstream_ssl_cafile = ""

    security = security_from_settings(Settings())
    options = client_options("k:9092", security)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("fleet", "pw")
    assert options["ssl_context"] is security.ssl_context is not None
    plain = client_options("k:9092", ClientSecurity())
    assert plain["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in plain and "sasl_mechanism" not in plain
