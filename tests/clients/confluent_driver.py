"""confluent-kafka (librdkafka) consumer driver (contract: tests/clients/common.py).

librdkafka does not expose the group generation through the Python binding, so "assigned" events
carry generation null; the member id comes from Consumer.memberid().
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.clients.common import emit, parse_args, pending, sorted_ints, watch_stdin

# --security keys -> librdkafka settings (the TLS ones hold PEM files).
SECURITY = {
    "protocol": "security.protocol",
    "mechanism": "sasl.mechanism",
    "username": "sasl.username",
    "password": "sasl.password",
    "cafile": "ssl.ca.location",
    "certfile": "ssl.certificate.location",
    "keyfile": "ssl.key.location",
}


def security_conf(security: dict[str, Any]) -> dict[str, Any]:
    return {SECURITY[k]: v for k, v in security.items()}


def main() -> int:
    args = parse_args()
    closing = threading.Event()
    commits: queue.SimpleQueue[int] = queue.SimpleQueue()
    watch_stdin(closing.set, commits)
    if args.members == 1:
        run(args, args.client_id, closing, commits, emit)
    else:  # a swarm (common.py): a thread per consumer, each line says whose it is
        names = [f"{args.client_id}-{i}" for i in range(args.members)]
        threads = [
            threading.Thread(target=run, name=name, daemon=True,
                             args=(args, name, closing, queue.SimpleQueue(),
                                   functools.partial(emit, member=name)))
            for name in names
        ]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return 0


def run(args: Any, client_id: str, closing: threading.Event, commits: queue.SimpleQueue[int],
        emit: Callable[..., None]) -> None:  # fmt: skip
    """One consumer until `closing`: subscribe, poll, report (the contract's events)."""
    conf: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": client_id,
        "group.protocol": args.group_protocol,
        "max.poll.interval.ms": args.rebalance_timeout_ms,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "retry.backoff.ms": 100,
        "reconnect.backoff.ms": 100,
        "log_level": 3,
    }
    consumer_protocol = args.group_protocol == "consumer"
    if consumer_protocol:  # KIP-848: the server owns these; librdkafka refuses them
        if args.assignors and args.assignors[0] in ("uniform", "range"):
            conf["group.remote.assignor"] = args.assignors[0]
    else:
        conf["partition.assignment.strategy"] = ",".join(args.assignors)
        conf["session.timeout.ms"] = args.session_timeout_ms
        conf["heartbeat.interval.ms"] = args.heartbeat_interval_ms
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    conf.update(security_conf(args.security))
    if args.metadata_max_age_ms >= 0:  # librdkafka's metadata.max.age.ms default is 3x this
        conf["topic.metadata.refresh.interval.ms"] = args.metadata_max_age_ms
    consumer = Consumer(conf)
    owned: set[int] = set()
    # KIP-848 assignments are incremental, as cooperative-sticky's.
    cooperative = "cooperative-sticky" in args.assignors or consumer_protocol

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
    last: str | None = None
    while not closing.is_set():
        consumer.poll(0.1)
        for offset in pending(commits):
            parts = sorted_ints(owned)
            try:
                consumer.commit(offsets=[TopicPartition(args.topic, p, offset) for p in parts],
                                asynchronous=False)
                emit("committed", offset=offset, partitions=parts)
            except KafkaException as exc:
                emit("commit_failed", offset=offset, error=str(exc))
        now = member_id()
        if now != last:
            last = now
            emit("generation", generation=None, member_id=now)
    consumer.close()
    emit("closed")


if __name__ == "__main__":
    sys.exit(main())
