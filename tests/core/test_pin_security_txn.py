"""The core's security state and pending transactional offsets, pinned where `make mutation`
found them loose: their other tests run whole servers (tests/security) or settle through the
coordinator without looking at what was kept.

- SecurityState.apply: the records of CreateAcls/DeleteAcls and AlterUserScramCredentials, written
  by acl_record and credential_record, rebuild exactly the ACLs and credentials they name; a
  deletion takes only its own user's mechanism; a record of another kind is refused by name.
- txn_offsets: an EndTxn ends only its own producer id *and* epoch; a replayed staging brings
  back its group and its value; PendingOffsets counts every staging of every group.
"""

from __future__ import annotations

import uuid

import pytest

from coordinator.core import txn_offsets as t
from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.events import GroupCreated, OffsetsCommitted
from coordinator.core.group import GroupState
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    ScramCredentialKey,
    TxnOffsetKey,
    TxnOffsetValue,
)
from coordinator.core.security import SecurityState, acl_record, credential_record
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.core.txn_pending import PendingOffsets
from coordinator.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from coordinator.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential
from tests.support.fakeclock import Harness

READ = AclBinding(ResourceType.GROUP, "g", PatternType.LITERAL, "User:alice", "*", Operation.READ,
                  Permission.ALLOW)  # fmt: skip
DENY = AclBinding(ResourceType.TOPIC, "t-", PatternType.PREFIXED, "User:*", "10.0.0.1",
                  Operation.ALL, Permission.DENY)  # fmt: skip


def credential(mechanism: str, n: int) -> ScramCredential:
    return ScramCredential(mechanism, b"salt%d" % n, b"stored%d" % n, b"server%d" % n, 4096 + n)


def test_acl_records_add_and_remove_the_binding_they_name() -> None:
    state = SecurityState()
    state.apply(acl_record(READ, True))
    state.apply(acl_record(DENY, True))
    assert acl_record(READ, False).value is None and acl_record(READ, True).value is not None
    assert set(state.authorizer.acls()) == {READ, DENY}
    state.apply(acl_record(READ, False))
    assert state.authorizer.acls() == [DENY]


def test_credential_records_put_and_delete_one_users_mechanism() -> None:
    state = SecurityState()
    alice256, alice512, bob256 = (credential(SCRAM_SHA_256, 1), credential(SCRAM_SHA_512, 2),
                                  credential(SCRAM_SHA_256, 3))  # fmt: skip
    for user, c in (("alice", alice256), ("alice", alice512), ("bob", bob256)):
        record = credential_record(user, c.mechanism, c)
        assert record.key == ScramCredentialKey(user, 1 if c.mechanism == SCRAM_SHA_256 else 2)
        state.apply(record)
    assert state.credentials.of("alice") == {SCRAM_SHA_256: alice256, SCRAM_SHA_512: alice512}
    assert state.credentials.of("bob") == {SCRAM_SHA_256: bob256}
    assert state.credentials.of("carol") == {}
    tombstone = credential_record("alice", SCRAM_SHA_256, None)
    assert tombstone == Record(ScramCredentialKey("alice", 1), None)
    state.apply(tombstone)
    assert state.credentials.of("alice") == {SCRAM_SHA_512: alice512}
    assert state.credentials.of("bob") == {SCRAM_SHA_256: bob256}
    # the copy handed out is not the state itself
    state.credentials.of("bob").clear()
    assert state.credentials.of("bob") == {SCRAM_SHA_256: bob256}
    state.apply(Record(ScramCredentialKey("bob", 9), None))  # an unknown mechanism: nothing
    assert state.credentials.users() == ["alice", "bob"]


def test_a_record_of_another_kind_is_refused_by_name() -> None:
    key = OffsetCommitKey("g", "t", 0)
    with pytest.raises(TypeError, match="not a security record: OffsetCommitKey"):
        SecurityState().apply(Record(key, OffsetCommitValue(1, -1, "", 0, None)))


def entry(pid: int, epoch: int, seq: int, partition: int = 0) -> t.Entry:
    return (TxnOffsetKey("g", "in", partition, pid, seq),
            TxnOffsetValue("tx", epoch, 10 + seq, -1, "", 1000 + seq))  # fmt: skip


def test_an_end_txn_ends_only_its_own_producer_id_and_epoch() -> None:
    mine, older_epoch, other_pid = entry(7, 1, 0), entry(7, 0, 1), entry(8, 1, 2)
    ended = t.ended_by_end_txn([mine, older_epoch, other_pid], 7, 1)
    assert ended == [mine]


