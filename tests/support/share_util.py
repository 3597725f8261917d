"""Share groups (KIP-932) in the real-client tests: the share drivers, what they said, and the
admin steps a share test needs (group configs, ShareGroupDescribe, a fast producer).

The drivers (tests/clients/share_driver.py for confluent-kafka, tests/java/ShareDriver.java for
the Java KafkaShareConsumer) share one contract, written in share_driver.py's docstring: explicit
acknowledgement, a per-record rule table, "hold" to stall, and a "records" event per poll carrying
(partition, offset, delivery count, action).

Invariants: every wait is a condition with a deadline; every driver is a `realclients.Member`
(killed by the fixture that started it); a group's configs are set before its first member joins,
because Kafka reads share.auto.offset.reset when the share-partition is initialised.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import realclients as rc

SHARE_KINDS = ("confluent", "java")
SHARE_DRIVER = "tests.clients.share_driver"
# The group configs every share test sets (Kafka's GroupConfig names; broker-side bounds in
# tests/support/kafka.py): earliest, so records produced before a member joined are delivered.
BASE_CONFIGS = {"share.auto.offset.reset": "earliest"}


def share_command(kind: str, peers: Path, args: list[str]) -> list[str]:
    if kind == "java":
        return rc.driver_command("java", peers, args, java_main="ShareDriver")
    assert kind == "confluent", kind
    return [sys.executable, "-m", SHARE_DRIVER, *args]


async def start_share_member(tmp: Path, peers: Path, kind: str, name: str, *, bootstrap: str,
                             group: str, topic: str, max_poll_records: int = 500,
                             commit: str = "sync", work_ms: int = 0) -> rc.Member:
    args = ["--bootstrap", bootstrap, "--group", group, "--topic", topic, "--client-id", name,
            "--max-poll-records", str(max_poll_records), "--commit", commit,
            "--work-ms", str(work_ms)]
    return await rc.spawn_member(tmp, peers, kind, name, share_command(kind, peers, args))


async def tell(m: rc.Member, *lines: str) -> None:
    """Write script lines to a driver's stdin (rule P:O A1,A2 / hold / close) and wait until the
    driver says each one other than close is in force ("told"): the driver reads stdin on a
    thread of its own, and records produced right after a "hold" could otherwise be polled and
    acknowledged before the thread has read it."""
    assert m.proc.stdin is not None
    told = sum(e["event"] == "told" for e in m.events)
    want = told + sum(line != "close" for line in lines)
    m.proc.stdin.write("".join(f"{line}\n" for line in lines).encode())
    await m.proc.stdin.drain()
    await rc.wait_until(lambda: sum(e["event"] == "told" for e in m.events) >= want, 30,
                        f"{m.name} to take {lines}", explain=lambda: explain([m]))


@dataclass(frozen=True, slots=True)
class Delivery:
    member: str
    partition: int
    offset: int
    delivery_count: int
    action: str  # accept | release | reject | hold


def deliveries(m: rc.Member) -> list[Delivery]:
    return [Delivery(m.name, p, o, n, a)
            for e in m.events if e["event"] == "records" for p, o, n, a in e["records"]]


def all_deliveries(ms: list[rc.Member]) -> list[Delivery]:
    return [d for m in ms for d in deliveries(m)]


def accepted(ds: list[Delivery]) -> Counter[tuple[int, int]]:
    """(partition, offset) -> how many times it was acknowledged with ACCEPT."""
    return Counter((d.partition, d.offset) for d in ds if d.action == "accept")


def errors(m: rc.Member) -> list[dict[str, Any]]:
    """The driver's error events and commit results with errors."""
    return [e for e in m.events
            if e["event"] == "error" or (e["event"] == "committed" and e["errors"])]


def explain(ms: list[rc.Member]) -> str:
    lines = []
    for m in ms:
        ds = deliveries(m)
        lines.append(f"{m.name} ({m.kind}): alive={m.running()} deliveries={len(ds)} "
                     f"last={ds[-3:]} errors={errors(m)[-3:]}")
        lines.append(m.log_tail(10))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- admin


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs on the GROUP resource (KIP-848/932 group configs), via confluent's
    admin client: Kafka checks each value against its broker-side bounds (INVALID_CONFIG)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(30)


