"""Sidecar mode with real clients and real data: a tansu broker or Apache Kafka 4.4 upstream,
groupcoord in front of it, aiokafka, kafka-python and confluent-kafka consumers in one group through
it. The outage test is tansu's alone: it needs the upstream's address to go dark, and a relay in
front of the shared Kafka would not do (the sidecar reaches the brokers that Metadata names)."""

from __future__ import annotations

import asyncio
import re

import pytest

from coordinator.core.events import TOPIC_CAUSES
from tests.support import realclients as rc
from tests.support.sidecar_util import (
    Stack,
    Upstream,
    create_partitions,
    create_topic,
    delete_topic,
    fetched,
    offset_fetch,
    polls,
    produce,
    records,
    stack,
    upstream,
    upstream_groups,
)

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

KINDS = ("aiokafka", "kafka-python", "confluent")


async def committed(port: int, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, asked of groupcoord (OffsetFetch on any of its listeners)."""
    response = await offset_fetch(port, group, topic, partitions)
    assert response.error_code == 0, response
    return {p.partition_index: p.committed_offset for p in response.topics[0].partitions}


def group_view(stack: Stack, group: str) -> dict | None:
    return next((g for g in stack.sidecars[0].groups() if g["group_id"] == group), None)


def lag_sum(stack: Stack, group: str) -> float | None:
    match = re.search(rf'^groupcoord_group_lag_sum{{group="{group}"}} (\S+)$',
                      stack.sidecars[0].metrics(), re.M)
    return None if match is None else float(match.group(1))


async def stable(stack: Stack, group: str, members: list[rc.Member], partitions: int) -> None:
    """Until groupcoord has every member in a Stable group and the members split the topic."""
    def ready() -> bool:
        view = group_view(stack, group)
        return (view is not None and view["state"] == "Stable"
                and len(view["members"]) == len(members) and rc.partition_of(members, partitions))

    await rc.wait_until(ready, 60, f"{len(members)} members in a Stable group", interval=0.2,
                        explain=stack.explain)


def keys_seen(members: list[rc.Member]) -> list[str]:
    return [k for m in members for _, _, k in records(m)]


async def consume_all(stack: Stack, members: list[rc.Member], expected: set[str], port: int,
                      group: str, topic: str, partitions: int, timeout: float = 90,
                      total: int | None = None) -> None:
    """Until the members together saw every expected key and committed past all of them (the
    committed offsets add up to `total`, the messages in the topic, default len(expected))."""
    def done() -> bool:
        for m in members:
            assert m.running(), f"{m.name} exited\n{stack.explain()}"
        return set(keys_seen(members)) >= expected

    await rc.wait_until(done, timeout, f"{len(expected)} keys to be consumed",
                        interval=0.2, explain=stack.explain)

    async def all_committed() -> bool:
        offsets = await committed(port, group, topic, partitions)
        return sum(offsets.values()) == (total or len(expected))

    await rc.wait_until(all_committed, 30, "every offset to be committed", interval=0.2,
                        explain=stack.explain)


async def test_a_mixed_group_consumes_10000_messages_once_through_the_sidecar(
    stack: Stack, upstream: Upstream
):
    sidecar = stack.sidecar(upstream.bootstrap)
    topic, group = upstream.name("orders"), "mixed"
    await create_topic(sidecar.bootstrap, topic, 6)
    keys = [f"key-{i}" for i in range(10_000)]
    await produce(sidecar.bootstrap, topic, keys)

    first = [await stack.consumer(kind, f"first-{kind}", sidecar.bootstrap, group, topic)
             for kind in KINDS]
    await consume_all(stack, first, set(keys), sidecar.port, group, topic, 6)

    # The coordinator was groupcoord: its log, status and metrics have the group; the upstream
    # has none.
    await stable(stack, group, first, 6)
    assert f"group_id={group}" in sidecar.log()
    await rc.wait_until(lambda: lag_sum(stack, group) == 0, 10, "the lag gauge to read 0")
    assert group not in upstream_groups(upstream.bootstrap)

    for m in first:
        await m.close()
    seen_before = len(keys_seen(first))

    # Restarting the group: every member starts at the committed offsets, so nothing comes again.
    second = [await stack.consumer(kind, f"second-{kind}", sidecar.bootstrap, group, topic)
              for kind in KINDS]

    def caught_up() -> bool:
        for m in second:
            assert m.running(), f"{m.name} exited\n{stack.explain()}"
        if not rc.partition_of(second, 6):
            return False
        # Every assigned partition has been fetched (its high watermark is known), and each
        # member polled a few more times after that.
        return all(set(fetched(m)) == m.owned and polls(m) >= 5 for m in second)

    await rc.wait_until(caught_up, 90, "the restarted group to fetch every partition",
                        interval=0.2, explain=stack.explain)
    assert keys_seen(second) == [], "consumed twice"
    assert len(keys_seen(first)) == seen_before


async def test_partitions_added_upstream_rebalance_the_group_through_the_sidecar(
    stack: Stack, upstream: Upstream
):
    heartbeat_ms, refresh_ms = 1000, 200
    sidecar = stack.sidecar(upstream.bootstrap, refresh_ms=refresh_ms)
    topic, group = upstream.name("grow"), "growing"
    await create_topic(upstream.bootstrap, topic, 2)
    members = [await stack.consumer(kind, f"grow-{kind}", sidecar.bootstrap, group, topic,
                                    heartbeat_interval_ms=heartbeat_ms)
               for kind in ("aiokafka", "confluent")]
    await rc.wait_until(lambda: rc.partition_of(members, 2), 60, "2 partitions to be split",
                        explain=stack.explain)
    await rc.wait_until(lambda: (group_view(stack, group) or {}).get("state") == "Stable", 30,
                        "a Stable group")
    generation = group_view(stack, group)["generation_id"]

    # Straight to the upstream with an admin client: CreatePartitions on Kafka. tansu 0.6.0 has
    # no CreatePartitions (API 37), so there the topic grows by being deleted and created again.
    if upstream.kind == "kafka":
        await create_partitions(upstream.bootstrap, topic, 4)
    else:
        await delete_topic(upstream.bootstrap, topic)
        await create_topic(upstream.bootstrap, topic, 4)

    def rebalanced() -> bool:  # completed (synced), not only past its join phase
        view = group_view(stack, group)
        return view is not None and any(
            r["generation_id"] > generation for r in view["rebalances"]
        )

    await rc.wait_until(rebalanced, 30, "the group to rebalance", interval=0.05,
                        explain=stack.explain)
    # Not a wall-clock bound but the cause: the sidecar's watch of the upstream metadata is what
    # moved the group (a topic-change cause on the rebalance), not the members' own metadata
    # refresh, which would come as a plain rejoin (protocol_changed, leader_rejoined) minutes on.
    view = group_view(stack, group)
    assert view is not None
    since = [(r["generation_id"], r["cause"]) for r in view["rebalances"]
             if r["generation_id"] > generation]  # fmt: skip
    assert any(cause in TOPIC_CAUSES for _, cause in since), (
        f"rebalances since the change: {since}\n{stack.explain()}")
    await rc.wait_until(lambda: rc.partition_of(members, 4), 60, "4 partitions to be split",
                        explain=stack.explain)


async def test_upstream_outage_then_back_with_its_data(stack: Stack):
    """The broker's address goes dark (a relay in front of tansu stops: tansu 0.6.0 keeps data
    only in memory), then comes back with the data; groupcoord keeps the group and its offsets
    throughout, and consumption resumes from the committed offsets."""
    relay_port = rc.free_port()
    tansu = stack.tansu(advertised=relay_port)
    relay = await stack.relay(tansu.port, port=relay_port)
    sidecar = stack.sidecar(f"127.0.0.1:{relay_port}")
    topic, group = "ledger", "outage"
    await create_topic(sidecar.bootstrap, topic, 3)
    before = [f"a-{i}" for i in range(3000)]
    await produce(sidecar.bootstrap, topic, before)
    first = [await stack.consumer(kind, f"o1-{kind}", sidecar.bootstrap, group, topic)
             for kind in ("aiokafka", "kafka-python")]
    await consume_all(stack, first, set(before), sidecar.port, group, topic, 3)
    await stable(stack, group, first, 3)
    offsets = await committed(sidecar.port, group, topic, 3)
    generation = group_view(stack, group)["generation_id"]

    await relay.stop()
    # A client of the upstream sees what a Kafka client sees of partitions without a leader
    # (coordinator.sidecar.dark): retriable errors on an open connection, so its send is never
    # acknowledged and fails at its own timeout, as against Kafka during a leader election.
    with pytest.raises(Exception) as failure:
        await asyncio.wait_for(
            produce(sidecar.bootstrap, topic, ["lost"], request_timeout_ms=3_000), 60
        )
    assert not isinstance(failure.value, TimeoutError), (
        f"the produce hung for 60 s past its own timeout\n{stack.explain()}")
    # groupcoord still answers for the group: its members and its offsets.
    await asyncio.sleep(1)
    for m in first:
        assert m.running(), stack.explain()
    view = group_view(stack, group)
    assert view is not None and len(view["members"]) == 2, view
    assert (view["state"], view["generation_id"]) == ("Stable", generation), view
    assert await committed(sidecar.port, group, topic, 3) == offsets
    for m in first:
        await m.close()  # leaving works without the upstream too

    await relay.start()  # the same address, the same data
    after = [f"b-{i}" for i in range(1000)]

    async def produced() -> bool:
        await produce(sidecar.bootstrap, topic, after)
        return True

    await rc.wait_until(produced, 30, "producing to work again", interval=0.5)
    await rc.wait_until(lambda: (lag_sum(stack, group) or 0) > 0, 15, "the lag gauge to rise")
    second = [await stack.consumer(kind, f"o2-{kind}", sidecar.bootstrap, group, topic)
              for kind in ("aiokafka", "confluent")]
    await consume_all(stack, second, set(after), sidecar.port, group, topic, 3,
                      total=len(before) + len(after))
    again = set(keys_seen(second)) & set(before)
    assert not again, f"{len(again)} messages consumed again, e.g. {sorted(again)[:5]}"
