"""Group configs at the wire: DescribeConfigs (32) and IncrementalAlterConfigs (44) on the GROUP
resource (Kafka 4.4's GroupConfig names), kio-encoded, against Apache Kafka 4.4 (the reference)
and groupcoord's standalone server, compared answer by answer; confluent's AdminClient on both;
and a restart keeping what was set.

groupcoord's server runs with the test cluster's group.share/group.consumer heartbeat and session
settings (tests/support/kafka.py), so the defaults it describes are the cluster's. Only the names
groupcoord keeps are compared (Kafka 4.4 also describes streams.*, DLQ and assignor configs).
Error messages are compared too, except where noted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.core.share.group_configs import CONFIG_DEFS
from tests.support.kafka import unique
from tests.support.realclients import wait_until
from tests.support.sidecar_util import (
    RawClient,
    Stack,
    Upstream,
    create_topic,
    kio,
    upstream,
)

__all__ = ["upstream"]  # the fixture

E = ErrorCode
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
KEPT = tuple(CONFIG_DEFS)
# The test cluster's broker settings (tests/support/kafka.py), for groupcoord's server.
CLUSTER_SETTINGS = {"share_heartbeat_interval_ms": 1000, "share_session_timeout_ms": 10000,
                    "consumer_heartbeat_interval_ms": 1000, "consumer_session_timeout_ms": 10000}


def describe(group: str, keys: tuple[str, ...] | None = KEPT, synonyms: bool = False,
             version: int = 4) -> Any:
    docs = {"include_documentation": False} if version >= 3 else {}
    return kio(32, version, "DescribeConfigsRequest", resources=(
        kio(32, version, "DescribeConfigsResource", resource_type=GROUP, resource_name=group,
            configuration_keys=keys),), include_synonyms=synonyms, **docs)


def alter(group: str, *configs: tuple[str, int, str | None], validate_only: bool = False) -> Any:
    return kio(44, 1, "IncrementalAlterConfigsRequest", resources=(
        kio(44, 1, "AlterConfigsResource", resource_type=GROUP, resource_name=group,
            configs=tuple(kio(44, 1, "AlterableConfig", name=n, config_operation=op, value=v)
                          for n, op, v in configs)),), validate_only=validate_only)


def described(response: Any) -> list[Any]:
    out = []
    for r in response.results:
        entries = sorted((c.name, c.value, int(c.config_source),
                          int(getattr(c, "config_type", 0)), c.read_only,
                          c.is_sensitive, tuple((s.name, s.value, int(s.source))
                                                for s in c.synonyms))
                         for c in r.configs if c.name in KEPT)
        out.append((int(r.error_code), r.error_message, int(r.resource_type), entries))
    return out


def altered(response: Any) -> list[Any]:
    return [(int(r.error_code), r.error_message, int(r.resource_type))
            for r in response.responses]


async def scenario(port: int, g: str) -> list[Any]:
    client = await RawClient.connect(port)
    steps: list[Any] = []

    async def call(request: Any, read: Callable[[Any], list[Any]]) -> None:
        steps.append(read(await client.call(request)))

    try:
        await call(describe(g), described)  # nothing set: the broker's values
        await call(alter(g, ("share.record.lock.duration.ms", SET, "2000"),
                         ("share.delivery.count.limit", SET, "2"),
                         ("share.auto.offset.reset", SET, "earliest")), altered)
        await call(describe(g), described)
        await call(describe(g, ("share.delivery.count.limit", "nope"), version=1), described)
        await call(alter(g, ("no.such.config", SET, "1")), altered)
        await call(alter(g, ("share.delivery.count.limit", SET, "abc")), altered)
        await call(alter(g, ("share.delivery.count.limit", SET, "11")), altered)
        await call(alter(g, ("share.delivery.count.limit", SET, "1")), altered)
        await call(alter(g, ("share.record.lock.duration.ms", SET, "999")), altered)
        await call(alter(g, ("share.auto.offset.reset", SET, "sometimes")), altered)
        await call(alter(g, ("share.isolation.level", SET, "read_committed")), altered)
        await call(alter(g, ("share.heartbeat.interval.ms", SET, "5000"),
                         ("share.session.timeout.ms", SET, "5000")), altered)
        await call(alter(g, ("share.delivery.count.limit", APPEND, "3")), altered)
        await call(alter(g, ("share.delivery.count.limit", SET, None)), altered)
        await call(alter(g, ("share.delivery.count.limit", SET, "3"),
                         ("share.delivery.count.limit", SET, "4")), altered)
        await call(alter(g, ("share.delivery.count.limit", SET, "3"), validate_only=True),
                   altered)
        await call(describe(g), described)  # validate_only changed nothing
        await call(alter(g, ("share.delivery.count.limit", DELETE, None),
                         ("no.such.config", DELETE, None)), altered)
        await call(describe(g), described)
        await call(alter(g, ("share.auto.offset.reset", SET, "by_duration:PT1H")), altered)
        await call(describe(g, ("share.record.lock.duration.ms", "share.heartbeat.interval.ms",
                                "share.delivery.count.limit"), synonyms=True), described)
        await call(describe(""), described)
        await call(alter("", ("share.delivery.count.limit", SET, "3")), altered)
    finally:
        client.close()
    return steps


@pytest.mark.timeout(180)
async def test_group_configs_answer_as_kafka(kafka: Any, server: Callable[..., Any]) -> None:
    expected = await scenario(int(kafka.bootstrap.rsplit(":", 1)[1]), unique("gc"))
    broker = server(**CLUSTER_SETTINGS)
    got = await scenario(broker.port, "local-gc")
    differ = [f"step {i}\n groupcoord: {have}\n Kafka 4.4:  {want}"
              for i, (have, want) in enumerate(zip(got, expected, strict=True)) if have != want]
    assert not differ, "\n".join(differ)


async def test_group_configs_survive_a_restart(server: Callable[..., Any]) -> None:
    """A change is a record: a kill -9 keeps exactly what was answered (a DELETE included), and
    validate_only wrote nothing."""
    broker = server()
    client = await RawClient.connect(broker.port)
    ok = [(0, None, GROUP)]
    assert altered(await client.call(alter("g", ("share.delivery.count.limit", SET, "2"),
                                           ("share.record.lock.duration.ms", SET, "2000")))) == ok
    assert altered(await client.call(alter("g", ("share.record.lock.duration.ms", DELETE, None),
                                           ("share.isolation.level", SET, "read_committed")))) == ok
    assert altered(await client.call(alter("h", ("share.delivery.count.limit", SET, "3"),
                                           validate_only=True))) == ok
    before = described(await client.call(describe("g"))) + described(
        await client.call(describe("h")))
    client.close()
    broker.stop()  # SIGKILL
    restarted = server(extra=["--data-dir", str(broker.data_dir)])
    client = await RawClient.connect(restarted.port)

    async def loaded() -> list[Any] | None:  # COORDINATOR_LOAD_IN_PROGRESS until then
        got = described(await client.call(describe("g"))) + described(
            await client.call(describe("h")))
        return None if any(r[0] == E.coordinator_load_in_progress for r in got) else got

    after = await wait_until(loaded, 30, "the restarted server to load")
    client.close()
    assert after == before
    set_here = {(name, value) for _, _, _, entries in after for name, value, source, *_ in entries
                if source == 8}
    assert set_here == {("share.delivery.count.limit", "2"),
                        ("share.isolation.level", "read_committed")}


def test_confluent_admin_client_sets_and_reads_group_configs(server: Callable[..., Any]) -> None:
    """confluent's AdminClient (librdkafka) on ResourceType.GROUP: incremental_alter_configs, then
    describe_configs sees the group's value as DYNAMIC_GROUP_CONFIG and the rest as defaults; a
    bad value fails the resource's future with INVALID_CONFIG."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    from tests.support import share_util as su

    broker = server()
    bootstrap = f"127.0.0.1:{broker.port}"
    su.set_group_configs(bootstrap, "ag", {"share.record.lock.duration.ms": "2500"})
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    resource = ConfigResource(ResourceType.GROUP, "ag")
    configs = admin.describe_configs([resource], request_timeout=15)[resource].result(30)
    lock = configs["share.record.lock.duration.ms"]
    assert (lock.value, lock.source) == ("2500", ConfigSource.GROUP_CONFIG.value)
    limit = configs["share.delivery.count.limit"]
    assert (limit.value, limit.source) == ("5", ConfigSource.DEFAULT_CONFIG.value)
    bad = ConfigResource(ResourceType.GROUP, "ag", incremental_configs=[
        ConfigEntry("share.delivery.count.limit", "42",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad], request_timeout=15)[bad].result(30)
    assert refused.value.args[0].code() == E.invalid_config
    assert "2 to 10" in refused.value.args[0].str()


@pytest.mark.timeout(180)
async def test_a_sidecar_keeps_group_configs_itself(stack: Stack, upstream: Upstream) -> None:
    """Through a sidecar, GROUP resources are answered by it (the upstream never sees their
    configs: Kafka would describe its default); a request naming a topic too is split, the
    topic's part answered by the upstream, the answers merged in the request's order."""
    sidecar = stack.sidecar(upstream.bootstrap)
    group, topic = upstream.name("gc-side"), upstream.name("gc-topic")
    await create_topic(upstream.bootstrap, topic, 1)
    client = await RawClient.connect(sidecar.port)
    try:
        ok = [(0, None, GROUP)]
        assert altered(await client.call(alter(group, ("share.delivery.count.limit", SET, "3")))
                       ) == ok
        [(error, _, _, entries)] = described(await client.call(
            describe(group, ("share.delivery.count.limit",))))
        assert (error, [e[:3] for e in entries]) == (0, [("share.delivery.count.limit", "3", 8)])
        mixed = kio(32, 4, "DescribeConfigsRequest", resources=(
            # Every config of the topic: tansu closes the connection on named keys.
            kio(32, 4, "DescribeConfigsResource", resource_type=2, resource_name=topic,
                configuration_keys=None),
            kio(32, 4, "DescribeConfigsResource", resource_type=GROUP, resource_name=group,
                configuration_keys=("share.delivery.count.limit",))),
            include_synonyms=False, include_documentation=False)
        answer = await client.call(mixed)
        got = [(int(r.resource_type), r.resource_name, int(r.error_code),
                {c.name: c.value for c in r.configs}) for r in answer.results]
        assert [g[:3] for g in got] == [(2, topic, 0), (GROUP, group, 0)]
        assert got[1][3] == {"share.delivery.count.limit": "3"}  # ours
        if upstream.kind == "kafka":  # tansu describes none of a topic's configs
            assert got[0][3].get("cleanup.policy") == "delete"  # the upstream's
        if upstream.kind == "kafka" and not await _kafka_default(upstream, group):
            pytest.fail("the sidecar's group config reached Kafka")
    finally:
        client.close()


async def _kafka_default(upstream: Upstream, group: str) -> bool:
    """Kafka itself still describes the group's delivery count limit as its default."""
    client = await RawClient.connect(int(upstream.bootstrap.rsplit(":", 1)[1]))
    try:
        [(_, _, _, entries)] = described(await client.call(
            describe(group, ("share.delivery.count.limit",))))
    finally:
        client.close()
    return [e[:3] for e in entries] == [("share.delivery.count.limit", "5", 5)]