def produce_numbered(bootstrap: str, topic: str, count: int, partition: int = 0,
                     batch_records: int | None = None) -> None:
    """`count` records key = value = "k-<i>" into one partition (offsets 0..count-1 on a fresh
    topic), acks=all; confluent's producer, so 10,000 take well under a second. It writes record
    batches of up to 10,000 records unless `batch_records` caps them (batch.num.messages)."""
    from confluent_kafka import Producer

    conf: dict[str, str | int] = {"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 5, "log_level": 3}
    if batch_records is not None:
        conf["batch.num.messages"] = batch_records
    producer = Producer(conf)
    for i in range(count):
        key = f"k-{i}".encode()
        producer.produce(topic, key=key, value=key, partition=partition)
        if i % 1000 == 999:
            producer.poll(0)
    left = producer.flush(30)
    assert left == 0, f"{left} records not acknowledged by {bootstrap}"


@dataclass(frozen=True, slots=True)
class ShareGroupView:
    error_code: int
    state: str
    members: dict[str, frozenset[tuple[str, int]]]  # member id -> assigned (topic, partition)


async def describe_share_group(port: int, group: str) -> ShareGroupView:
    """ShareGroupDescribe v1 (API 77) straight to `port` (a one-node cluster's coordinator, or
    the sidecar, which coordinates every group itself)."""
    from tests.support.sidecar_util import RawClient, kio

    client = await RawClient.connect(port)
    try:
        response = await client.call(kio(77, 1, "ShareGroupDescribeRequest", group_ids=(group,),
                                         include_authorized_operations=False))
    finally:
        client.close()
    g = response.groups[0]
    members = {m.member_id: frozenset((t.topic_name, p) for t in m.assignment.topic_partitions
                                      for p in t.partitions) for m in g.members}
    return ShareGroupView(int(g.error_code), g.group_state, members)


async def wait_members_assigned(port: int, group: str, topic: str, count: int,
                                ms: list[rc.Member], timeout: float = 60) -> ShareGroupView:
    """Until the group has `count` members, each assigned partition 0 of `topic` (a share group
    gives every member every partition)."""
    seen: list[object] = []

    async def ready() -> ShareGroupView | None:
        for m in ms:
            assert m.running(), f"{m.name} exited\n{m.log_tail()}"
        view = await describe_share_group(port, group)
        seen[:] = [view]
        ok = (len(view.members) == count
              and all((topic, 0) in parts for parts in view.members.values()))
        return view if ok else None

    view: ShareGroupView = await rc.wait_until(
        ready, timeout, f"{count} share members assigned {topic}-0", interval=0.3,
        explain=lambda: f"last view: {seen}\n{explain(ms)}")
    return view


def _alive(ms: list[rc.Member]) -> None:
    """A driver that exited, or whose events could not be read, fails the wait at once."""
    for m in ms:
        assert m.running(), f"{m.name} exited\n{m.log_tail()}"
        failed = m.reader is not None and m.reader.done() and m.reader.exception()
        assert not failed, f"reading {m.name}'s events failed: {failed!r}"


async def wait_deliveries(ms: list[rc.Member], done: Any, timeout: float, what: str) -> None:
    """Until done(all deliveries so far) is true; a driver that exits fails at once."""

    def check() -> bool:
        _alive(ms)
        return bool(done(all_deliveries(ms)))

    await rc.wait_until(check, timeout, what, interval=0.1, explain=lambda: explain(ms))


async def wait_accepted(ms: list[rc.Member], want: set[tuple[int, int]], timeout: float,
                        what: str) -> None:
    """Until every (partition, offset) in `want` was accepted by one of the members; the failure
    names the ones still missing."""

    def missing() -> str:
        left = sorted(want - set(accepted(all_deliveries(ms))))
        return f"not accepted yet ({len(left)}): {left[:20]}\n{explain(ms)}"

    def check() -> bool:
        _alive(ms)
        return set(accepted(all_deliveries(ms))) >= want

    await rc.wait_until(check, timeout, what, interval=0.1, explain=missing)


async def close_all(ms: list[rc.Member]) -> None:
    await asyncio.gather(*(m.close() for m in ms if m.running()))
