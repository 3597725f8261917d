"""The KIP-1101 trigger on classic groups (coordinator.core.topic_watch), driven with a fake clock.

A Stable or CompletingRebalance group whose metadata hash no longer matches its generation's goes
to PreparingRebalance; groups that do not read the changed topic are not touched; a restart
compares the stored hash and rebalances only when a topic changed meanwhile."""

from __future__ import annotations

import uuid

import mmh3
import pytest

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.events import (
    TOPIC_CAUSES,
    GroupMetadataHashChanged,
    OffsetsDeleted,
    RebalanceCause,
    RebalanceStarted,
)
from coordinator.core.messages import ErrorCode
from coordinator.core.rebalance import TOPIC_DELETED_LABEL_MS
from coordinator.core.record_codec import decode_record, encode_record
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    Record,
    TopicKey,
)
from coordinator.core.topichash import group_hash_bytes, topic_hash_bytes
from coordinator.core.topics import TopicCatalog, TopicInfo
from tests.support.fakeclock import EPOCH, Harness, catalog, subscription

E = ErrorCode


def grown(h: Harness, name: str, partitions: int) -> TopicInfo:
    info = h.catalog.get(name)
    assert info is not None
    return info.with_partitions(partitions)


def change(h: Harness, name: str, info: TopicInfo | None) -> None:
    h.absorb(h.core.topic_changed(name, info, h.now))


def uncached_group_hash(*topics: TopicInfo) -> int:
    """The group hash computed from the given TopicInfos alone: the byte layouts (pinned by
    tests/core/test_topichash.py) hashed with mmh3 directly, never through the coordinator's cache
    or
    catalog, so a stale or wrongly keyed cache entry cannot agree with it by construction."""

    def murmur3(data: bytes) -> int:
        return int(mmh3.hash64(data, 0, signed=True)[0])

    return murmur3(group_hash_bytes({t.name: murmur3(topic_hash_bytes(t)) for t in topics}))


def rebalance(h: Harness, group: str) -> int:
    """Every member rejoins and syncs; -> the new generation."""
    ids = [m.member_id for m in h.core.group(group).members]  # type: ignore[union-attr]
    rts = [h.join(group, m) for m in ids]
    generation = h.reply(rts[0]).generation_id
    leader = h.reply(rts[0]).leader
    for m in ids:
        h.sync(group, m, generation, dict.fromkeys(ids, b"a") if m == leader else None)
    assert h.core.group(group).state == "Stable"  # type: ignore[union-attr]
    return int(generation)


def metadata_rebalances(h: Harness) -> list[RebalanceStarted]:
    return [e for e in h.events_of(RebalanceStarted) if e.cause in TOPIC_CAUSES]


def causes(h: Harness) -> list[RebalanceCause]:
    return [e.cause for e in h.events_of(RebalanceStarted)]


def test_partitions_added_send_a_stable_group_into_a_rebalance() -> None:
    h = Harness()
    ids, _, generation = h.stable_group("g", 2)
    change(h, "orders", grown(h, "orders", 8))
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert h.events_of(GroupMetadataHashChanged) == [
        GroupMetadataHashChanged("g", ("orders",), h.now, RebalanceCause.PARTITIONS_ADDED)
    ]
    assert causes(h)[-1] is RebalanceCause.PARTITIONS_ADDED
    assert len(metadata_rebalances(h)) == 1
    assert h.heartbeat("g", ids[0], generation).error is E.rebalance_in_progress
    assert h.core.topic_hashes.rebalances == 1
    # The topic itself is persisted (the runtime releases nothing before it is durable).
    assert h.records[-1].key == TopicKey("orders")


def test_the_next_generation_is_formed_with_the_new_hash() -> None:
    h = Harness()
    ids, leader, generation = h.stable_group("g", 2)
    old_hash = h.core.state.groups["g"].metadata_hash
    orders = h.catalog.get("orders")
    assert orders is not None and old_hash == uncached_group_hash(orders)
    orders8 = grown(h, "orders", 8)
    change(h, "orders", orders8)
    rts = [h.join("g", m) for m in ids]
    assert all(h.reply(rt).error is E.none for rt in rts)
    generation2 = h.reply(rts[0]).generation_id
    assert generation2 == generation + 1
    group = h.core.state.groups["g"]
    assert group.metadata_hash not in (0, old_hash)
    assert group.metadata_hash == uncached_group_hash(orders8)
    leader = h.reply(rts[0]).leader
    for m in ids:
        h.sync("g", m, generation2, dict.fromkeys(ids, b"a") if m == leader else None)
    assert h.heartbeat("g", ids[0], generation2).error is E.none
    value = h.records[-1].value
    assert isinstance(value, GroupMetadataValue) and value.metadata_hash == group.metadata_hash
    assert len(metadata_rebalances(h)) == 1  # the change is handled once


