"""OffsetFetch v1-v9 (docs/protocol.md §10.2).

Rules: per group (v8+ batches several, KIP-709): loading -> COORDINATOR_LOAD_IN_PROGRESS; no
topics (null, v2+) -> every committed offset of the group; otherwise each requested partition,
-1 / -1 / "" when nothing is committed. Pending transactional offsets (core.txn_offsets) are never
answered: without require_stable the last committed offset is; with it (v7+, KIP-447) a partition
with a pending one answers UNSTABLE_OFFSET_COMMIT with -1 / -1 / "", as Kafka does.
A KIP-848 consumer group's member (v9: a member id or an epoch >= 0) is checked first: an unknown
member -> UNKNOWN_MEMBER_ID, another epoch -> STALE_MEMBER_EPOCH (Kafka 4.x's
ConsumerGroup.validateOffsetFetch); an admin fetch (no member id, epoch -1) is not.
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.messages import (
    ErrorCode,
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    FetchGroup,
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
            _unstable(state, _group(state, g)) if stable else _group(state, g)
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


def _group(state: CoreState, request: FetchGroup) -> FetchedGroup:
    group_id, topics = request.group_id, request.topics
    if state.loading:
        return FetchedGroup(group_id, E.coordinator_load_in_progress, ())
    # KIP-932: a share group's id answers as a group with no offsets (NONE, -1 per partition
    # asked for), as Kafka 4.4 does for v7-v9, named topics or all (tests/share/test_share_admin).
    consumer_group = state.consumer.groups.get(group_id)
    if consumer_group is not None and (request.member_epoch >= 0 or request.member_id is not None):
        # Kafka 4.x's ConsumerGroup.validateOffsetFetch: a member's fetch names its epoch.
        member = consumer_group.members.get(request.member_id or "")
        if member is None:
            return FetchedGroup(group_id, E.unknown_member_id, ())
        if member.member_epoch != request.member_epoch:
            # A classic member of the consumer group (issue 23 item 6): ILLEGAL_GENERATION.
            error = E.stale_member_epoch if member.classic is None else E.illegal_generation
            return FetchedGroup(group_id, error, ())
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
