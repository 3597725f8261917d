"""What time does: fire the timers that are due, and offsets retention (docs/protocol.md §10.4).

`expire(state, now_ms)` pops every live timer whose deadline is <= now_ms and runs it: a group's
sessions (core.rebalance.expire_sessions), the end of a join phase or of the initial rebalance
delay, a pending SyncGroup's deadline, and the periodic retention check. Nothing fires while the
core is loading.

Retention (Kafka's cleanupGroupMetadata): a group's offsets expire `offsets.retention.minutes`
after their base time (core.offsets.expiry_base: the commit time, or for a consumer group the
time it became Empty), except those of topics it is subscribed to and those of partitions with
pending transactional offsets (issue 29; Kafka's OffsetMetadataManager.cleanupExpiredOffsets);
an Empty group whose offsets have all expired is deleted, unless it has pending transactional
offsets (Kafka keeps a group with open transactions).
"""

from __future__ import annotations

import heapq

from coordinator.core.effects import Effects
from coordinator.core.events import OffsetsExpired
from coordinator.core.group import GroupState
from coordinator.core.handlers.groups import remove_group
from coordinator.core.offsets import expiry_base, is_expired
from coordinator.core.rebalance import (
    complete_join,
    expire_pending_sync,
    expire_sessions,
    initial_delay_elapsed,
)
from coordinator.core.records import OffsetCommitKey, Record
from coordinator.core.state import CoreState
from coordinator.core.timers import JOIN, JOIN_INITIAL, RETENTION, SESSION


def arm_retention(state: CoreState, now_ms: int) -> None:
    state.timers.arm_retention(now_ms + state.config.offsets_retention_check_interval_ms)


def expire(state: CoreState, now_ms: int) -> Effects:
    fx = Effects()
    if state.loading:
        return fx
    timers = state.timers
    if timers.retention_seq == 0:
        arm_retention(state, now_ms)
    heap = timers.heap
    groups = state.groups
    while heap and heap[0][0] <= now_ms:
        entry = heapq.heappop(heap)
        if not timers.is_live(entry):
            continue
        kind = entry[2]
        if kind == RETENTION:
            # Equivalent under mutation (None, 1): arm_retention below sets it again before
            # anything reads it (_expire_offsets never looks at the timers).
            timers.retention_seq = 0  # pragma: no mutate
            _expire_offsets(state, now_ms, fx)
            arm_retention(state, now_ms)
            continue
        group = groups.get(entry[3])
        if group is None:
            # `break` is an equivalent mutant: is_live has already dropped every entry of a
            # group that is gone, so a live entry always finds its group.
            continue  # pragma: no mutate
        if kind == SESSION:
            expire_sessions(state, group, now_ms, fx)
        elif kind == JOIN:
            complete_join(state, group, now_ms, fx)
        elif kind == JOIN_INITIAL:
            initial_delay_elapsed(state, group, now_ms, fx)
        else:
            expire_pending_sync(state, group, now_ms, fx)
    return fx


def _expire_offsets(state: CoreState, now_ms: int, fx: Effects) -> None:
    wall = state.wall(now_ms)
    retention = state.config.offsets_retention_ms
    offsets = state.offsets
    pending = state.txn_pending
    for gid, group in list(state.groups.items()):
        stored = offsets.topics(gid)
        if stored:
            expires, base = expiry_base(group)
            if not expires:
                continue
            all_expired = True
            expired: list[tuple[str, int]] = []
            # Equivalent mutants on the no-mutate lines: `all_expired` is only read as
            # `not all_expired`, so None is False; and True for a subscribed topic changes
            # nothing, since only an Empty group is removed and an Empty group reads no topic
            # (its subscribed topics are computed from no members: frozenset()).
            for topic, parts in stored.items():
                if group.is_subscribed_to_topic(topic):
                    all_expired = False  # pragma: no mutate
                    continue
                for partition, value in parts.items():
                    if is_expired(value, base, wall, retention) and not pending.has(
                        gid, topic, partition
                    ):
                        expired.append((topic, partition))
                    else:
                        all_expired = False  # pragma: no mutate
            for topic, partition in expired:
                offsets.delete(gid, topic, partition)
                fx.records.append(Record(OffsetCommitKey(gid, topic, partition), None))
            if expired:
                fx.events.append(OffsetsExpired(gid, len(expired)))
            if not all_expired:
                continue
        if group.state is GroupState.EMPTY and not pending.has_group(gid):
            remove_group(state, gid, fx)
