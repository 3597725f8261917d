"""Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447): pending until the transaction's
outcome is known, then committed or dropped (issue 29). Pure: the sidecar shell
(coordinator.sidecar.txn) learns outcomes from the upstream and calls `settle`.

Kafka keeps a TxnOffsetCommit as a transactional record in `__consumer_offsets` and lets the
transaction coordinator's COMMIT/ABORT marker decide it. groupcoord has no markers in its log, so
a pending offset is its own record (TxnOffsetKey: group, topic, partition, producer id, seq) and
the outcome is a second write: a tombstone for each settled key, and for a committed one the
OffsetCommit value it becomes. Replaying the log therefore rebuilds exactly the pending set and
the committed offsets, after a kill -9 as after a fleet failover.

Invariants:
- A pending offset is never visible to OffsetFetch: without require_stable the last committed
  offset is answered; with it (v7+) the partition answers UNSTABLE_OFFSET_COMMIT (Kafka's rule).
- Only `settle` turns a pending offset into a committed one, and only when told the
  transaction committed. A committed pending offset replaces the partition's offset only if it
  was staged no earlier than that offset was committed (Kafka keeps the later record; staging
  time stands for the record position here). Settling an entry committed also settles the older
  stagings of the same partition (their value is superseded, whatever their outcome: Kafka
  would keep the later record as well).
- The validation is OffsetCommit's (core.offsets.validate_commit) with Kafka's transactional
  difference: a member of the current generation may commit while the group is in
  CompletingRebalance (ClassicGroup.validateOffsetCommit, isTransactional). v3+ requests carry
  generation, member id and instance id (KIP-447) and get ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID
  or FENCED_INSTANCE_ID as OffsetCommit does; an unknown group with a generation gets
  ILLEGAL_GENERATION.
- Zombies: a staging whose producer epoch is lower than one already pending for the same producer
  id in the group is refused with INVALID_PRODUCER_EPOCH (the upstream refuses it first, in the
  sidecar: this is the local backstop).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.core.effects import Effects
from coordinator.core.events import GroupCreated, OffsetsCommitted
from coordinator.core.group import ClassicGroup, GroupState
from coordinator.core.messages import ErrorCode, OffsetCommitResult, PartitionError, TopicErrors
from coordinator.core.offsets import java_length, validate_commit
from coordinator.core.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    TxnOffsetKey,
    TxnOffsetValue,
)
from coordinator.core.state import CoreState
from coordinator.core.txn_pending import Entry, PendingOffsets

__all__ = ["Entry", "PendingOffsets"]  # (kept here for the shell: coordinator.sidecar.txn)

E = ErrorCode


@dataclass(frozen=True, slots=True)
class TxnCommitPartition:
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class TxnCommitTopic:
    name: str
    partitions: tuple[TxnCommitPartition, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommit:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int  # v3+; -1 before
    member_id: str
    group_instance_id: str | None
    topics: tuple[TxnCommitTopic, ...]


# -- validation and staging ------------------------------------------------------------------------


def check(state: CoreState, cmd: TxnOffsetCommit) -> ErrorCode | None:
    """The group-level error of `cmd` (None = accept): asked before the upstream is told and
    again when staging, since the group may have moved on meanwhile."""
    if state.loading:
        return E.coordinator_load_in_progress
    group = state.groups.get(cmd.group_id)
    if group is None:
        return E.illegal_generation if cmd.generation_id >= 0 else None
    error = validate_commit(group, cmd.generation_id, cmd.member_id, cmd.group_instance_id)
    if error is E.rebalance_in_progress and group.state is GroupState.COMPLETING_REBALANCE:
        return None  # Kafka accepts transactional commits of the current generation here
    if error is not None:
        return error
    for key, value in state.txn_pending.entries(cmd.group_id):
        if key.producer_id == cmd.producer_id and value.producer_epoch > cmd.producer_epoch:
            return E.invalid_producer_epoch  # a zombie: a newer epoch has staged already
    return None


def stage(state: CoreState, cmd: TxnOffsetCommit, now_ms: int, fx: Effects) -> OffsetCommitResult:
    """Stage `cmd`'s offsets as pending (records in `fx`); the answer, per partition."""
    error = check(state, cmd)
    has = state.topics.has_partition
    wall = state.wall(now_ms)
    pending = state.txn_pending
    max_len = state.config.offset_metadata_max_bytes
    staged = False  # whether any partition was staged
    topics = []
    for t in cmd.topics:
        results = []
        for p in t.partitions:
            if not has(t.name, p.partition):
                code = E.unknown_topic_or_partition
            elif error is not None:
                code = error
            elif java_length(p.metadata or "") > max_len:
                code = E.offset_metadata_too_large
            else:
                key = TxnOffsetKey(cmd.group_id, t.name, p.partition, cmd.producer_id,
                                   pending.next_seq)  # fmt: skip
                value = TxnOffsetValue(cmd.transactional_id, cmd.producer_epoch, p.offset,
                                       p.leader_epoch, p.metadata or "", wall)  # fmt: skip
                pending.put(key, value)
                fx.records.append(Record(key, value))
                staged = True
                code = E.none
            results.append(PartitionError(p.partition, code))
        topics.append(TopicErrors(t.name, tuple(results)))
    if staged and cmd.group_id not in state.groups:
        # A simple group, as OffsetCommit creates one with its first offset; replay does the same.
        state.groups[cmd.group_id] = ClassicGroup(cmd.group_id, None)
        fx.events.append(GroupCreated(cmd.group_id))
    return OffsetCommitResult(tuple(topics))


