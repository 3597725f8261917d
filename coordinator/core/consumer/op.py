"""One call's records and events (Kafka's CoordinatorResult as it is built): every record is
replayed into the live groups as it is emitted, so the live state is always the replay of the
records returned so far.

Pure: no I/O.
"""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerEvent, ConsumerResult, HeartbeatResponse
from coordinator.core.consumer.model import ConsumerGroup
from coordinator.core.consumer.records import ConsumerGroupRecord
from coordinator.core.consumer.replay import replay

__all__ = ["Op"]


class Op:
    """The records and events of one call; each record is replayed as it is emitted."""

    __slots__ = ("events", "groups", "now_ms", "records")

    def __init__(self, groups: dict[str, ConsumerGroup], now_ms: int = 0) -> None:
        self.groups = groups
        self.now_ms = now_ms
        self.records: list[ConsumerGroupRecord] = []
        self.events: list[ConsumerEvent] = []

    def emit(self, record: ConsumerGroupRecord) -> None:
        self.records.append(record)
        replay(self.groups, record)

    def result(self, response: HeartbeatResponse | None) -> ConsumerResult:
        return ConsumerResult(response, tuple(self.records), tuple(self.events))