def test_an_unrelated_topic_change_does_not_rebalance() -> None:
    h = Harness()
    ids, _, generation = h.stable_group("g", 2)
    before = (h.core.topic_hashes.hits, h.core.topic_hashes.misses)
    change(h, "payments", grown(h, "payments", 16))
    change(h, "brand-new", TopicInfo("brand-new", uuid.UUID(int=77), 3))
    assert not metadata_rebalances(h)
    assert h.heartbeat("g", ids[0], generation).error is E.none
    # Nobody reads those topics: no group hash was computed at all.
    assert (h.core.topic_hashes.hits, h.core.topic_hashes.misses) == before


def test_the_same_metadata_again_is_a_no_op() -> None:
    h = Harness()
    h.stable_group("g", 2)
    fx = h.core.topic_changed("orders", h.catalog.get("orders"), h.now)
    assert not fx.records and not fx.events and not fx.replies


def test_a_rack_change_rebalances_but_the_same_racks_reordered_do_not() -> None:
    h = Harness()
    h.stable_group("g", 2)
    orders = h.catalog.get("orders")
    assert orders is not None
    racked = TopicInfo("orders", orders.topic_id, 4, (("a", "b"),) * 4)
    change(h, "orders", racked)  # racks appeared: a real change
    assert len(metadata_rebalances(h)) == 1
    assert causes(h)[-1] is RebalanceCause.RACKS_CHANGED
    h2 = Harness()
    h2.catalog.put(racked)
    h2.stable_group("g", 2)
    change(h2, "orders", TopicInfo("orders", orders.topic_id, 4, (("b", "a"),) * 4))
    assert not metadata_rebalances(h2)  # a different TopicInfo, the same hash


def test_completing_rebalance_group_answers_parked_syncs_and_rejoins() -> None:
    h = Harness()
    rts = [h.join_dynamic("g", client_id=f"c{i}")[0] for i in range(2)]
    for _ in range(5):  # the initial delay extends while members arrive (docs/protocol.md §5.5)
        h.advance(h.config.initial_rebalance_delay_ms)
    results = [h.reply(rt) for rt in rts]
    follower = next(r.member_id for r in results if r.member_id != r.leader)
    sync_rt = h.sync("g", follower, results[0].generation_id)
    assert h.reply(sync_rt) is None  # parked, waiting for the leader
    change(h, "orders", grown(h, "orders", 6))
    assert h.reply(sync_rt).error is E.rebalance_in_progress
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]


def test_a_group_already_rebalancing_is_left_alone() -> None:
    h = Harness()
    ids, _, _generation = h.stable_group("g", 2)
    h.join("g", ids[0])  # the member rejoins: PreparingRebalance
    events = len(h.events)
    change(h, "orders", grown(h, "orders", 6))
    assert not h.events_of(GroupMetadataHashChanged)
    assert len(h.events) == events


def test_deleting_a_subscribed_topic_drops_offsets_and_leaves_the_rebalance_to_members() -> None:
    h = Harness()
    ids, _, generation = h.stable_group("g", 2)
    h.commit(
        "g",
        {("orders", 0): 5, ("orders", 1): 6, ("payments", 0): 7},
        generation=generation,
        member_id=ids[0],
    )
    h.commit("other", {("orders", 3): 9})
    change(h, "orders", None)
    # No forced rebalance: a leader assigning from its stale cache would hand the deleted
    # partitions out again (issue 27). The members rejoin once they see the topic gone.
    assert not metadata_rebalances(h)
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    assert h.heartbeat("g", ids[0], generation).error is E.none
    assert h.events_of(GroupMetadataHashChanged) == [
        GroupMetadataHashChanged("g", ("orders",), h.now, RebalanceCause.TOPIC_DELETED)
    ]
    assert "orders" not in h.catalog
    tombstones = {
        r.key for r in h.records if r.value is None and isinstance(r.key, OffsetCommitKey)
    }
    assert tombstones == {
        OffsetCommitKey("g", "orders", 0),
        OffsetCommitKey("g", "orders", 1),
        OffsetCommitKey("other", "orders", 3),
    }
    # (each event counts what it deleted: metrics and the deletion's WARNING line add them up)
    assert sorted(h.events_of(OffsetsDeleted), key=lambda e: e.group_id) == [
        OffsetsDeleted("g", 2),
        OffsetsDeleted("other", 1),
    ]
    assert h.core.committed_offsets("g") == {
        ("payments", 0): h.core.committed_offsets("g")[("payments", 0)]
    }
    assert Record(TopicKey("orders"), None) in h.records


