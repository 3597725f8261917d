"""A consuming driver for the sidecar tests: reads records, commits after every batch, and reports.

    python -m tests.clients.sidecar_consumer --kind aiokafka|kafka-python|confluent
        --bootstrap HOST:PORT --group G --topic T --client-id C [--heartbeat-interval-ms N]

JSON lines on stdout (tests/clients/common.py's contract, plus):
    {"event": "records", "records": [[partition, offset, key], ...]}   every non-empty batch
    {"event": "committed", "offsets": {partition: next offset}}          after each commit
    {"event": "fetched", "highwater": {partition: hw}, "polls": N}   on change / every 20 polls:
        the high watermark of each assigned partition that a Fetch has answered for
    {"event": "error", "where": "poll"|"commit", "error": "..."}         a (retriable) error
"close" or EOF on stdin closes the consumer cleanly. Assignor: range (every kind has it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from typing import Any

from tests.clients.common import emit, sorted_ints, watch_stdin


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--kind", required=True, choices=["aiokafka", "kafka-python", "confluent"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--client-id", default="sidecar-consumer")
    p.add_argument("--session-timeout-ms", type=int, default=10000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    return p.parse_args()


class Reporter:
    def __init__(self) -> None:
        self.polls = 0
        self.last: dict[int, int] | None = None

    def records(self, records: list[list[Any]]) -> None:
        if records:
            emit("records", records=records)

    def fetched(self, highwater: dict[int, int]) -> None:
        self.polls += 1
        if highwater != self.last or self.polls % 20 == 0:
            self.last = dict(highwater)
            emit("fetched", highwater={str(k): v for k, v in highwater.items()}, polls=self.polls)


def _key(key: bytes | None) -> str | None:
    return None if key is None else key.decode()


async def run_aiokafka(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):  # type: ignore[no-untyped-def]
            emit("revoked", partitions=sorted_ints(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned):  # type: ignore[no-untyped-def]
            parts = sorted_ints(tp.partition for tp in consumer.assignment())
            emit("assigned", partitions=parts, added=sorted_ints(tp.partition for tp in assigned))

    loop = asyncio.get_running_loop()
    closing = asyncio.Event()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        retry_backoff_ms=100,
        metadata_max_age_ms=5000,
        request_timeout_ms=10000,
    )
    consumer.subscribe([args.topic], listener=Listener())
    await consumer.start()
    emit("started")
    watch_stdin(lambda: loop.call_soon_threadsafe(closing.set))
    report = Reporter()
    while not closing.is_set():
        try:
            batch = await consumer.getmany(timeout_ms=100, max_records=1000)
        except Exception as exc:
            emit("error", where="poll", error=repr(exc))
            await asyncio.sleep(0.1)
            continue
        records = [[tp.partition, m.offset, _key(m.key)] for tp, ms in batch.items() for m in ms]
        report.records(records)
        if records:
            offsets = {tp: ms[-1].offset + 1 for tp, ms in batch.items() if ms}
            try:
                await consumer.commit(offsets)
                emit("committed", offsets={str(tp.partition): o for tp, o in offsets.items()})
            except Exception as exc:
                emit("error", where="commit", error=repr(exc))
        highwater = {tp.partition: consumer.highwater(tp) for tp in consumer.assignment()}
        report.fetched({p: hw for p, hw in highwater.items() if hw is not None})
    await consumer.stop()
    emit("closed")


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):  # type: ignore[no-untyped-def]
            emit("revoked", partitions=sorted_ints(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):  # type: ignore[no-untyped-def]
            parts = sorted_ints(tp.partition for tp in consumer.assignment())
            emit("assigned", partitions=parts, added=sorted_ints(tp.partition for tp in assigned))

    closing = threading.Event()
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        retry_backoff_ms=100,
        reconnect_backoff_ms=100,
        metadata_max_age_ms=5000,
        request_timeout_ms=10000,
    )
    consumer.subscribe([args.topic], listener=Listener())
    emit("started")
    watch_stdin(closing.set)
    report = Reporter()
    while not closing.is_set():
        try:
            # Long polls: see tests/clients/kafka_python_driver.py for why.
            batch = consumer.poll(timeout_ms=1000, max_records=1000)
        except Exception as exc:
            emit("error", where="poll", error=repr(exc))
            continue
        records = [[tp.partition, m.offset, _key(m.key)] for tp, ms in batch.items() for m in ms]
        report.records(records)
        if records:
            from kafka.structs import OffsetAndMetadata

            offsets = {
                tp: OffsetAndMetadata(ms[-1].offset + 1, "", -1) for tp, ms in batch.items() if ms
            }
            try:
                consumer.commit(offsets)
                done = {str(tp.partition): o.offset for tp, o in offsets.items()}
                emit("committed", offsets=done)
            except Exception as exc:
                emit("error", where="commit", error=repr(exc))
        highwater = {tp.partition: consumer.highwater(tp) for tp in consumer.assignment()}
        report.fetched({p: hw for p, hw in highwater.items() if hw is not None})
    consumer.close(autocommit=False)
    emit("closed")


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    closing = threading.Event()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": args.client_id,
            "group.protocol": "classic",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": args.heartbeat_interval_ms,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 5000,
            "retry.backoff.ms": 100,
            "reconnect.backoff.ms": 100,
            "log_level": 3,
        }
    )

    def on_assign(c: Any, partitions: list[Any]) -> None:
        parts = sorted_ints(tp.partition for tp in partitions)
        emit("assigned", partitions=parts, added=parts)

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        emit("revoked", partitions=sorted_ints(tp.partition for tp in partitions))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    emit("started")
    watch_stdin(closing.set)
    report = Reporter()
    while not closing.is_set():
        messages = consumer.consume(num_messages=1000, timeout=0.1)
        records, offsets = [], {}
        for m in messages:
            if m.error():
                emit("error", where="poll", error=str(m.error()))
                continue
            records.append([m.partition(), m.offset(), _key(m.key())])
            offsets[m.partition()] = m.offset() + 1
        report.records(records)
        if offsets:
            try:
                consumer.commit(
                    offsets=[TopicPartition(args.topic, p, o) for p, o in offsets.items()],
                    asynchronous=False,
                )
                emit("committed", offsets={str(p): o for p, o in offsets.items()})
            except KafkaException as exc:
                emit("error", where="commit", error=str(exc))
        highwater = {}
        for tp in consumer.assignment():
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high >= 0:
                highwater[tp.partition] = high
        report.fetched(highwater)
    consumer.close()
    emit("closed")


def main() -> int:
    args = parse()
    if args.kind == "aiokafka":
        asyncio.run(run_aiokafka(args))
    elif args.kind == "kafka-python":
        run_kafka_python(args)
    else:
        run_confluent(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