def core() -> GroupCoordinator:
    catalog = TopicCatalog()
    catalog.put(TopicInfo("in", uuid.UUID(int=1), 2, ()))
    return GroupCoordinator(CoordinatorConfig(), catalog, lambda p: f"{p}-m")


def test_a_replayed_staging_brings_back_its_group_and_value() -> None:
    replayed = core()
    key, value = entry(7, 1, 0)
    other_key, other_value = entry(7, 1, 1, partition=1)
    replayed.replay(Record(key, value))
    replayed.replay(Record(other_key, other_value))
    replayed.finish_loading(0)
    assert "g" in replayed.state.groups and replayed.state.groups["g"].group_id == "g"
    assert replayed.txn_pending("g") == [(key, value), (other_key, other_value)]
    assert replayed.state.txn_pending.count() == 2


def test_pending_offsets_count_every_staging_of_every_group() -> None:
    pending = PendingOffsets()
    assert pending.count() == 0
    for pid, seq in ((7, 0), (7, 1), (8, 2)):
        key, value = entry(pid, 0, seq)
        pending.put(key, value)
    pending.put(TxnOffsetKey("h", "in", 0, 9, 3), TxnOffsetValue("tx2", 0, 1, -1, "", 0))
    assert pending.count() == 4
    pending.delete(TxnOffsetKey("h", "in", 0, 9, 3))
    assert pending.count() == 3


# -- staging and settling (txn_offsets.stage and settle) ----------------------------------------


def two_topics(**config: int) -> GroupCoordinator:
    catalog = TopicCatalog()
    catalog.put(TopicInfo("in", uuid.UUID(int=1), 2, ()))
    catalog.put(TopicInfo("other", uuid.UUID(int=2), 1, ()))
    return GroupCoordinator(CoordinatorConfig(**config), catalog, lambda p: f"{p}-m",
                            epoch_offset_ms=1_000_000)  # fmt: skip


def txn(parts: dict[str, tuple[t.TxnCommitPartition, ...]], epoch: int = 0,
        generation: int = -1) -> t.TxnOffsetCommit:
    topics = tuple(t.TxnCommitTopic(name, ps) for name, ps in parts.items())
    return t.TxnOffsetCommit("tx", "g", 7, epoch, generation, "", None, topics)


def part(partition: int, offset: int, metadata: str | None = "m",
         leader_epoch: int = 4) -> t.TxnCommitPartition:
    return t.TxnCommitPartition(partition, offset, leader_epoch, metadata)


def errors(result: object) -> dict[tuple[str, int], E]:
    return {(tp.name, p.partition): p.error for tp in result.topics  # type: ignore[attr-defined]
            for p in tp.partitions}  # fmt: skip


def test_staging_answers_per_partition_and_keeps_what_was_sent() -> None:
    c = two_topics(offset_metadata_max_bytes=5)
    fx, result = c.txn_stage(txn({
        "in": (part(0, 5, "12345"), part(1, 6, None, -1), part(2, 7)),
        "nope": (part(0, 8),),
        "other": (part(0, 9, "123456"),),
    }, epoch=3), 500)
    assert errors(result) == {
        ("in", 0): E.none, ("in", 1): E.none,
        ("in", 2): E.unknown_topic_or_partition, ("nope", 0): E.unknown_topic_or_partition,
        ("other", 0): E.offset_metadata_too_large,  # one byte over the limit
    }  # fmt: skip
    wall = 1_000_500
    assert c.txn_pending("g") == [
        (TxnOffsetKey("g", "in", 0, 7, 0), TxnOffsetValue("tx", 3, 5, 4, "12345", wall)),
        (TxnOffsetKey("g", "in", 1, 7, 1), TxnOffsetValue("tx", 3, 6, -1, "", wall)),
    ]
    assert fx.records == [Record(k, v) for k, v in c.txn_pending("g")]
    assert c.state.groups["g"].group_id == "g" and GroupCreated("g") in fx.events


