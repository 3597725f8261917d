"""aiokafka consumer driver (contract: tests/clients/common.py)."""

from __future__ import annotations

import asyncio
import queue
import sys
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.helpers import create_ssl_context

from tests.clients.common import (
    emit,
    parse_args,
    pending,
    python_client_security,
    sorted_ints,
    watch_stdin,
)

ASSIGNORS = {
    "range": RangePartitionAssignor,
    "roundrobin": RoundRobinPartitionAssignor,
    "sticky": StickyPartitionAssignor,
}


def _generation(consumer: AIOKafkaConsumer) -> tuple[int | None, str | None]:
    # aiokafka keeps the group's generation on its coordinator object; there is no public accessor.
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:
        return None, None
    return coordinator.generation, coordinator.member_id


def security_kwargs(security: dict[str, Any]) -> dict[str, Any]:
    """--security as AIOKafkaConsumer's arguments (TLS through an ssl.SSLContext)."""
    if not security:
        return {}
    out = python_client_security(security)
    if out["security_protocol"] in ("SSL", "SASL_SSL"):
        out["ssl_context"] = create_ssl_context(cafile=security.get("cafile"),
                                                certfile=security.get("certfile"),
                                                keyfile=security.get("keyfile"))
    return out


class Listener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.consumer: AIOKafkaConsumer | None = None
        self.owned: set[int] = set()

    async def on_partitions_revoked(self, revoked):  # type: ignore[override]
        parts = [tp.partition for tp in revoked]
        self.owned.difference_update(parts)
        emit("revoked", partitions=sorted_ints(parts))

    async def on_partitions_assigned(self, assigned):  # type: ignore[override]
        parts = [tp.partition for tp in assigned]
        self.owned.update(parts)
        assert self.consumer is not None
        generation, member_id = _generation(self.consumer)
        emit("assigned", partitions=sorted_ints(self.owned), added=sorted_ints(parts),
             generation=generation, member_id=member_id)


async def main() -> int:
    args = parse_args()
    loop = asyncio.get_running_loop()
    closing = asyncio.Event()
    max_age = args.metadata_max_age_ms  # < 0: the library's default
    extra = {} if max_age < 0 else {"metadata_max_age_ms": max_age}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        group_instance_id=args.instance_id,
        partition_assignment_strategy=tuple(ASSIGNORS[a] for a in args.assignors),
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.rebalance_timeout_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        retry_backoff_ms=100,
        **extra,
        **security_kwargs(args.security),
    )
    listener = Listener()
    listener.consumer = consumer
    consumer.subscribe(topics=[args.topic], listener=listener)
    await consumer.start()
    emit("started")
    commits: queue.SimpleQueue[int] = queue.SimpleQueue()
    watch_stdin(lambda: loop.call_soon_threadsafe(closing.set), commits)
    last: tuple[int | None, str | None] = (None, None)
    while not closing.is_set():
        await consumer.getmany(timeout_ms=100)
        for offset in pending(commits):
            parts = sorted_ints(listener.owned)
            try:
                await consumer.commit({TopicPartition(args.topic, p): offset for p in parts})
                emit("committed", offset=offset, partitions=parts)
            except KafkaError as exc:
                emit("commit_failed", offset=offset, error=repr(exc))
        now = _generation(consumer)
        if now != last:
            last = now
            emit("generation", generation=now[0], member_id=now[1])
    await consumer.stop()
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
