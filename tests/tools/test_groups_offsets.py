"""`groupcoord groups` on real data: the sidecar in front of tansu or Apache Kafka 4.4 (groupcoord
coordinates, the upstream holds the records and answers the ListOffsets that pass through), and
tansu on its own as any Kafka broker. A real producer and a real aiokafka consumer; LOG-END-OFFSET
and LAG, every reset-offsets scenario as a dry run and executed, delete-offsets, delete, --json.

Records are produced one per batch: tansu answers ListOffsets(latest) with the last batch's base
offset + 1, which is the log end only when that batch holds one record. Kafka's answer is exact
whatever the batches: `test_exact_lag_on_kafka` produces many records per batch.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.tools.groups import DRY_RUN_WARNING
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support.sidecar_util import Stack, Upstream, create_topic, stack, upstream

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

TOPIC, GROUP = "orders", "billing"


async def acli(*args: str) -> Any:
    return await asyncio.to_thread(ops_util.groupcoord_cli, "groups", *args)


async def send_each(bootstrap: str, counts: dict[int, int], topic: str = TOPIC) -> None:
    """`counts[p]` records to partition p, each acknowledged before the next (one per batch)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10000)
    await producer.start()
    try:
        for partition, n in counts.items():
            for i in range(n):
                await (await producer.send(topic, f"{partition}-{i}".encode(), partition=partition))
    finally:
        await producer.stop()


async def describe(boot: str, group: str = GROUP) -> dict[str, Any]:
    out = await acli("describe", group, "--bootstrap-server", boot, "--json")
    if out.returncode != 0:  # not an AssertionError: wait_until takes it as "not yet"
        raise RuntimeError(out.stderr)
    [document] = json.loads(out.stdout)
    return dict(document)


def column(document: dict[str, Any], key: str) -> dict[int, Any]:
    return {r["partition"]: r[key] for r in document["offsets"]}


async def plan(boot: str, *args: str) -> tuple[dict[int, int], str]:
    """A reset's plan (--json): partition -> NEW-OFFSET, and what it said on stderr."""
    out = await acli("reset-offsets", GROUP, *args, "--bootstrap-server", boot, "--json")
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["executed"] == ("--execute" in args)
    return {r["partition"]: r["new_offset"] for r in document["offsets"]}, out.stderr