def test_a_refused_staging_stages_nothing_and_creates_no_group() -> None:
    c = two_topics()
    # an unknown group with a generation: ILLEGAL_GENERATION for every known partition
    fx, result = c.txn_stage(txn({"in": (part(0, 5), part(3, 1))}, generation=2), 0)
    assert errors(result) == {("in", 0): E.illegal_generation,
                              ("in", 3): E.unknown_topic_or_partition}  # fmt: skip
    assert c.txn_pending("g") == [] and fx.records == [] and fx.events == []
    assert "g" not in c.state.groups
    # metadata of None is accepted whatever the limit (it is stored as "")
    fx, result = two_topics(offset_metadata_max_bytes=0).txn_stage(
        txn({"in": (part(0, 5, None),)}), 0)
    assert errors(result) == {("in", 0): E.none}


def staged(c: GroupCoordinator, now_ms: int, **parts: tuple[t.TxnCommitPartition, ...]) -> None:
    _, result = c.txn_stage(txn(parts), now_ms)
    assert set(errors(result).values()) == {E.none}


def test_settling_applies_commits_in_staging_order_and_supersedes_older_stagings() -> None:
    c = two_topics()
    staged(c, 1000, **{"in": (part(0, 5),)})  # seq 0
    staged(c, 2000, **{"in": (part(1, 6),), "other": (part(0, 7),)})  # seq 1, 2
    staged(c, 3000, **{"in": (part(0, 8, "late", 9),)})  # seq 3
    pending = dict(c.txn_pending("g"))
    newest = [(k, v) for k, v in pending.items() if k.seq == 3]
    oldest = [(k, v) for k, v in pending.items() if k.seq == 0]
    # given newest first: applied in staging order all the same, so both count
    fx, settled = c.txn_settle("g", newest + oldest, [])
    assert settled == 2
    assert c.committed_offsets("g") == {("in", 0): OffsetCommitValue(8, 9, "late", 1_003_000, None)}
    assert fx.events == [OffsetsCommitted("g", 2)]
    assert [r for r in fx.records if r.value is None] == [
        Record(oldest[0][0], None), Record(newest[0][0], None)]
    # the other partition's and the other topic's stagings are still pending
    assert sorted(k.seq for k, _ in c.txn_pending("g")) == [1, 2]
    # settling them again settles nothing
    fx, settled = c.txn_settle("g", newest + oldest, [])
    assert settled == 0 and fx.records == [] and fx.events == []


def test_a_commit_settles_the_older_stagings_of_its_partition_whatever_they_were() -> None:
    c = two_topics()
    staged(c, 1000, **{"in": (part(0, 5), part(1, 6))})  # seq 0, 1
    staged(c, 2000, **{"in": (part(0, 8),)})  # seq 2
    newer = [(k, v) for k, v in c.txn_pending("g") if k.seq == 2]
    _, settled = c.txn_settle("g", newer, [])  # only the newer is told committed
    assert settled == 2 and [k.seq for k, _ in c.txn_pending("g")] == [1]
    assert c.committed_offsets("g") == {("in", 0): OffsetCommitValue(8, 4, "m", 1_002_000, None)}


def test_an_entry_settled_already_does_not_stop_the_next() -> None:
    c = two_topics()
    staged(c, 1000, **{"in": (part(0, 5),)})
    first = c.txn_pending("g")
    c.txn_settle("g", first, [])
    staged(c, 2000, **{"in": (part(1, 6),)})
    second = c.txn_pending("g")
    fx, settled = c.txn_settle("g", first + second, [])
    assert settled == 1 and c.committed_offsets("g")[("in", 1)].offset == 6
    assert fx.events == [OffsetsCommitted("g", 1)]


def test_a_commit_later_than_the_staging_is_kept_and_an_equal_one_replaced() -> None:
    c = two_topics()
    staged(c, 1000, **{"in": (part(0, 5), part(1, 6))})
    # offsets committed meanwhile (as an OffsetCommit would leave them): partition 0 after the
    # staging, partition 1 in the same millisecond
    c.state.offsets.put("g", "in", 0, OffsetCommitValue(50, -1, "", 1_001_001, None))
    c.state.offsets.put("g", "in", 1, OffsetCommitValue(60, -1, "", 1_001_000, None))
    fx, settled = c.txn_settle("g", c.txn_pending("g"), [])
    assert settled == 2
    assert c.committed_offsets("g")[("in", 0)].offset == 50
    assert c.committed_offsets("g")[("in", 1)].offset == 6
    assert fx.events == [OffsetsCommitted("g", 1)]


