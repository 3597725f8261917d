"""Prometheus metrics of the KIP-932 share groups, read at scrape time from the core's share
coordinator (`GroupCoordinator.share`): its groups and their share partitions.

Every family is a level (a gauge) computed from the live state, except the lock expiries, a
counter the share partitions keep (`SharePartition.expired_locks`), summed here: nothing is
counted on the ShareFetch/ShareAcknowledge path itself.

- groupcoord_share_groups{state}: share groups by state (Empty, Stable).
- groupcoord_share_group_members: members of all share groups.
- groupcoord_share_partitions: share partitions with state (group x topic partition).
- groupcoord_share_records{state}: in-flight records (between each partition's start offset and
  its last fetched offset) by delivery state: available, acquired, acknowledged, archived.
- groupcoord_share_redelivered_records: in-flight records delivered more than once.
- groupcoord_share_lock_expiries_total: acquisition locks that expired (records released by the
  lock timeout rather than acknowledged or released by the member).

With `per_group` (`--metrics-per-group`; group ids are unbounded, STYLE.md) the same per group:
groupcoord_share_group_records{group,state}, groupcoord_share_group_start_offset{group,topic,
partition}. Runs on the event loop thread, as every scrape-time read of the core.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.partition import SharePartition
from coordinator.core.share.persisted import RecordState
from coordinator.core.topics import TopicCatalog

__all__ = ["collect", "record_counts"]

_STATES = {
    RecordState.AVAILABLE: "available",
    RecordState.ACQUIRED: "acquired",
    RecordState.ACKNOWLEDGED: "acknowledged",
    RecordState.ARCHIVED: "archived",
}


def record_counts(part: SharePartition) -> tuple[dict[str, int], int]:
    """(in-flight records by state name, those delivered more than once)."""
    counts = dict.fromkeys(_STATES.values(), 0)
    redelivered = 0
    for offset in range(part.start_offset, part.end_offset + 1):
        found = part.record(offset)
        if found is None:
            continue
        state, delivery_count, _ = found
        counts[_STATES[state]] += 1
        redelivered += delivery_count > 1
    return counts, redelivered


def collect(
    share: ShareGroupCoordinator, topics: TopicCatalog, per_group: bool
) -> Iterator[Metric]:
    groups = GaugeMetricFamily(
        "groupcoord_share_groups", "KIP-932 share groups by state", labels=["state"]
    )
    by_state = {"Empty": 0, "Stable": 0}
    members = 0
    for group in list(share.groups.values()):
        by_state[group.state.value] = by_state.get(group.state.value, 0) + 1
        members += len(group.members)
    for state, n in sorted(by_state.items()):
        groups.add_metric([state], n)
    yield groups
    yield GaugeMetricFamily(
        "groupcoord_share_group_members", "Members of the KIP-932 share groups", value=members
    )
    records = GaugeMetricFamily(
        "groupcoord_share_records",
        "In-flight records of all share partitions by delivery state",
        labels=["state"],
    )
    group_records = GaugeMetricFamily(
        "groupcoord_share_group_records",
        "In-flight records of the group's share partitions by delivery state",
        labels=["group", "state"],
    )
    start = GaugeMetricFamily(
        "groupcoord_share_group_start_offset",
        "The share-partition start offset (SPSO)",
        labels=["group", "topic", "partition"],
    )
    totals = dict.fromkeys(_STATES.values(), 0)
    per: dict[str, dict[str, int]] = {}
    redelivered = expired = 0
    partitions = list(share.partitions.items())
    for (gid, topic_id, partition), part in partitions:
        counts, again = record_counts(part)
        redelivered += again
        expired += part.expired_locks
        for name, n in counts.items():
            totals[name] += n
        if per_group:
            mine = per.setdefault(gid, dict.fromkeys(_STATES.values(), 0))
            for name, n in counts.items():
                mine[name] += n
            topic = topics.name_of(topic_id) or str(topic_id)
            start.add_metric([gid, topic, str(partition)], part.start_offset)
    yield GaugeMetricFamily(
        "groupcoord_share_partitions", "Share partitions with state", value=len(partitions)
    )
    for name, n in totals.items():
        records.add_metric([name], n)
    yield records
    yield GaugeMetricFamily(
        "groupcoord_share_redelivered_records",
        "In-flight records delivered more than once",
        value=redelivered,
    )
    yield CounterMetricFamily(
        "groupcoord_share_lock_expiries",
        "Acquisition locks that expired before the member acknowledged or released its records",
        value=expired,
    )
    if per_group:
        for gid, counts in sorted(per.items()):
            for name, n in counts.items():
                group_records.add_metric([gid, name], n)
        yield group_records
        yield start