async def test_lag_resets_and_deletes_through_the_sidecar(stack: Stack, upstream: Upstream) -> None:
    sidecar = stack.sidecar(upstream.bootstrap)
    boot = sidecar.bootstrap
    topic = upstream.name(TOPIC)  # the group is the sidecar's own: its name may stay
    await create_topic(boot, topic, 3)
    await send_each(boot, {0: 5, 1: 7, 2: 9}, topic)

    reader = await stack.consumer("aiokafka", "reader", boot, GROUP, topic)

    async def caught_up() -> dict[str, Any] | None:
        document = await describe(boot)
        done = column(document, "current_offset") == {0: 5, 1: 7, 2: 9}
        return document if done and all(column(document, "consumer_id").values()) else None

    live = await rc.wait_until(caught_up, 60, "the reader to commit every record",
                               explain=stack.explain)  # fmt: skip
    assert live["state"] == "Stable"
    assert column(live, "log_end_offset") == {0: 5, 1: 7, 2: 9}
    assert column(live, "lag") == {0: 0, 1: 0, 2: 0}
    assert set(column(live, "client_id").values()) == {"reader"}
    verbose = await acli("describe", GROUP, "--members", "--verbose", "--bootstrap-server", boot)
    [member] = [line.split() for line in verbose.stdout.splitlines()[1:]]
    assert member[0] == GROUP and member[3:] == ["reader", "3", "-", f"{topic}:0,1,2", "-", "-"]
    # A reset of a group with members is refused; its dry run is shown, with the refusal noted.
    refused = await acli("reset-offsets", GROUP, "--all-topics", "--to-earliest", "--execute",
                         "--bootstrap-server", boot)  # fmt: skip
    assert refused.returncode == 1 and refused.stdout == ""
    assert "is inactive, but the current state is Stable." in refused.stderr
    assert (await plan(boot, "--all-topics", "--to-earliest"))[0] == {0: 0, 1: 0, 2: 0}

    await reader.close()
    middle_ms = int(time.time() * 1000)
    await send_each(boot, {0: 2, 2: 4}, topic)

    # The log end comes from the upstream (ListOffsets through the sidecar); the lag is the
    # difference.
    idle = await describe(boot)
    assert idle["state"] == "Empty"
    assert column(idle, "current_offset") == {0: 5, 1: 7, 2: 9}
    assert column(idle, "log_end_offset") == {0: 7, 1: 7, 2: 13}
    assert column(idle, "lag") == {0: 2, 1: 0, 2: 4}
    assert set(column(idle, "consumer_id").values()) == {None}
    text = await acli("describe", GROUP, "--bootstrap-server", boot)
    assert [GROUP, topic, "0", "5", "7", "2", "-", "-", "-"] in [
        line.split() for line in text.stdout.splitlines()
    ]

    # Dry runs (the default): the plan of each scenario, nothing committed.
    assert (await plan(boot, "--topic", topic, "--to-earliest"))[0] == {0: 0, 1: 0, 2: 0}
    assert (await plan(boot, "--topic", f"{topic}:2", "--to-latest"))[0] == {2: 13}
    new, said = await plan(boot, "--all-topics", "--to-offset", "8")
    assert new == {0: 7, 1: 7, 2: 8}  # clamped to the log end, as Kafka does
    assert f"New offset (8) is higher than latest offset for topic partition {topic}-0." in said
    new, said = await plan(boot, "--all-topics", "--shift-by", "-6")
    assert new == {0: 0, 1: 1, 2: 3}  # 5 - 6 is clamped to the log start
    assert f"New offset (-1) is lower than earliest offset for topic partition {topic}-0." in said
    middle = datetime.fromtimestamp(middle_ms / 1000, UTC).isoformat(timespec="milliseconds")
    new, said = await plan(boot, "--all-topics", "--to-datetime", middle)
    assert new == {0: 5, 1: 7, 2: 9}  # the first record at or after; none on 1: its log end
    assert f"Partition 1 from topic {topic} is empty. Falling back to latest known offset." in said
    assert (await plan(boot, "--all-topics", "--to-datetime", "2000-01-01T00:00:00Z"))[0] == {
        0: 0, 1: 0, 2: 0
    }  # fmt: skip
    assert (await plan(boot, "--all-topics", "--by-duration", "P1D"))[0] == {0: 0, 1: 0, 2: 0}
    text = await acli("reset-offsets", GROUP, "--topic", f"{topic}:0", "--to-earliest",
                      "--dry-run", "--bootstrap-server", boot)  # fmt: skip
    assert [line.split() for line in text.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [GROUP, topic, "0", "5", "0"],
    ]
    assert column(await describe(boot), "current_offset") == {0: 5, 1: 7, 2: 9}
    missing = await acli("reset-offsets", GROUP, "--topic", f"{topic}:7", "--to-earliest",
                         "--bootstrap-server", boot)  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [  # neither --dry-run nor --execute: Kafka's warning
        DRY_RUN_WARNING, f'groupcoord: The partitions "{topic}-7" do not exist'
    ]

    # --execute commits the plan (aiokafka's commit, generation -1).
    assert (await plan(boot, "--topic", f"{topic}:2", "--shift-by", "-2", "--execute"))[0] == {
        2: 7
    }  # fmt: skip
    after = await describe(boot)
    assert column(after, "current_offset") == {0: 5, 1: 7, 2: 7}
    assert column(after, "lag") == {0: 2, 1: 0, 2: 6}
    await plan(boot, "--all-topics", "--to-earliest", "--execute")
    after = await describe(boot)
    assert column(after, "current_offset") == {0: 0, 1: 0, 2: 0}
    assert column(after, "lag") == {0: 7, 1: 7, 2: 13}

    # delete-offsets: one partition, then the whole topic.
    out = await acli("delete-offsets", GROUP, "--topic", f"{topic}:0", "--bootstrap-server", boot)
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.splitlines()[0] == f"Request succeeded for deleting offsets from group {GROUP}."
    )
    assert [line.split() for line in out.stdout.splitlines()[1:]] == [
        ["TOPIC", "PARTITION", "STATUS"], [topic, "0", "Successful"]
    ]  # fmt: skip
    assert sorted(column(await describe(boot), "current_offset")) == [1, 2]
    out = await acli(
        "delete-offsets", GROUP, "--topic", topic, "--bootstrap-server", boot, "--json"
    )
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["error"] is None
    assert document["partitions"] == [  # every partition of the topic, as Kafka's --topic T
        {"topic": topic, "partition": p, "error": None} for p in (0, 1, 2)
    ]
    assert (await describe(boot))["offsets"] == []

    out = await acli("delete", GROUP, "--bootstrap-server", boot)
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.strip() == f"Deletion of requested consumer groups ('{GROUP}') was successful."
    )
    listed = await acli("list", "--bootstrap-server", boot, "--json")
    assert json.loads(listed.stdout) == []