def test_creating_a_subscribed_topic_that_did_not_exist_rebalances() -> None:
    h = Harness()
    protocols = (("range", subscription("orders", "later")),)
    h.stable_group("g", 2, protocols=protocols)
    change(h, "later", TopicInfo("later", uuid.UUID(int=99), 2))
    assert len(metadata_rebalances(h)) == 1
    assert causes(h)[-1] is RebalanceCause.TOPIC_CREATED


def test_a_deletion_is_recorded_in_the_stable_groups_hash_so_a_restart_does_not_rebalance() -> None:
    h = Harness()
    protocols = (("range", subscription("orders", "payments")),)
    h.stable_group("g", 2, protocols=protocols)
    before = h.core.state.groups["g"].metadata_hash
    change(h, "payments", None)
    group = h.core.state.groups["g"]
    orders = h.catalog.get("orders")
    assert orders is not None
    expected = uncached_group_hash(orders)  # the topic that is left
    assert group.metadata_hash == expected != before
    value = h.records[-1].value
    assert isinstance(value, GroupMetadataValue) and value.metadata_hash == expected
    # A restart compares the stored hash with the current one: nothing to do.
    assert not h.core.topics_loaded(h.now).events


def test_the_members_rejoin_after_a_deletion_is_labelled_topic_deleted_once() -> None:
    h = Harness()
    ids, leader, generation = h.stable_group("g", 2)
    change(h, "orders", None)
    h.advance(1_000)
    rts = [h.join("g", m) for m in ids]  # they saw the topic gone in their metadata: rejoin
    assert causes(h)[-1] is RebalanceCause.TOPIC_DELETED
    generation2 = h.reply(rts[0]).generation_id
    assert generation2 == generation + 1
    leader = h.reply(rts[0]).leader
    for m in ids:
        h.sync("g", m, generation2, dict.fromkeys(ids, b"a") if m == leader else None)
    h.join("g", leader)  # a later rejoin is the members' own business again
    assert causes(h)[-1] is RebalanceCause.LEADER_REJOINED
    assert causes(h).count(RebalanceCause.TOPIC_DELETED) == 1


def test_a_rejoin_long_after_a_deletion_keeps_its_own_cause() -> None:
    h = Harness()
    ids, leader, generation = h.stable_group("g", 2)
    change(h, "orders", None)
    for _ in range(TOPIC_DELETED_LABEL_MS // 5_000 + 1):  # heartbeats keep the sessions alive
        h.advance(5_000)
        for m in ids:
            assert h.heartbeat("g", m, generation).error is E.none
    h.join("g", leader)
    assert causes(h)[-1] is RebalanceCause.LEADER_REJOINED


def test_a_topic_recreated_under_its_name_rebalances_once_as_recreated() -> None:
    h = Harness()
    ids, _, generation = h.stable_group("g", 2)
    old = h.catalog.get("orders")
    assert old is not None
    change(h, "orders", None)
    change(h, "orders", TopicInfo("orders", uuid.UUID(int=4242), old.partitions))
    assert causes(h)[-1:] == [RebalanceCause.TOPIC_RECREATED]
    assert len(metadata_rebalances(h)) == 1
    assert h.heartbeat("g", ids[0], generation).error is E.rebalance_in_progress


def test_a_new_id_under_a_known_name_is_a_recreation() -> None:
    h = Harness()
    h.stable_group("g", 2)
    old = h.catalog.get("orders")
    assert old is not None
    change(h, "orders", TopicInfo("orders", uuid.UUID(int=4243), old.partitions))
    assert causes(h)[-1:] == [RebalanceCause.TOPIC_RECREATED]


def test_only_consumer_groups_have_a_hash() -> None:
    h = Harness()
    h.stable_group("c", 2, protocol_type="connect", protocols=(("default", b"\x00\x01junk"),))
    assert h.core.state.groups["c"].metadata_hash == 0
    change(h, "orders", grown(h, "orders", 8))
    assert not metadata_rebalances(h)


def test_unparseable_subscriptions_have_no_hash() -> None:
    h = Harness()
    h.stable_group("g", 2, protocols=(("range", b"\x00\x00\xff\xff\xff\xff"),))
    assert h.core.state.groups["g"].subscribed_topics is None
    change(h, "orders", grown(h, "orders", 8))
    assert not metadata_rebalances(h)


def test_a_topic_change_visits_only_the_groups_that_read_it() -> None:
    h = Harness(topics=[("orders", 4)] + [(f"t{i}", 2) for i in range(50)])
    for i in range(50):
        h.stable_group(f"g{i}", 1, protocols=(("range", subscription(f"t{i}")),))
    h.stable_group("reader", 1)
    cache = h.core.topic_hashes
    lookups = cache.hits + cache.misses
    change(h, "orders", grown(h, "orders", 8))
    assert cache.hits + cache.misses == lookups + 1  # one group, one topic
    assert [e.group_id for e in h.events_of(GroupMetadataHashChanged)] == ["reader"]


def test_index_follows_membership_and_the_cache_evicts() -> None:
    h = Harness()
    ids, _, _generation = h.stable_group("g", 2)
    cache = h.core.topic_hashes
    assert cache.readers("orders") == {"g"} and "orders" in cache
    h.leave("g", (ids[0], None), (ids[1], None))  # the group empties
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]
    assert not cache.readers("orders") and cache.entries == 0
    h.delete_groups("g")
    assert not cache.readers("orders")


