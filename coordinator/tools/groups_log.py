"""The calls of `groupcoord groups` that aiokafka (a runtime dependency) makes for us: topic
metadata, ListOffsets (earliest, latest, by time) and the OffsetCommit of `reset-offsets
--execute`.

- `ClusterLog` is an AIOKafkaAdminClient (`describe_topics`: the topics and their partitions,
  asked for all topics, so a broker that creates topics on Metadata creates none) and an
  AIOKafkaConsumer without a group, both bootstrapped from --bootstrap-server: the consumer's
  `beginning_offsets`, `end_offsets` and `offsets_for_times` send ListOffsets to each
  partition's leader. So the offsets come from whichever
  cluster holds the data: standalone groupcoord answers ListOffsets itself (it stores no records:
  every partition is empty, earliest = latest = 0); a sidecar's per-broker listeners pass the
  request through to the upstream broker that leads the partition; a Kafka broker answers it.
- `commit` is an AIOKafkaConsumer with the group's id and a manual assignment (`assign`, never
  `subscribe`): it never joins the group, and commits with generation -1 and an empty member id,
  as Kafka's AdminClient.alterConsumerGroupOffsets does. A coordinator accepts that only while
  the group has no members, which the caller checked first (Kafka's rule for resets).

Partitions are asked about only when Metadata knows them: aiokafka retries an unknown partition
until its request timeout, so a missing one is reported at once instead.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from coordinator.security.client import aiokafka_options
from coordinator.tools.groups_wire import CLIENT_ID, SECURITY, GroupsError

TP = tuple[str, int]


def _options(bootstrap: str, timeout_s: float) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap,
        "client_id": CLIENT_ID,
        "request_timeout_ms": max(1000, int(timeout_s * 1000)),
        "retry_backoff_ms": 100,
        **aiokafka_options(SECURITY.get()),
    }


def _tps(partitions: list[TP]) -> list[Any]:
    return [TopicPartition(t, p) for t, p in partitions]


class ClusterLog:
    """Where each partition's log starts and ends: `async with ClusterLog(bootstrap, t) as log`."""

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self._bootstrap = bootstrap
        self._admin = AIOKafkaAdminClient(**_options(bootstrap, timeout_s))
        self._consumer = AIOKafkaConsumer(
            enable_auto_commit=False, **_options(bootstrap, timeout_s)
        )
        self._topics: dict[str, set[int]] = {}

    async def __aenter__(self) -> ClusterLog:
        try:
            await self._consumer.start()
            # Let the consumer's background task begin: aiokafka's stop() awaits it after
            # cancelling it, and a task cancelled before its first step raises CancelledError.
            await asyncio.sleep(0)
            await self._admin.start()
            topics = await self._admin.describe_topics()
        except KafkaError as exc:
            await self.__aexit__(None, None, None)
            raise GroupsError(f"cannot read metadata from {self._bootstrap}: {exc!r}") from None
        self._topics = {
            t["topic"]: {int(p["partition"]) for p in t["partitions"]}
            for t in topics
            if t["error_code"] == 0
        }
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._consumer.stop()
        await self._admin.close()

    def partitions(self, topic: str) -> set[int] | None:
        """The topic's partitions in Metadata, None for a topic it does not name."""
        found = self._topics.get(topic)
        return None if found is None else set(found)

    def known(self, partitions: list[TP]) -> list[TP]:
        return [(t, p) for t, p in partitions if p in (self.partitions(t) or ())]

    async def earliest(self, partitions: list[TP]) -> dict[TP, int]:
        return await self._ask("beginning_offsets", partitions)

    async def latest(self, partitions: list[TP]) -> dict[TP, int]:
        return await self._ask("end_offsets", partitions)

    async def at_time(self, partitions: list[TP], timestamp_ms: int) -> dict[TP, int | None]:
        """The first offset whose timestamp is >= `timestamp_ms`; None where there is none."""
        if not partitions:
            return {}
        try:
            found = await self._consumer.offsets_for_times(
                dict.fromkeys(_tps(partitions), timestamp_ms)
            )
        except KafkaError as exc:
            raise GroupsError(f"ListOffsets (by time): {exc!r}") from None
        # A found record has its timestamp (>= the one asked, so >= 0). "None found" is offset -1
        # in Kafka; tansu answers offset 0 with timestamp -1, so the timestamp decides.
        return {
            (tp.topic, tp.partition): None if o is None or o.timestamp < 0 else int(o.offset)
            for tp, o in found.items()
        }

    async def _ask(self, call: str, partitions: list[TP]) -> dict[TP, int]:
        if not partitions:
            return {}
        try:
            found = await getattr(self._consumer, call)(_tps(partitions))
        except KafkaError as exc:
            raise GroupsError(f"ListOffsets: {exc!r}") from None
        return {(tp.topic, tp.partition): int(offset) for tp, offset in found.items()}


async def commit(bootstrap: str, group: str, offsets: dict[TP, int], timeout_s: float) -> None:
    """Commit `offsets` for `group` without joining it (module docstring)."""
    # No auto-commit: on stop() aiokafka would commit its positions, which it may have set from
    # the offsets committed before ours, and put one partition back where the reset moved it from
    # (seen in the Kafka-style reset tests, a partition at a time).
    consumer = AIOKafkaConsumer(
        group_id=group, enable_auto_commit=False, **_options(bootstrap, timeout_s)
    )
    try:
        await consumer.start()
        consumer.assign(_tps(sorted(offsets)))
        consumer.pause(*consumer.assignment())  # no fetching: only the commit
        await consumer.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})
    except KafkaError as exc:
        raise GroupsError(f"OffsetCommit for group {group!r}: {exc!r}") from None
    finally:
        await consumer.stop()
