"""Committed-offset lag per group, in sidecar mode with --metrics-per-group.

Every `lag_interval_ms`, the end offset of every partition that some group has committed an offset
for is read from the partition's leader with ListOffsets (timestamp -1 = latest, READ_UNCOMMITTED:
the high watermark, as `kafka-consumer-groups --describe` reports LOG-END-OFFSET), and each group's
lag is the sum and the max, over its partitions, of max(0, end offset - committed offset).

Exposed as the Prometheus gauges groupcoord_group_lag_sum{group} and groupcoord_group_lag_max{group}
(one series per group: only behind --metrics-per-group, STYLE.md), and as `status(group_id)` for the
status page. Invariants: a measurement replaces the previous one whole; a partition whose end offset
could not be read (leader unknown or down) is left out of that round rather than counted as 0; a
failed round keeps the last values (with their age) instead of reporting no lag. A partition
without a known leader, a leader that cannot be reached or that answers that it is not the leader
(the cluster moved it: a broker died) brings the sidecar's metadata refresh forward (`stale`), so
the next round asks the new leader instead of waiting for the periodic refresh.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.list_offsets.v5.response import ListOffsetsResponse

from coordinator.sidecar import rewrite
from coordinator.sidecar.upstream import Broker, UpstreamUnavailable

if TYPE_CHECKING:
    from coordinator.core.coordinator import GroupCoordinator

log = logging.getLogger("groupcoord.lag")

_LATEST = -1
_READ_UNCOMMITTED = 0
_CONSUMER_REPLICA_ID = -1
TopicPartition = tuple[str, int]
# ListOffsets partition errors that mean "ask someone else": the partition's leadership moved
# (Kafka's clients refresh their metadata on each of these too).
LEADER_MOVED = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,  # not on this broker (any more)
        ErrorCode.leader_not_available,  # an election is under way
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
    }
)


@dataclass(frozen=True, slots=True)
class GroupLag:
    total: int  # sum over the group's partitions
    worst: int  # max over the group's partitions
    partitions: int  # how many partitions were measured


class LagTracker:
    """Measures every `interval_ms`: the committed offsets come from `core`, the end offsets from
    the partitions' leaders (`leaders`, kept current by the sidecar) through `brokers`."""

    def __init__(
        self,
        core: GroupCoordinator,
        leaders: Mapping[TopicPartition, int],
        brokers: Mapping[int, Broker],
        interval_ms: int,
        stale: Callable[[], None] = lambda: None,
    ) -> None:
        self._core = core
        self._leaders = leaders
        self._brokers = brokers
        self._stale = stale  # the leaders are out of date: re-read the cluster's metadata
        self.interval_s = interval_ms / 1000
        self.lag: dict[str, GroupLag] = {}
        self.ends: dict[TopicPartition, int] = {}  # the last measurement's end offsets
        self.measured_at: float | None = None  # wall-clock seconds

    async def run(self) -> None:
        while True:
            try:
                await self.measure()
            except Exception:  # a bug here must not stop the sidecar; it is logged
                log.exception("lag measurement failed")
            await asyncio.sleep(self.interval_s)

    async def measure(self) -> None:
        core = self._core
        committed = {g: core.committed_offsets(g) for g in core.offset_group_ids()}
        wanted = {tp for offsets in committed.values() for tp in offsets}
        ends = await self.end_offsets(wanted)
        lag: dict[str, GroupLag] = {}
        for group_id, offsets in committed.items():
            total = worst = counted = 0
            for tp, value in offsets.items():
                end = ends.get(tp)
                if end is None or value.offset < 0:
                    continue
                behind = max(0, end - value.offset)
                total += behind
                worst = max(worst, behind)
                counted += 1
            lag[group_id] = GroupLag(total, worst, counted)
        self.lag = lag
        self.ends = ends
        self.measured_at = time.time()

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        by_leader: dict[int, list[TopicPartition]] = {}
        leaders = self._leaders
        leaderless = False
        for tp in partitions:
            leader = leaders.get(tp)
            if leader is not None and leader >= 0:
                by_leader.setdefault(leader, []).append(tp)
            else:
                leaderless = True
        if leaderless:
            self._stale()
        results = await asyncio.gather(
            *(self._list_offsets(node_id, tps) for node_id, tps in by_leader.items())
        )
        ends: dict[TopicPartition, int] = {}
        for result in results:
            ends.update(result)
        return ends

    async def _list_offsets(
        self, node_id: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        broker = self._brokers.get(node_id)
        if broker is None:
            self._stale()
            return {}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = ListOffsetsRequest(
            replica_id=_CONSUMER_REPLICA_ID,  # type: ignore[arg-type]
            isolation_level=_READ_UNCOMMITTED,  # type: ignore[arg-type]
            topics=tuple(
                ListOffsetsTopic(
                    name=topic,  # type: ignore[arg-type]
                    partitions=tuple(
                        ListOffsetsPartition(partition_index=p, timestamp=_LATEST)  # type: ignore[arg-type]
                        for p in sorted(parts)
                    ),
                )
                for topic, parts in by_topic.items()
            ),
        )
        try:
            frame = await broker.request(request)
            response: ListOffsetsResponse = rewrite.decode_response(rewrite.LIST_OFFSETS, 5, frame)
        except (UpstreamUnavailable, rewrite.RewriteError) as exc:
            log.debug("lag: ListOffsets on broker %d failed: %s", node_id, exc)
            self._stale()  # a broker down: its partitions get other leaders
            return {}
        if any(p.error_code in LEADER_MOVED for t in response.topics for p in t.partitions):
            self._stale()
        return {
            (str(t.name), int(p.partition_index)): int(p.offset)
            for t in response.topics
            for p in t.partitions
            if p.error_code == 0 and p.offset >= 0
        }

    # -- what others read ------------------------------------------------------------------------

    def measured_end_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The status page's end offsets (coordinator.serve.status.EndOffsets): the last
        measurement's, for the partitions it measured."""
        ends = self.ends
        return {tp: ends[tp] for tp in partitions if tp in ends}

    def status(self, group_id: str) -> dict[str, str]:
        """For the status page: the group's lag as text (empty when not measured)."""
        lag = self.lag.get(group_id)
        if lag is None or self.measured_at is None:
            return {}
        age_s = max(0.0, time.time() - self.measured_at)
        return {
            "lag (sum)": str(lag.total),
            "lag (max)": str(lag.worst),
            "lag measured": f"{age_s:.0f} s ago over {lag.partitions} partitions",
        }


class LagCollector:
    """A prometheus_client custom collector over a LagTracker's last measurement."""

    def __init__(self, tracker: LagTracker) -> None:
        self._tracker = tracker

    def describe(self) -> list[Any]:
        return []  # series come and go with groups; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        total = GaugeMetricFamily(
            "groupcoord_group_lag_sum",
            "Sum over the group's partitions of (end offset - committed offset), from upstream",
            labels=["group"],
        )
        worst = GaugeMetricFamily(
            "groupcoord_group_lag_max",
            "Max over the group's partitions of (end offset - committed offset), from upstream",
            labels=["group"],
        )
        for group_id, lag in sorted(self._tracker.lag.items()):
            total.add_metric([group_id], lag.total)
            worst.add_metric([group_id], lag.worst)
        yield total
        yield worst