async def test_straight_against_tansu(stack: Stack) -> None:
    """No groupcoord: tansu is the coordinator and holds the data."""
    tansu = stack.tansu()
    boot = tansu.bootstrap
    await create_topic(boot, TOPIC, 2)
    await send_each(boot, {0: 3, 1: 4})

    reader = await stack.consumer("aiokafka", "reader", boot, "live", TOPIC)

    async def committed() -> dict[str, Any] | None:
        document = await describe(boot, "live")
        return document if column(document, "current_offset") == {0: 3, 1: 4} else None

    live = await rc.wait_until(committed, 60, "the reader to commit", explain=stack.explain)
    assert column(live, "log_end_offset") == {0: 3, 1: 4}
    state = await acli("describe", "live", "--state", "--bootstrap-server", boot)
    assert state.stdout.splitlines()[1].split()[:3] == [
        "live",
        boot,
        f"({live['coordinator']['node_id']})",
    ]
    refused = await acli("reset-offsets", "live", "--all-topics", "--to-earliest", "--execute",
                         "--bootstrap-server", boot)  # fmt: skip
    assert refused.returncode == 1
    assert "Assignments can only be reset if the group 'live' is inactive" in refused.stderr

    # A group that never had members: reset --execute creates its offsets, as Kafka allows.
    out = await acli("reset-offsets", "fresh", "--topic", TOPIC, "--to-latest", "--execute",
                     "--bootstrap-server", boot, "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [(r["partition"], r["current_offset"], r["new_offset"])
            for r in json.loads(out.stdout)["offsets"]] == [(0, None, 3), (1, None, 4)]  # fmt: skip
    await send_each(boot, {1: 2})
    fresh = await describe(boot, "fresh")
    assert column(fresh, "lag") == {0: 0, 1: 2}
    listed = await acli("list", "--bootstrap-server", boot, "--json")
    assert {"fresh", "live"} <= {g["group_id"] for g in json.loads(listed.stdout)}
    await reader.close()


async def send_batches(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """`counts[p]` records to partition p in ONE record batch each: the log end is then the
    batch's last offset + 1, which tansu 0.6 does not report (it answers the base + 1)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10000)
    await producer.start()
    try:
        acks = []
        for partition, n in counts.items():
            batch = producer.create_batch()
            for i in range(n):
                assert batch.append(key=None, value=f"{partition}-{i}".encode(), timestamp=None)
            acks.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


def lag_gauges(text: str, group: str) -> tuple[float | None, float | None]:
    from tests.serve.test_metrics_upstream import value

    return (value(text, "groupcoord_group_lag_sum", group=group),
            value(text, "groupcoord_group_lag_max", group=group))  # fmt: skip


async def test_exact_lag_on_kafka(stack: Stack, kafka: Any) -> None:
    """Apache Kafka's log end is exact: through the sidecar, `groups describe` and the lag gauges
    show LOG-END-OFFSET = the records produced (in multi-record batches) and LAG = produced -
    committed, the same numbers Kafka's own coordinator gives for the same commits."""
    from tests.support.kafka import unique
    from tests.support.sidecar_util import RawClient, commit, kio

    sidecar = stack.sidecar(kafka.bootstrap)
    topic, group = unique("lagged"), unique("lag-group")
    await create_topic(kafka.bootstrap, topic, 3)
    produced, committed = {0: 50, 1: 120, 2: 0}, {0: 20, 1: 120, 2: 0}
    await send_batches(kafka.bootstrap, topic, {p: n for p, n in produced.items() if n})
    await send_batches(kafka.bootstrap, topic, {0: 7})  # a second batch on partition 0
    produced[0] += 7
    lag = {p: produced[p] - committed[p] for p in produced}
    await rc.wait_until(lambda: f"upstream topic {topic} has" in sidecar.log(), 15,
                        "the sidecar to see the topic")  # fmt: skip
    assert await commit(sidecar.port, group, topic, committed) == 0
    via_sidecar = await describe(sidecar.bootstrap, group)
    assert via_sidecar["state"] == "Empty"
    assert column(via_sidecar, "current_offset") == committed
    assert column(via_sidecar, "log_end_offset") == produced
    assert column(via_sidecar, "lag") == lag
    await rc.wait_until(lambda: lag_gauges(sidecar.metrics(), group) == (37, 37), 15,
                        "the lag gauges to read 37", explain=stack.explain)  # fmt: skip

    # The same commits to Kafka's own coordinator, described straight against Kafka.
    port = int(kafka.bootstrap.split(",")[0].rsplit(":", 1)[1])

    async def committed_on_kafka() -> bool:
        # FindCoordinator first: it creates __consumer_offsets on a fresh cluster; commits
        # answer NOT_COORDINATOR until its partition is loaded.
        client = await RawClient.connect(port)
        try:
            await client.call(kio(10, 3, "FindCoordinatorRequest", key=group, key_type=0))
        finally:
            client.close()
        return await commit(port, group, topic, committed) == 0

    await rc.wait_until(committed_on_kafka, 30, "Kafka to take the commit")
    on_kafka = await describe(kafka.bootstrap, group)
    for key in ("current_offset", "log_end_offset", "lag"):
        assert column(on_kafka, key) == column(via_sidecar, key), key
