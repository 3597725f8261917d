"""OffsetFetch v1-v9 (docs/protocol.md §10.2).

Rules: per group (v8+ batches several, KIP-709): loading -> COORDINATOR_LOAD_IN_PROGRESS; no
topics (null, v2+) -> every committed offset of the group; otherwise each requested partition,
-1 / -1 / "" when nothing is committed. Pending transactional offsets (core.txn_offsets) are never
answered: without require_stable the last committed offset is; with it (v7+, KIP-447) a partition
with a pending one answers UNSTABLE_OFFSET_COMMIT with -1 / -1 / "", as Kafka does.
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
from coordinator.core.txn_offsets import unstable

E = ErrorCode


def handle(state: CoreState, reply_to: int, cmd: OffsetFetch, now_ms: int, fx: Effects) -> None:
    stable = cmd.require_stable and state.txn_pending.group_ids()
    result = OffsetFetchResult(
        tuple(
            _unstable(state, _group(state, g.group_id, g.topics)) if stable
            else _group(state, g.group_id, g.topics)
            for g in cmd.groups
        )
    )  # fmt: skip
    fx.replies.append((reply_to, result))


def _unstable(state: CoreState, fetched: FetchedGroup) -> FetchedGroup:
    """require_stable: the partitions with a pending transactional offset answer
    UNSTABLE_OFFSET_COMMIT (clients retry until the transaction is settled)."""
    if fetched.error is not E.none or not state.txn_pending.entries(fetched.group_id):
        return fetched
    gid = fetched.group_id
    return FetchedGroup(
        gid,
        fetched.error,
        tuple(
            FetchedTopic(t.name, tuple(
                FetchedPartition(p.partition, -1, -1, "", E.unstable_offset_commit)
                if unstable(state, gid, t.name, p.partition) else p
                for p in t.partitions
            ))
            for t in fetched.topics
        ),
    )  # fmt: skip


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