def test_aborted_entries_are_tombstoned_without_an_offset() -> None:
    c = two_topics()
    staged(c, 1000, **{"in": (part(0, 5),)})
    fx, settled = c.txn_settle("g", [], c.txn_pending("g"))
    assert settled == 1 and fx.events == [] and c.committed_offsets("g") == {}
    assert fx.records == [Record(TxnOffsetKey("g", "in", 0, 7, 0), None)]


def test_deleting_a_staging_that_is_not_pending() -> None:
    pending = PendingOffsets()
    key, value = entry(7, 0, 0)
    assert not pending.delete(key)  # no such group
    pending.put(key, value)
    assert not pending.delete(TxnOffsetKey("g", "in", 1, 7, 5))  # the group, not the key
    assert pending.delete(key) and not pending.has_group("g")


def test_dropping_a_group_returns_its_keys_and_keeps_the_others() -> None:
    pending = PendingOffsets()
    key, value = entry(7, 0, 0)
    pending.put(key, value)
    pending.put(TxnOffsetKey("h", "in", 0, 9, 3), TxnOffsetValue("tx2", 0, 1, -1, "", 0))
    assert pending.drop_group("g") == [key] and pending.group_ids() == ["h"]
    assert pending.drop_group("g") == []


# -- the group-level check (txn_offsets.check): OffsetCommit's, with Kafka's one difference -------


def txn_for(generation: int, member: str, instance: str | None = None,
            epoch: int = 0) -> t.TxnOffsetCommit:
    parts = (t.TxnCommitTopic("orders", (t.TxnCommitPartition(0, 1, -1, None),)),)
    return t.TxnOffsetCommit("tx", "g", 7, epoch, generation, member, instance, parts)


def test_an_unknown_group_refuses_any_generation_but_none() -> None:
    h = Harness()
    assert h.core.txn_check(txn_for(0, "")) is E.illegal_generation
    assert h.core.txn_check(txn_for(-1, "")) is None


def test_a_member_is_checked_as_offset_commit_checks_it() -> None:
    h = Harness()
    ids, _, generation = h.stable_group(n=2)
    cases = [(generation, ids[0], None), (generation, "stranger", None),
             (generation + 1, ids[1], None), (generation, ids[1], "not-static"),
             (-1, "", None)]  # fmt: skip
    for gen, member, instance in cases:
        committed = h.commit("g", {("orders", 0): 1}, generation=gen, member_id=member,
                             instance=instance)  # fmt: skip
        expected = committed.topics[0].partitions[0].error
        got = h.core.txn_check(txn_for(gen, member, instance))
        assert (got or E.none) is expected, (gen, member, instance, got, expected)
    assert h.core.txn_check(txn_for(generation, "stranger")) is E.unknown_member_id
    assert h.core.txn_check(txn_for(generation + 1, ids[1])) is E.illegal_generation


def test_a_transactional_commit_is_accepted_while_the_group_completes_its_rebalance() -> None:
    h = Harness()
    ids, _, generation = h.stable_group(n=2)
    # both rejoin: a new generation, waiting for the leader's SyncGroup
    rts = [h.join("g", m) for m in ids]
    h.advance(1)
    assert all(h.reply(rt) is not None for rt in rts)
    group = h.core.state.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    current = group.generation_id
    refused = h.commit("g", {("orders", 0): 1}, generation=current, member_id=ids[0])
    assert refused.topics[0].partitions[0].error is E.rebalance_in_progress
    assert h.core.txn_check(txn_for(current, ids[0])) is None  # Kafka's isTransactional
    assert h.core.txn_check(txn_for(current, "stranger")) is E.unknown_member_id
    assert h.core.txn_check(txn_for(generation, ids[0])) is E.illegal_generation
    # a member joining starts another rebalance: accepted there, as OffsetCommit is (Kafka)
    h.join_dynamic("g", client_id="late")
    assert group.state is GroupState.PREPARING_REBALANCE
    assert h.core.txn_check(txn_for(current, ids[0])) is None


def test_a_zombie_epoch_is_refused_once_a_newer_one_staged() -> None:
    h = Harness()
    _, result = h.core.txn_stage(txn_for(-1, "", epoch=3), h.now)
    assert result.topics[0].partitions[0].error is E.none
    assert h.core.txn_check(txn_for(-1, "", epoch=2)) is E.invalid_producer_epoch
    assert h.core.txn_check(txn_for(-1, "", epoch=3)) is None
    other_pid = t.TxnOffsetCommit("tx2", "g", 8, 0, -1, "", None, ())
    assert h.core.txn_check(other_pid) is None
