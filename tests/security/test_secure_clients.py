"""Issue 22 acceptance, real clients on a secured listener: SASL_SSL with SCRAM-SHA-512 and with
PLAIN (Java kafka-clients, confluent-kafka, aiokafka, kafka-python, kafkajs each form a group and
commit), a wrong password (SASL_AUTHENTICATION_FAILED), a plaintext client on the TLS port (closed,
the server keeps serving), and KIP-368 re-authentication within --sasl-session-lifetime-ms.

One SASL_SSL server (no authorizer) serves the module; the KIP-368 test has its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.support import realclients as rc
from tests.support.sidecar_util import kio
from tests.support.tls import Certs

pytestmark = pytest.mark.clients

SASL_AUTHENTICATION_FAILED = 58
OFFSET = 7


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory: pytest.TempPathFactory, peers_dir: Path, certs: Certs,
             users_file: Path) -> Iterator[rc.Broker]:
    tmp = tmp_path_factory.mktemp("sasl-ssl")
    broker = su.start(tmp, peers_dir, su.security_args("SASL_SSL", certs, users_file))
    yield broker
    broker.stop()


def available_kinds(request: pytest.FixtureRequest) -> list[str]:
    """The five clients, less the Java one or kafkajs when their peer is not installed."""
    kinds = ["confluent", "aiokafka", "kafka-python"]
    for kind, fixture in (("java", "java_peers"), ("kafkajs", "kafkajs_peers")):
        try:
            request.getfixturevalue(fixture)
        except pytest.skip.Exception:
            continue
        kinds.append(kind)
    return kinds


async def tell(member: rc.Member, line: str) -> None:
    assert member.proc.stdin is not None
    member.proc.stdin.write(line.encode() + b"\n")
    await member.proc.stdin.drain()


def committed(member: rc.Member, offset: int) -> bool:
    for e in member.events:
        assert e["event"] != "commit_failed", f"{member.name}: {e}\n{member.log_tail()}"
        assert e["event"] != "crashed", f"{member.name}: {e}\n{member.log_tail()}"
        if e["event"] == "committed" and e["offset"] == offset:
            return True
    return False


async def fetch_offsets(port: int, certs: Certs, group: str) -> dict[int, int]:
    """The group's committed offsets, read over SASL_SSL as the admin (a raw OffsetFetch v7)."""
    client = await su.login(port, "admin", su.client_context(certs))
    try:
        response = await client.call(kio(
            9, 7, "OffsetFetchRequest", group_id=group, require_stable=False, topics=(kio(
                9, 7, "OffsetFetchRequestTopic", name=su.TOPIC,
                partition_indexes=tuple(range(su.PARTITIONS))),)))
    finally:
        client.close()
    assert response.error_code == 0, response
    return {p.partition_index: p.committed_offset for p in response.topics[0].partitions}


async def form_and_commit(broker: rc.Broker, members: Any, certs: Certs, kinds: list[str],
                          mechanism: str, tag: str) -> list[rc.Member]:
    """One single-member group per client kind: each takes all the partitions, commits OFFSET,
    and OffsetFetch reads OFFSET back for every partition."""
    security = su.sasl(mechanism, "alice", certs)
    started = [await members(kind, f"{kind}-{tag}", bootstrap=broker.bootstrap,
                             group=f"g-{kind}-{tag}", topic=su.TOPIC, security=security)
               for kind in kinds]

    def all_assigned() -> bool:
        for m in started:
            assert m.running(), f"{m.name} exited\n{m.log_tail()}\n{broker.log_tail()}"
        return all(m.owned == frozenset(range(su.PARTITIONS)) for m in started)

    await rc.wait_until(all_assigned, 90, f"{kinds} to each form a group over SASL_SSL "
                        f"{mechanism}", explain=lambda: rc.explain_members(started, broker))
    for m in started:
        await tell(m, f"commit {OFFSET}")
    await rc.wait_until(lambda: all(committed(m, OFFSET) for m in started), 30,
                        "every client to commit", explain=lambda: rc.explain_members(started,
                                                                                    broker))
    for m in started:
        offsets = await fetch_offsets(broker.port, certs, f"g-{m.kind}-{tag}")
        assert offsets == dict.fromkeys(range(su.PARTITIONS), OFFSET), (m.kind, offsets)
    return started


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_real_clients_form_a_group_and_commit_over_sasl_ssl(
    request: pytest.FixtureRequest, sasl_ssl: rc.Broker, members: Any, certs: Certs,
    mechanism: str,
) -> None:
    kinds = available_kinds(request)
    started = await form_and_commit(sasl_ssl, members, certs, kinds, mechanism,
                                    mechanism.lower())
    await asyncio.gather(*(m.close() for m in started))
    assert sasl_ssl.alive()


async def test_a_wrong_password_fails_with_sasl_authentication_failed(
    sasl_ssl: rc.Broker, certs: Certs,
) -> None:
    context = su.client_context(certs)
    for mechanism in ("PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"):
        client = await su.connect(sasl_ssl.port, context)
        try:
            answer = await su.authenticate(client, "alice", "not-her-password", mechanism)
            assert answer.error_code == SASL_AUTHENTICATION_FAILED, (mechanism, answer)
            assert answer.error_message, answer
            with pytest.raises(ConnectionError):  # and the server closes the connection
                await client.call(kio(18, 3, "ApiVersionsRequest", client_software_name="t",
                                      client_software_version="1"))
        finally:
            client.close()
    # What a real client sees: librdkafka reports the broker's SASL_AUTHENTICATION_FAILED as an
    # authentication error carrying the broker's message.
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    security = {**su.sasl("SCRAM-SHA-512", "alice", certs), "password": "wrong"}
    errors: list[KafkaError] = []
    conf = {**su.confluent_conf(sasl_ssl.bootstrap, security),
            "error_cb": errors.append, "reconnect.backoff.max.ms": 1000}
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        await asyncio.to_thread(admin.list_topics, timeout=5)
    await rc.wait_until(lambda: admin.poll(0.1) is not None and any(
        e.code() == KafkaError._AUTHENTICATION for e in errors), 10,
        "librdkafka to report the authentication failure", explain=lambda: repr(errors))
    text = str(next(e for e in errors if e.code() == KafkaError._AUTHENTICATION))
    assert "SASL authentication error" in text and "Authentication failed" in text, text


