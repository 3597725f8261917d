"""core.txn_offsets (issue 29): pending transactional offsets, their records and their settling."""

from __future__ import annotations

import uuid

from coordinator.core import txn_offsets as t
from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.messages import ErrorCode
from coordinator.core.record_codec import decode_record, encode_record
from coordinator.core.records import Record, TxnOffsetKey, TxnOffsetValue
from coordinator.core.topics import TopicCatalog, TopicInfo

E = ErrorCode


def core() -> GroupCoordinator:
    catalog = TopicCatalog()
    catalog.put(TopicInfo("in", uuid.UUID(int=1), 2, ()))
    return GroupCoordinator(CoordinatorConfig(), catalog, lambda p: f"{p}-m")


def commit(offset: int, epoch: int = 0, pid: int = 7, generation: int = -1) -> t.TxnOffsetCommit:
    return t.TxnOffsetCommit(
        "tx",
        "g",
        pid,
        epoch,
        generation,
        "",
        None,
        (t.TxnCommitTopic("in", (t.TxnCommitPartition(0, offset, -1, "m"),)),),
    )


def test_record_round_trip() -> None:
    record = Record(
        TxnOffsetKey("g", "in", 3, 2**40, 5), TxnOffsetValue("tx", 4, 99, 2, "meta", 123)
    )
    assert decode_record(*encode_record(record)) == record
    tombstone = Record(record.key, None)
    assert decode_record(*encode_record(tombstone)) == tombstone


def test_pending_until_commit_and_replay_rebuilds() -> None:
    c = core()
    fx, result = c.txn_stage(commit(5), 0)
    assert result.topics[0].partitions[0].error is E.none
    assert c.committed_offsets("g") == {}
    assert t.unstable(c.state, "g", "in", 0) and not t.unstable(c.state, "g", "in", 1)
    entries = c.txn_pending("g")
    more, settled = c.txn_settle("g", t.ended_by_end_txn(entries, 7, 0), [])
    assert settled == 1 and c.committed_offsets("g")[("in", 0)].offset == 5
    assert c.txn_pending("g") == []
    replayed = core()
    for record in fx.records + more.records:
        replayed.replay(record)
    replayed.finish_loading(0)
    assert replayed.committed_offsets("g") == c.committed_offsets("g")
    assert replayed.txn_pending("g") == []


def test_abort_drops_and_zombie_is_refused() -> None:
    c = core()
    c.txn_stage(commit(5, epoch=1), 0)
    assert c.txn_check(commit(6, epoch=0)) is E.invalid_producer_epoch
    c.txn_settle("g", [], c.txn_pending("g"))
    assert c.committed_offsets("g") == {} and c.txn_pending("g") == []


def test_fencing_and_witness() -> None:
    c = core()
    c.txn_stage(commit(5, epoch=0), 0)
    c.txn_stage(commit(8, epoch=0), 0)
    entries = c.txn_pending("g")
    assert t.ended_by_fencing(entries, "tx", 7, 0) == []
    ended = t.ended_by_fencing(entries, "tx", 7, 1)
    assert len(ended) == 2
    committed = t.witnessed(ended, {("in", 0): 5})
    assert [v.offset for _, v in committed] == [5]
    # The newer staging (8) is not shown committed: dropped; 5 becomes the offset.
    c.txn_settle("g", committed, [e for e in ended if e not in committed])
    assert c.committed_offsets("g")[("in", 0)].offset == 5 and c.txn_pending("g") == []


def test_a_transaction_is_over_by_its_described_state() -> None:
    """DescribeTransactions (Kafka) as the witness reads it: over once its markers are written
    (Complete*, Empty, Dead, or a later producer id or epoch begun), never while Ongoing or
    while markers are being written (Prepare*, whose epoch KIP-890 already bumped)."""
    c = core()
    c.txn_stage(commit(5, epoch=3), 0)
    entries = c.txn_pending("g")
    over = {
        state: len(t.ended_by_state(entries, state, 7, 3))
        for state in ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence",
                      "CompleteCommit", "CompleteAbort", "Empty", "Dead")
    }  # fmt: skip
    assert over == {"Ongoing": 0, "PrepareCommit": 0, "PrepareAbort": 0, "PrepareEpochFence": 0,
                    "CompleteCommit": 1, "CompleteAbort": 1, "Empty": 1, "Dead": 1}  # fmt: skip
    assert len(t.ended_by_state(entries, "Ongoing", 7, 4)) == 1  # a later epoch's transaction
    assert len(t.ended_by_state(entries, "Ongoing", 8, 0)) == 1  # a new producer id
    assert t.ended_by_state(entries, "PrepareCommit", 7, 4) == []  # KIP-890: bumped, preparing
    assert t.ended_by_state(entries, "Ongoing", 7, 2) == []  # an older epoch: not ours to end
    assert len(t.ended_by_state(entries, None, -1, -1)) == 1  # the id expired upstream


def test_stale_generation_is_illegal() -> None:
    c = core()
    assert c.txn_check(commit(5, generation=3)) is E.illegal_generation


def test_retention_keeps_a_partitions_offset_and_its_group_while_pending() -> None:
    """Kafka's OffsetMetadataManager.cleanupExpiredOffsets: no offset of a partition with pending
    transactional offsets expires, and a group with open transactions is not removed."""
    catalog = TopicCatalog()
    catalog.put(TopicInfo("in", uuid.UUID(int=1), 2, ()))
    config = CoordinatorConfig(offsets_retention_ms=1_000, offsets_retention_check_interval_ms=100)
    c = GroupCoordinator(config, catalog, lambda p: f"{p}-m")
    c.expire(0)  # arms the retention check
    c.txn_stage(commit(5), 0)
    c.txn_settle("g", c.txn_pending("g"), [])
    c.txn_stage(commit(6), 0)
    c.expire(10_000)
    assert c.committed_offsets("g")[("in", 0)].offset == 5 and "g" in c.state.groups
    c.txn_settle("g", [], c.txn_pending("g"))  # aborted: nothing holds them any more
    c.expire(20_000)
    assert c.committed_offsets("g") == {} and "g" not in c.state.groups