def test_subscription_change_moves_the_group_in_the_index() -> None:
    h = Harness()
    ids, _, _generation = h.stable_group("g", 1)
    h.join("g", ids[0], protocols=(("range", subscription("payments")),))
    h.advance(1)
    cache = h.core.topic_hashes
    assert cache.readers("payments") == {"g"} and not cache.readers("orders")
    change(h, "orders", grown(h, "orders", 8))
    assert not metadata_rebalances(h)


# -- restart --------------------------------------------------------------------------------------


def restarted(h: Harness, topics: TopicCatalog | None = None) -> tuple[GroupCoordinator, list]:
    """Replay h's records (through the byte codec) into a new core, as a restart does."""
    core = GroupCoordinator(CoordinatorConfig(), topics or catalog(), h.new_id, EPOCH)
    for record in h.records:
        key, value = encode_record(record)
        decoded = decode_record(key, value)
        assert decoded is not None
        core.replay(decoded)
    core.finish_loading(h.now)
    fx = core.topics_loaded(h.now)
    return core, fx.events


def test_a_restart_does_not_rebalance() -> None:
    h = Harness()
    h.stable_group("g", 2)
    change(h, "orders", grown(h, "orders", 8))  # persisted topic record
    rebalance(h, "g")
    core, events = restarted(h)
    assert not events
    assert core.group("g").state == "Stable"  # type: ignore[union-attr]
    assert core.topics.partition_count("orders") == 8  # the log wins over the declaration
    assert core.topic_hashes.readers("orders") == {"g"}


def test_a_topic_changed_while_down_rebalances_after_the_restart() -> None:
    h = Harness()
    h.stable_group("g", 2)
    later = catalog()
    later.put(grown(h, "orders", 12))  # e.g. upstream metadata in sidecar mode
    core, events = restarted(h, later)
    assert [type(e) for e in events] == [GroupMetadataHashChanged, RebalanceStarted]
    assert core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]


def test_a_stored_hash_of_zero_is_adopted_without_a_rebalance() -> None:
    h = Harness()
    h.stable_group("g", 2)
    for i, r in enumerate(h.records):  # as written before KIP-1101: no hash in the record
        if isinstance(r.value, GroupMetadataValue):
            v = r.value
            h.records[i] = Record(
                r.key,
                GroupMetadataValue(
                    v.protocol_type,
                    v.generation_id,
                    v.protocol_name,
                    v.leader,
                    v.current_state_timestamp_ms,
                    v.members,
                    0,
                ),
            )
    core, events = restarted(h)
    assert not events
    assert core.state.groups["g"].metadata_hash != 0