async def test_a_plaintext_client_on_the_tls_port_is_closed_without_harm(
    sasl_ssl: rc.Broker, certs: Certs,
) -> None:
    # A client already logged in over TLS before the stray one, and still working after.
    before = await su.login(sasl_ssl.port, "bob", su.client_context(certs))
    api_versions = kio(18, 3, "ApiVersionsRequest", client_software_name="t",
                       client_software_version="1")
    try:
        for payload in (None, b"\x00\x00\x00\x10garbage-garbage!", b"\x16\x03\x01\xff\xff"):
            plain = await su.connect(sasl_ssl.port)  # no TLS
            try:
                if payload is None:
                    await plain.send(api_versions)  # a Kafka request in clear
                else:
                    plain.writer.write(payload)
                with pytest.raises((ConnectionError, TimeoutError)) as closed:
                    await plain.receive(timeout=10)
                assert isinstance(closed.value, ConnectionError), "not closed within 10 s"
            finally:
                plain.close()
        assert sasl_ssl.alive(), sasl_ssl.log_tail()
        assert (await before.call(api_versions)).error_code == 0
        after = await su.login(sasl_ssl.port, "carol", su.client_context(certs))
        assert (await after.call(api_versions)).error_code == 0
        after.close()
    finally:
        before.close()
    assert "Traceback" not in sasl_ssl.log_path.read_text(), sasl_ssl.log_tail()


# ------------------------------------------------------------------------------------- KIP-368

LIFETIME_MS = 3000
EXPIRED = "SASL session expired"


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory: pytest.TempPathFactory, peers_dir: Path, certs: Certs,
                   users_file: Path) -> Iterator[rc.Broker]:
    tmp = tmp_path_factory.mktemp("reauth")
    args = su.security_args("SASL_SSL", certs, users_file,
                            extra=("--sasl-session-lifetime-ms", str(LIFETIME_MS)))
    broker = su.start(tmp, peers_dir, args)
    yield broker
    broker.stop()


async def test_a_connection_that_does_not_reauthenticate_is_closed(
    short_sessions: rc.Broker, certs: Certs,
) -> None:
    """The control for the next test: a session that runs out is closed and logged."""
    client = await su.login(short_sessions.port, "bob", su.client_context(certs))
    metadata = kio(3, 12, "MetadataRequest", topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    t0 = time.monotonic()

    async def closed() -> bool:
        try:
            await client.call(metadata)
        except ConnectionError:
            return True
        return False

    try:
        await rc.wait_until(closed, 15, "the server to close a session past its lifetime",
                            interval=0.2)
    finally:
        client.close()
    assert time.monotonic() - t0 >= LIFETIME_MS / 1000 * 0.9
    await rc.wait_until(lambda: "session expired" in short_sessions.log_path.read_text(), 5,
                        "the expiry in the server log", explain=short_sessions.log_tail)


async def test_real_clients_reauthenticate_before_their_session_expires(
    request: pytest.FixtureRequest, short_sessions: rc.Broker, members: Any, certs: Certs,
) -> None:
    """KIP-368: librdkafka and the Java client re-authenticate within session_lifetime_ms on
    the same connection; the group stays as it is for several lifetimes and commits still work."""
    kinds = ["confluent"]
    if "java" in available_kinds(request):
        kinds.append("java")
    started = [await members(kind, f"{kind}-reauth", bootstrap=short_sessions.bootstrap,
                             group=f"g-reauth-{kind}", topic=su.TOPIC,
                             security=su.sasl("SCRAM-SHA-512", "alice", certs))
               for kind in kinds]
    await rc.wait_until(lambda: all(m.owned == frozenset(range(su.PARTITIONS)) for m in started),
                        90, "the members to form their groups",
                        explain=lambda: rc.explain_members(started, short_sessions))

    def expired_lines() -> list[str]:
        return [line for line in short_sessions.log_path.read_text().splitlines()
                if "session expired" in line and "User:alice" in line]

    t0 = time.monotonic()
    offsets = iter(range(1, 100))
    offset = next(offsets)
    for m in started:
        await tell(m, f"commit {offset}")

    async def four_lifetimes_later() -> bool:
        nonlocal offset
        assert not expired_lines(), "\n".join(expired_lines())
        for m in started:
            assert m.running(), m.log_tail()
            revoked = [e for e in m.events if e["event"] == "revoked" and e["partitions"]]
            assert not revoked, f"{m.name} lost its partitions: {revoked}\n{m.log_tail()}"
        if not all(committed(m, offset) for m in started):
            return False
        if time.monotonic() - t0 >= 4 * LIFETIME_MS / 1000:
            return True
        offset = next(offsets)  # keep committing: every request checks the session
        for m in started:
            await tell(m, f"commit {offset}")
        return False

    await rc.wait_until(four_lifetimes_later, 60, "four session lifetimes of commits",
                        interval=0.5,
                        explain=lambda: rc.explain_members(started, short_sessions))
    assert not expired_lines(), "\n".join(expired_lines())
    await asyncio.gather(*(m.close() for m in started))
