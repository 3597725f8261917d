"""OffsetFetch v1-v9 (docs/protocol.md §10.2).

Rules: per group (v8+ batches several, KIP-709): loading -> COORDINATOR_LOAD_IN_PROGRESS; no
topics (null, v2+) -> every committed offset of the group; otherwise each requested partition,
-1 / -1 / "" when nothing is committed. require_stable (v7+, KIP-447) needs nothing here: there
are no transactional offsets, so every offset is stable.
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.messages import (
    ErrorCode,
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    FetchTopic,
    OffsetFetch,
    OffsetFetchResult,
)
from coordinator.core.records import OffsetCommitValue
from coordinator.core.state import CoreState

E = ErrorCode


def handle(state: CoreState, reply_to: int, cmd: OffsetFetch, now_ms: int, fx: Effects) -> None:
    result = OffsetFetchResult(tuple(_group(state, g.group_id, g.topics) for g in cmd.groups))
    fx.replies.append((reply_to, result))


def _group(state: CoreState, group_id: str, topics: tuple[FetchTopic, ...] | None) -> FetchedGroup:
    if state.loading:
        return FetchedGroup(group_id, E.coordinator_load_in_progress, ())
    stored = state.offsets.topics(group_id)
    if topics is None:
        return FetchedGroup(
            group_id,
            E.none,
            tuple(
                FetchedTopic(name, tuple(_fetched(p, v) for p, v in parts.items()))
                for name, parts in stored.items()
            ),
        )
    out: list[FetchedTopic] = []
    for t in topics:
        parts = stored.get(t.name, {})
        out.append(FetchedTopic(t.name, tuple(_fetched(p, parts.get(p)) for p in t.partitions)))
    return FetchedGroup(group_id, E.none, tuple(out))


def _fetched(partition: int, value: OffsetCommitValue | None) -> FetchedPartition:
    if value is None:
        return FetchedPartition(partition, -1, -1, "", E.none)
    return FetchedPartition(partition, value.offset, value.leader_epoch, value.metadata, E.none)