def test_declared_topics_reconcile_with_the_log() -> None:
    h = Harness()
    h.stable_group("g", 2)
    change(h, "orders", grown(h, "orders", 8))  # an admin grew it
    change(h, "payments", None)  # and deleted this one
    rebalance(h, "g")
    core, events = restarted(h)
    assert not events
    fx = core.declare_topics(list(catalog()), h.now)
    assert core.topics.partition_count("orders") == 8  # kept: partitions never shrink
    assert core.topics.partition_count("payments") == 2  # declared again: re-created
    assert core.topics.partition_count("audit") == 1
    written = {r.key for r in fx.records}
    assert written == {TopicKey("payments"), TopicKey("audit")}
    bigger = [TopicInfo("orders", uuid.UUID(int=1), 10)]
    fx = core.declare_topics(bigger, h.now)
    assert core.topics.partition_count("orders") == 10
    assert [type(e) for e in fx.events] == [GroupMetadataHashChanged, RebalanceStarted]


def test_topic_records_replay_into_the_catalog() -> None:
    h = Harness()
    info = TopicInfo("racked", uuid.UUID(int=5), 2, (("r1",), ("r2", "r1")))
    change(h, "racked", info)
    core, _ = restarted(h)
    assert core.topics.get("racked") == info
    assert core.topics.name_of(info.topic_id) == "racked"
    assert GroupMetadataKey("g") not in {r.key for r in h.records}


# -- §10.5: the subscription of every ConsumerProtocolSubscription version ------------------------


def consumer_subscription(version: int, topics: list[str]) -> bytes:
    """Full v0-v3 layouts: v1 adds owned partitions, v2 the generation, v3 the rack."""
    import struct

    out = subscription(*topics, version=version, user_data=b"ud")
    if version >= 1:
        out += struct.pack(">i", 1) + struct.pack(">h", 6) + b"orders" + struct.pack(">ii", 1, 3)
    if version >= 2:
        out += struct.pack(">i", 7)
    if version >= 3:
        out += struct.pack(">h", 4) + b"rack"
    return out


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 99])
def test_every_subscription_version_gives_its_topics(version: int) -> None:
    from protocol.consumer import subscription_topics as parse_subscription_topics

    data = consumer_subscription(min(version, 3), ["orders", "payments"])
    data = data[:0] + version.to_bytes(2, "big", signed=True) + data[2:]
    assert parse_subscription_topics(data) == ["orders", "payments"]
    h = Harness()
    h.stable_group("g", 1, protocols=(("range", data),))
    assert h.core.state.groups["g"].hashed_topics == {"orders", "payments"}


def test_malformed_subscriptions_are_unknown_as_in_kafka() -> None:
    import struct

    from protocol.consumer import subscription_topics as parse_subscription_topics

    good = subscription("orders")
    assert parse_subscription_topics(good[:-2]) is None  # short buffer
    assert parse_subscription_topics(struct.pack(">hi", 0, -1)) is None  # null topic array
    assert parse_subscription_topics(struct.pack(">hih", 0, 1, -1)) is None  # null topic name
    # Any negative user data length is null to Kafka's generated reader: still parseable.
    assert parse_subscription_topics(struct.pack(">hii", 0, 0, -5)) == []


def test_an_uncertain_deletion_keeps_the_offsets_until_it_is_certain() -> None:
    """A sidecar's upstream stopped listing a topic (issue 24): the catalog and the groups see it
    gone, but no offset is deleted; `delete_topic_offsets` deletes them once it is certain, and a
    topic back under its own id has them all."""
    h = Harness()
    info = h.catalog.get("orders")
    assert info is not None
    h.commit("g", {("orders", 0): 5, ("orders", 1): 6})
    h.commit("other", {("orders", 3): 9, ("payments", 0): 1})
    h.absorb(h.core.topic_changed("orders", None, h.now, keep_offsets=True))
    assert "orders" not in h.catalog
    assert not [r for r in h.records if isinstance(r.key, OffsetCommitKey) and r.value is None]
    assert h.core.offset_topics() == {"orders", "payments"}
    change(h, "orders", info)  # back under its own id: nothing was lost
    assert h.core.committed_offsets("g").keys() == {("orders", 0), ("orders", 1)}
    h.absorb(h.core.topic_changed("orders", None, h.now, keep_offsets=True))
    h.absorb(h.core.delete_topic_offsets("orders"))  # now certain
    assert sorted(h.events_of(OffsetsDeleted), key=lambda e: e.group_id) == [
        OffsetsDeleted("g", 2),
        OffsetsDeleted("other", 1),
    ]
    assert h.core.offset_topics() == {"payments"}
    assert h.core.committed_offsets("g") == {}
