"""kafka-python consumer driver (contract: tests/clients/common.py)."""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

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


def _generation(consumer: KafkaConsumer) -> tuple[int | None, str | None]:
    # kafka-python keeps the joined generation on its coordinator; there is no public accessor.
    generation = consumer._coordinator._generation
    return generation.generation_id, generation.member_id


def security_kwargs(security: dict[str, Any]) -> dict[str, Any]:
    """--security as KafkaConsumer's arguments."""
    if not security:
        return {}
    out = python_client_security(security)
    for key in ("cafile", "certfile", "keyfile"):
        if key in security:
            out[f"ssl_{key}"] = security[key]
    return out


class Listener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.consumer: KafkaConsumer | None = None
        self.owned: set[int] = set()

    def on_partitions_revoked(self, revoked):  # type: ignore[override]
        parts = [tp.partition for tp in revoked]
        self.owned.difference_update(parts)
        emit("revoked", partitions=sorted_ints(parts))

    def on_partitions_assigned(self, assigned):  # type: ignore[override]
        parts = [tp.partition for tp in assigned]
        self.owned.update(parts)
        assert self.consumer is not None
        generation, member_id = _generation(self.consumer)
        emit("assigned", partitions=sorted_ints(self.owned), added=sorted_ints(parts),
             generation=generation, member_id=member_id)


def main() -> int:
    args = parse_args()
    closing = threading.Event()
    max_age = args.metadata_max_age_ms  # < 0: the library's default
    extra = {} if max_age < 0 else {"metadata_max_age_ms": max_age}
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        group_instance_id=args.instance_id,
        partition_assignment_strategy=tuple(ASSIGNORS[a] for a in args.assignors),
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.rebalance_timeout_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        retry_backoff_ms=100,
        reconnect_backoff_ms=100,
        **extra,
        **security_kwargs(args.security),
    )
    listener = Listener()
    listener.consumer = consumer
    consumer.subscribe(topics=[args.topic], listener=listener)
    emit("started")
    commits: queue.SimpleQueue[int] = queue.SimpleQueue()
    watch_stdin(closing.set, commits)
    last: tuple[int | None, str | None] = (None, None)
    while not closing.is_set():
        for offset in pending(commits):
            parts = sorted_ints(listener.owned)
            try:
                consumer.commit({TopicPartition(args.topic, p): OffsetAndMetadata(offset, "", -1)
                                 for p in parts})
                emit("committed", offset=offset, partitions=parts)
            except KafkaError as exc:
                emit("commit_failed", offset=offset, error=repr(exc))
        # Long polls on purpose. kafka-python 3.0 loses a join whose SyncGroup answer arrives
        # after poll() timed out when need_rejoin() has meanwhile turned False (the leader's
        # assignment/metadata snapshots, compared there, are refreshed by its own assignment):
        # the member never takes the assignment, its heartbeats stay disabled, and the coordinator
        # rightly expires it. Fewer poll deadlines make that window rare; closing waits <= 1 s.
        consumer.poll(timeout_ms=1000)
        now = _generation(consumer)
        if now != last:
            last = now
            emit("generation", generation=now[0], member_id=now[1])
    consumer.close(autocommit=False)
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
