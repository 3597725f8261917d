"""Group formations (issue 41): N times, three consumers of one kind in this one process (a thread
each; aiokafka: tasks on one loop) join a fresh group on `--topic`, and the driver measures how
long until the group has formed: every member stable on one generation, the partitions split
among the three without overlap. One JSON line per formation on stdout, then `{"done": true}`.

    python -m tests.clients.formation_driver --kind kafka-python --bootstrap HOST:PORT \
        --topic hA --partitions 8 --formations 50 --deadline-s 10 [--cold]

Members: range assignor, session.timeout.ms 6000, heartbeat.interval.ms 1000, request timeout
40 s, a 100 ms poll loop, no commits (the issue's settings).

kafka-python 3.0.12 leaves a group leader stuck "rebalancing" for good when its rejoin was asked
for by a metadata change (its first assignment was made before it had the topic's metadata) and
the join phase outlasts one poll() call (README of this test: tests/clients/test_formations.py).
Its members therefore read the topic's metadata before their first poll, the setting that avoids
it; `--cold` leaves that out, to reproduce the client's bug.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

SESSION_MS = 6000
HEARTBEAT_MS = 1000
REQUEST_TIMEOUT_MS = 40_000
POLL_S = 0.1
MEMBERS = 3


def formed(views: list[tuple[bool, frozenset[int]] | None], partitions: int) -> bool:
    """Every member stable with a share (range: 3, 3, 2 of 8), the partitions split among them
    without overlap: all three are in one generation."""
    if any(v is None or not v[0] or len(v[1]) < partitions // MEMBERS for v in views):
        return False
    owned = [v[1] for v in views if v is not None]
    return sum(map(len, owned)) == partitions and len(frozenset().union(*owned)) == partitions


# --------------------------------------------------------------------------- threaded clients


def kafka_python_member(bootstrap: str, group: str, topic: str, name: str, cold: bool,
                        stop: threading.Event, report: Callable[[bool, frozenset[int]], None]
                        ) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.base import MemberState

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, client_id=name,
        partition_assignment_strategy=(RangePartitionAssignor,), session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS, request_timeout_ms=REQUEST_TIMEOUT_MS,
        enable_auto_commit=False)
    try:
        if not cold:
            # The topic's metadata before the first join: the leader then never has to rejoin
            # for a metadata change, the path on which kafka-python 3.0.12 gets stuck.
            deadline = time.monotonic() + 10
            while consumer.partitions_for_topic(topic) is None and time.monotonic() < deadline:
                time.sleep(0.05)
        while not stop.is_set():
            consumer.poll(timeout_ms=int(POLL_S * 1000))
            stable = consumer._coordinator.state is MemberState.STABLE
            report(stable, frozenset(tp.partition for tp in consumer.assignment()))
    finally:
        consumer.close()


def confluent_member(bootstrap: str, group: str, topic: str, name: str, cold: bool,
                     stop: threading.Event, report: Callable[[bool, frozenset[int]], None]
                     ) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
        "partition.assignment.strategy": "range", "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS, "socket.timeout.ms": REQUEST_TIMEOUT_MS,
        "enable.auto.commit": False, "log_level": 3})
    try:
        consumer.subscribe([topic])
        while not stop.is_set():
            consumer.poll(POLL_S)
            report(True, frozenset(tp.partition for tp in consumer.assignment()))
    finally:
        consumer.close()


def run_threads(member: Any, bootstrap: str, group: str, topic: str, partitions: int,
                cold: bool, deadline_s: float) -> tuple[float | None, list[Any]]:
    views: list[tuple[bool, frozenset[int]] | None] = [None] * MEMBERS
    stop = threading.Event()

    def reporter(i: int) -> Callable[[bool, frozenset[int]], None]:
        def report(stable: bool, owned: frozenset[int]) -> None:
            views[i] = (stable, owned)
        return report

    threads = [threading.Thread(target=member, name=f"m{i}", daemon=True,
                                args=(bootstrap, group, topic, f"m{i}", cold, stop, reporter(i)))
               for i in range(MEMBERS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    took = None
    while time.monotonic() - start < deadline_s:
        if formed(list(views), partitions):
            took = time.monotonic() - start
            break
        time.sleep(0.02)
    seen = [None if v is None else [v[0], sorted(v[1])] for v in views]
    stop.set()
    for t in threads:
        t.join(30)
    return took, seen


# ---------------------------------------------------------------------------------- aiokafka


async def run_aiokafka(bootstrap: str, group: str, topic: str, partitions: int,
                       deadline_s: float) -> tuple[float | None, list[Any]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    consumers = [AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"m{i}",
        partition_assignment_strategy=(RangePartitionAssignor,), session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS, request_timeout_ms=REQUEST_TIMEOUT_MS,
        enable_auto_commit=False) for i in range(MEMBERS)]
    stop = asyncio.Event()

    async def poll(consumer: AIOKafkaConsumer) -> None:
        await consumer.start()
        while not stop.is_set():
            await consumer.getmany(timeout_ms=int(POLL_S * 1000))

    def views() -> list[tuple[bool, frozenset[int]] | None]:
        out: list[tuple[bool, frozenset[int]] | None] = []
        for c in consumers:
            coordinator, subscription = c._coordinator, c._subscription.subscription
            # Stable: joined (an assignment), and no rejoin pending.
            stable = (coordinator is not None and subscription is not None
                      and not coordinator.need_rejoin(subscription))
            out.append((stable, frozenset(tp.partition for tp in c.assignment())))
        return out

    tasks = [asyncio.create_task(poll(c)) for c in consumers]
    start = time.monotonic()
    took = None
    while time.monotonic() - start < deadline_s:
        if formed(views(), partitions):
            took = time.monotonic() - start
            break
        await asyncio.sleep(0.02)
    seen = [[v[0], sorted(v[1])] if v else None for v in views()]
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.gather(*(c.stop() for c in consumers), return_exceptions=True)
    return took, seen


# -------------------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", required=True, choices=("kafka-python", "confluent", "aiokafka"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--formations", type=int, default=1)
    parser.add_argument("--deadline-s", type=float, default=10)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    for i in range(args.formations):
        group = f"formation-{i}-{uuid.uuid4().hex[:8]}"
        if args.kind == "aiokafka":
            took, seen = asyncio.run(run_aiokafka(args.bootstrap, group, args.topic,
                                                  args.partitions, args.deadline_s))
        else:
            member = kafka_python_member if args.kind == "kafka-python" else confluent_member
            took, seen = run_threads(member, args.bootstrap, group, args.topic, args.partitions,
                                     args.cold, args.deadline_s)
        print(json.dumps({"formation": i, "group": group, "stable_s": took, "members": seen}),
              flush=True)
    print(json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