# -- outcomes --------------------------------------------------------------------------------------


def ended_by_end_txn(
    entries: Iterable[Entry], producer_id: int, producer_epoch: int
) -> list[Entry]:
    """The entries an EndTxn of (producer_id, producer_epoch) ends: that epoch's stagings. An
    older epoch's transaction ended when the epoch was bumped; this EndTxn says nothing of it."""
    return [
        (k, v) for k, v in entries if k.producer_id == producer_id
        and v.producer_epoch == producer_epoch
    ]  # fmt: skip


def ended_by_fencing(
    entries: Iterable[Entry], transactional_id: str, producer_id: int, producer_epoch: int
) -> list[Entry]:
    """The entries an InitProducerId answer for `transactional_id` proves ended: those of an
    older producer id or epoch of the same transactional id (Kafka completes or aborts the
    ongoing transaction before it hands out the new epoch)."""
    return [
        (k, v) for k, v in entries if v.transactional_id == transactional_id
        and (k.producer_id != producer_id or v.producer_epoch < producer_epoch)
    ]  # fmt: skip


# DescribeTransactions' states (Kafka's TransactionState names): markers still being written.
_PREPARING = frozenset({"PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
_OVER = frozenset({"CompleteCommit", "CompleteAbort", "Empty", "Dead"})


def ended_by_state(
    entries: Iterable[Entry], state: str | None, producer_id: int, producer_epoch: int
) -> list[Entry]:
    """The entries whose transaction a DescribeTransactions answer for their transactional id
    shows over, with its markers written (so the shadow group now tells the outcome).
    `state` None: the transactional id is unknown upstream (TRANSACTIONAL_ID_NOT_FOUND: Kafka
    expires only an id with no transaction open). While markers are being written (Prepare*),
    nothing is over yet: with KIP-890's epoch bump the prepared epoch is already the next one.
    Otherwise a later producer id or epoch began after ours completed; the same one is over once
    Complete*, Empty or Dead, and still open while Ongoing."""
    if state is None:
        return list(entries)
    if state in _PREPARING:
        return []
    return [
        (k, v) for k, v in entries
        if k.producer_id != producer_id or v.producer_epoch < producer_epoch
        or (v.producer_epoch == producer_epoch and state in _OVER)
    ]  # fmt: skip


def witnessed(entries: Iterable[Entry], shadow: dict[tuple[str, int], int]) -> list[Entry]:
    """The entries whose offset the upstream's copy of the group (`shadow`: (topic, partition)
    -> committed offset) shows: their transaction committed. An aborted staging equal to the
    offset committed before it reads as committed too, which changes no offset."""
    return [(k, v) for k, v in entries if shadow.get((k.topic, k.partition)) == v.offset]


def settle(
    state: CoreState,
    group_id: str,
    committed: Iterable[Entry],
    aborted: Iterable[Entry],
    fx: Effects,
) -> int:
    """Apply outcomes: tombstone every settled key; the committed ones (in staging order) become
    the partition's offset unless a later commit is there already, and settle the older stagings
    of their partition. Returns how many entries were settled. Entries no longer pending (settled
    by an earlier call) are skipped."""
    pending = state.txn_pending
    live = dict(pending.entries(group_id))
    gone: dict[TxnOffsetKey, None] = {}  # an ordered set: its values are never read
    applied = 0
    for key, value in sorted(committed, key=lambda e: e[0].seq):
        if key not in live or key in gone:
            continue
        for older in live:
            same = older.topic == key.topic and older.partition == key.partition
            if same and older.seq < key.seq:
                gone[older] = None  # pragma: no mutate (an ordered set's value)
        gone[key] = None  # pragma: no mutate (an ordered set's value)
        current = state.offsets.get(group_id, key.topic, key.partition)
        if current is None or value.commit_timestamp_ms >= current.commit_timestamp_ms:
            offset = OffsetCommitValue(value.offset, value.leader_epoch, value.metadata,
                                       value.commit_timestamp_ms, None)  # fmt: skip
            state.offsets.put(group_id, key.topic, key.partition, offset)
            fx.records.append(Record(OffsetCommitKey(group_id, key.topic, key.partition), offset))
            applied += 1
    for key, _ in aborted:
        if key in live:
            gone[key] = None  # pragma: no mutate (an ordered set's value)
    for key in gone:
        pending.delete(key)
        fx.records.append(Record(key, None))
    if applied:
        fx.events.append(OffsetsCommitted(group_id, applied))
    return len(gone)


def replay(state: CoreState, key: TxnOffsetKey, value: TxnOffsetValue | None) -> None:
    if value is None:
        state.txn_pending.delete(key)
        return
    if key.group_id not in state.groups:
        state.groups[key.group_id] = ClassicGroup(key.group_id, None)
    state.txn_pending.put(key, value)


def unstable(state: CoreState, group_id: str, topic: str, partition: int) -> bool:
    """A require_stable OffsetFetch must answer UNSTABLE_OFFSET_COMMIT for this partition."""
    return state.txn_pending.has(group_id, topic, partition)
