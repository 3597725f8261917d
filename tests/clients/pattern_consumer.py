"""A confluent-kafka (librdkafka) consumer subscribed by pattern, for the topic-lifecycle tests.

    python -m tests.clients.pattern_consumer --bootstrap HOST:PORT --group G --pattern '^t-.*'
        [--assignors cooperative-sticky] [--client-id C] [--heartbeat-interval-ms N]

tests/clients/common.py's contract, with partitions named "topic:partition" (two topics):
    {"event": "assigned", "partitions": [...owned...], "added": [...]}   each assign callback
    {"event": "revoked", "partitions": [...], "lost": bool}              revoke / lost callbacks
Client defaults otherwise, but for one: librdkafka re-evaluates a pattern subscription only on its
periodic full metadata refresh (topic.metadata.refresh.interval.ms, 5 minutes by default); until
then it keeps a deleted topic's partitions, and a cooperative leader even hands them back to their
owners, so nothing a coordinator (Kafka's or ours) answers makes it notice sooner. The driver
refreshes every 2 s (--metadata-refresh-ms) so that a test sees in seconds what users see in
minutes: exactly one rebalance, started by the members.
"""

from __future__ import annotations

import argparse
import sys
import threading

from confluent_kafka import Consumer

from tests.clients.common import emit, watch_stdin


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--pattern", required=True)
    p.add_argument("--assignors", default="cooperative-sticky")
    p.add_argument("--client-id", default="pattern-consumer")
    p.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    p.add_argument("--metadata-refresh-ms", type=int, default=2000)
    args = p.parse_args()
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "group.protocol": "classic",
        "partition.assignment.strategy": args.assignors,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "session.timeout.ms": 10000,
        "topic.metadata.refresh.interval.ms": args.metadata_refresh_ms,
        "enable.auto.commit": False,
        "log_level": 3,
    })
    owned: set[str] = set()
    cooperative = args.assignors == "cooperative-sticky"

    def names(partitions: list) -> list[str]:  # type: ignore[type-arg]
        return sorted(f"{tp.topic}:{tp.partition}" for tp in partitions)

    def on_assign(c: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        if not cooperative:
            owned.clear()
        owned.update(names(partitions))
        emit("assigned", partitions=sorted(owned), added=names(partitions))

    def on_revoke(c: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        owned.difference_update(names(partitions))
        emit("revoked", partitions=names(partitions), lost=False)

    def on_lost(c: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        owned.difference_update(names(partitions))
        emit("revoked", partitions=names(partitions), lost=True)

    consumer.subscribe([args.pattern], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("started")
    closing = threading.Event()
    watch_stdin(closing.set)
    while not closing.is_set():
        message = consumer.poll(0.2)
        if message is not None and message.error() is not None:
            emit("error", error=str(message.error()))
    consumer.close()
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
