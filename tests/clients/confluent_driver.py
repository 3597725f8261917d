"""confluent-kafka (librdkafka) consumer driver (contract: tests/clients/common.py).

librdkafka does not expose the group generation through the Python binding, so "assigned" events
carry generation null; the member id comes from Consumer.memberid().
"""

from __future__ import annotations

import sys
import threading

from confluent_kafka import Consumer, KafkaException

from tests.clients.common import emit, parse_args, sorted_ints, watch_stdin


def main() -> int:
    args = parse_args()
    closing = threading.Event()
    conf: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "group.protocol": "classic",
        "partition.assignment.strategy": ",".join(args.assignors),
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "max.poll.interval.ms": args.rebalance_timeout_ms,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "retry.backoff.ms": 100,
        "reconnect.backoff.ms": 100,
        "log_level": 3,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.metadata_max_age_ms >= 0:  # librdkafka's metadata.max.age.ms default is 3x this
        conf["topic.metadata.refresh.interval.ms"] = args.metadata_max_age_ms
    consumer = Consumer(conf)
    owned: set[int] = set()
    cooperative = "cooperative-sticky" in args.assignors

    def member_id() -> str | None:
        try:
            return consumer.memberid()
        except (KafkaException, RuntimeError):
            return None

    def on_assign(c: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        parts = [tp.partition for tp in partitions]
        # The binding assigns (or incrementally assigns) by itself after the callback returns.
        if not cooperative:
            owned.clear()
        owned.update(parts)
        emit("assigned", partitions=sorted_ints(owned), added=sorted_ints(parts), generation=None,
             member_id=member_id())

    def on_revoke(c: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        parts = [tp.partition for tp in partitions]
        owned.difference_update(parts)
        emit("revoked", partitions=sorted_ints(parts))

    def on_lost(c: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        parts = [tp.partition for tp in partitions]
        owned.difference_update(parts)
        emit("revoked", partitions=sorted_ints(parts), lost=True)

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("started")
    watch_stdin(closing.set)
    last: str | None = None
    while not closing.is_set():
        consumer.poll(0.1)
        now = member_id()
        if now != last:
            last = now
            emit("generation", generation=None, member_id=now)
    consumer.close()
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
