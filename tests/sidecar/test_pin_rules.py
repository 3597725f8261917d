"""The fleet's pure rules without an upstream (fast: `make mutation` runs them against each mutant
of coordinator/sidecar/state_topic.py and cluster_view.py): where a group's state lives, what a
claim encodes, which claim owns a partition on replay and which one fences its writer, who wrote
a record, what a replayed partition holds, how durable a fleet topic is made, and when a topic
absent upstream has surely been deleted. The same rules are held end to end against tansu and
Kafka in test_fleet_state.py and test_topic_safety.py; these pin each edge of them."""

from __future__ import annotations

import logging
import struct
import uuid
from types import SimpleNamespace

import pytest

from coordinator.core.record_codec import encode_record
from coordinator.core.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    TopicKey,
    TopicValue,
)
from coordinator.core.topics import TopicInfo
from coordinator.sidecar.cluster_view import _new_id, _no_id, complete_refresh, offsets_deletable
from coordinator.sidecar.placement import assign_partitions
from coordinator.sidecar.state_topic import (
    CLAIM_PREFIX,
    EPOCH_HEADER,
    OWNER_HEADER,
    Claim,
    Replay,
    durability,
    fences,
    headers,
    java_hash,
    partition_for,
    takes_partition,
    writer_of,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("a", 97),
    ("ab", 97 * 31 + 98),
    ("hello", 99162322),  # "hello".hashCode() in Java
    ("polygenelubricants", -2147483648),  # Java's Integer.MIN_VALUE, the famous one
    ("group-ö€", None),  # a non-ASCII name: UTF-16 code units, checked below by hand
    ("😀", None),  # a surrogate pair: two code units
])
def test_java_hash_is_strings_hash_code(text: str, expected: int | None) -> None:
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[i:i + 2], "big")) % (1 << 32)
    by_hand = h - (1 << 32) if h >= 1 << 31 else h
    assert java_hash(text) == by_hand
    if expected is not None:
        assert java_hash(text) == expected


def test_a_hash_with_the_top_bit_set_is_negative_and_partition_for_masks_it() -> None:
    # "polygenelubricants" hashes to -2**31: abs() would overflow in Java, Kafka masks instead.
    assert java_hash("polygenelubricants") < 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("polygenelubricants", 7) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("hello", 1) == 0
    # a negative hash other than MIN_VALUE: the low 31 bits, as Utils.abs keeps them
    negative = "consumer-group-100"
    assert java_hash(negative) < 0
    assert partition_for(negative, 50) == (java_hash(negative) & 0x7FFFFFFF) % 50


def test_a_claim_round_trips_and_its_key_is_per_epoch() -> None:
    claim = Claim(7, "member-a", "a:9094")
    assert claim.key() == CLAIM_PREFIX + b"7"
    assert Claim(12, "b", "").key() == CLAIM_PREFIX + b"12"
    assert Claim.decode(claim.value()) == claim
    # a claim written before addresses were kept decodes with an empty one
    assert Claim.decode(b'{"epoch": "3", "owner": "old"}') == Claim(3, "old", "")


def test_only_a_higher_epoch_takes_the_partition_on_replay() -> None:
    first = Claim(3, "A", "a:1")
    assert takes_partition(first, None)
    assert takes_partition(Claim(4, "B", "b:1"), first)
    assert not takes_partition(Claim(3, "B", "b:1"), first)  # equal epoch: the first stays
    assert not takes_partition(Claim(3, "A", "a:1"), first)
    assert not takes_partition(Claim(2, "B", "b:1"), first)


def test_a_higher_epoch_or_the_same_epoch_by_another_member_fences() -> None:
    mine = Claim(3, "A", "a:1")
    assert fences(Claim(4, "A", "a:1"), mine)  # our own later claim still ends this one
    assert fences(Claim(4, "B", "b:1"), mine)
    assert fences(Claim(3, "B", "b:1"), mine)
    assert not fences(Claim(3, "A", "a:2"), mine)  # our own claim again
    assert not fences(Claim(2, "B", "b:1"), mine)  # an older claim read late
    assert not fences(Claim(2, "A", "a:1"), mine)


def test_writer_of_reads_the_claim_headers() -> None:
    claim = Claim(5, "A", "a:1")
    assert headers(claim) == [(EPOCH_HEADER, struct.pack(">q", 5)), (OWNER_HEADER, b"A")]
    assert writer_of(headers(claim)) == (5, "A")
    assert writer_of(list(reversed(headers(claim)))) == (5, "A")
    assert writer_of([("other", b"x"), *headers(claim)]) == (5, "A")
    assert writer_of(headers(Claim(-1, "é", ""))) == (-1, "é")
    assert writer_of(None) is None
    assert writer_of([]) is None
    assert writer_of([(EPOCH_HEADER, struct.pack(">q", 5))]) is None  # no owner
    assert writer_of([(OWNER_HEADER, b"A")]) is None  # no epoch
    assert writer_of([(EPOCH_HEADER, b"\x00" * 4), (OWNER_HEADER, b"A")]) is None  # wrong size
    bad_owner = [(OWNER_HEADER, b"\xff"), (EPOCH_HEADER, struct.pack(">q", 1))]
    assert writer_of(bad_owner) == (1, "\ufffd")


def commit(offset: int, group: str = "g") -> tuple[bytes, bytes | None]:
    key, value = encode_record(Record(OffsetCommitKey(group, "t", 0),
                                      OffsetCommitValue(offset, -1, "", 1, None)))
    return key, value


def test_replay_keeps_the_writes_of_the_current_claim_in_last_write_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replay, a, b = Replay(), Claim(1, "A", "a:1"), Claim(2, "B", "b:1")
    replay.feed(None, b"ignored", headers(a))  # a keyless record means nothing
    k1, v1 = commit(1, "g1")
    replay.feed(k1, v1, headers(a))  # before any claim: foreign
    assert replay.claim is None and replay.dirty == {k1} and not replay.latest
    replay.feed(a.key(), a.value(), [], 100)
    assert (replay.claim, replay.claim_ms) == (a, 100)
    replay.feed(k1, v1, headers(a))
    k2, v2 = commit(2, "g2")
    replay.feed(k2, v2, headers(a))
    k1b, v1b = commit(3, "g1")
    replay.feed(k1b, v1b, headers(a))  # g1 written again: it moves after g2
    assert k1 == k1b and replay.dirty == set()
    assert list(replay.latest) == [k2, k1] and replay.latest[k1] == v1b
    replay.feed(a.key(), None, [], 200)  # a claim tombstone changes nothing
    with caplog.at_level(logging.WARNING, "groupcoord.fleet.state"):
        replay.feed(CLAIM_PREFIX + b"9", b"not json", [], 300)  # nor an undecodable claim
    assert [r.getMessage() for r in caplog.records] == ["ignoring an undecodable claim record"]
    replay.feed(CLAIM_PREFIX + b"9", b'{"owner": "x"}', [], 300)
    assert (replay.claim, replay.claim_ms) == (a, 100)
    replay.feed(b.key(), b.value(), [], 400)
    replay.feed(k2, None, headers(a))  # A's write after B's claim: foreign, g2 stays as it was
    assert replay.claim == b and replay.claim_ms == 400
    assert replay.dirty == {k2} and replay.latest[k2] == v2
    replay.feed(k2, None, headers(b))  # B deletes g2: valid again, the tombstone kept
    assert replay.dirty == set() and list(replay.latest) == [k1, k2] and replay.latest[k2] is None
    replay.feed(Claim(2, "C", "c:1").key(), Claim(2, "C", "c:1").value(), [], 500)
    assert (replay.claim, replay.claim_ms) == (b, 400)  # an equal epoch does not take it
    replay.feed(Claim(3, "C", "c:1").key(), Claim(3, "C", "c:1").value(), [])
    assert replay.claim_ms == 0  # a claim read without its timestamp


def test_replay_records_drop_tombstones_and_topics() -> None:
    replay, a = Replay(), Claim(1, "A", "a:1")
    replay.feed(a.key(), a.value(), [])
    k1, v1 = commit(5, "g1")
    k2, _ = commit(6, "g2")
    topic = encode_record(Record(TopicKey("t"), TopicValue(b"\x01" * 16, 3, ())))
    k3, v3 = commit(7, "g3")
    for key, value in ((k2, None), topic, (k1, v1), (b"\x00\x63junk", b"junk"), (k3, v3)):
        replay.feed(key, value, headers(a))
    records = replay.records()
    assert [(r.key, r.value.offset) for r in records] == [  # type: ignore[union-attr]
        (OffsetCommitKey("g1", "t", 0), 5), (OffsetCommitKey("g3", "t", 0), 7)]


@pytest.mark.parametrize(("factor", "min_isr", "brokers", "expected"), [
    (0, 0, 1, (1, 0)),
    (0, 0, 2, (2, 0)),
    (0, 0, 3, (3, 2)),
    (0, 0, 5, (3, 2)),
    (-1, -1, 0, (1, 0)),  # a cluster naming no broker: one replica all the same
    (2, 0, 5, (2, 0)),
    (3, 0, 1, (3, 2)),  # explicit factors are kept, even above the brokers
    (1, 1, 3, (1, 1)),
    (0, 1, 3, (3, 1)),
    (4, 3, 5, (4, 3)),
])
def test_fleet_topic_durability(factor: int, min_isr: int, brokers: int,
                                expected: tuple[int, int]) -> None:
    assert durability(factor, min_isr, brokers) == expected


def test_a_refresh_proves_absence_only_when_full_and_naming_a_broker() -> None:
    with_broker = SimpleNamespace(brokers=[object()])
    without = SimpleNamespace(brokers=[])
    assert complete_refresh(with_broker, True)
    assert not complete_refresh(with_broker, False)
    assert not complete_refresh(without, True)
    assert not complete_refresh(without, False)
    assert complete_refresh(with_broker, True) is True
    assert complete_refresh(without, True) is False


def test_offsets_go_after_two_complete_refreshes_over_the_whole_delay() -> None:
    assert offsets_deletable(2, 1000, 1000)
    assert offsets_deletable(3, 5000, 1000)
    assert not offsets_deletable(1, 10_000, 1000)  # one answer is never enough
    assert not offsets_deletable(2, 999, 1000)
    assert not offsets_deletable(5, 999.5, 1000)
    assert offsets_deletable(2, 0, 0)


def test_a_new_topic_id_means_a_new_topic_only_when_both_ids_are_known() -> None:
    one, two, zero = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=0)
    assert _new_id(TopicInfo("t", one, 1), TopicInfo("t", two, 1))
    assert not _new_id(TopicInfo("t", one, 1), TopicInfo("t", one, 3))
    assert not _new_id(TopicInfo("t", zero, 1), TopicInfo("t", two, 1))  # unknown before
    assert not _new_id(TopicInfo("t", one, 1), TopicInfo("t", zero, 1))  # unknown now
    assert _no_id(SimpleNamespace(name="t"))
    assert not _no_id(SimpleNamespace(name="t", topic_id=zero))
    assert not _no_id(SimpleNamespace(name="t", topic_id=one))


def test_groups_are_placed_as_kafka_places_them_on_consumer_offsets() -> None:
    # Values printed by Java 17's String.hashCode and (h & 0x7fffffff) % 50.
    vectors = {
        "": (0, 0),
        "a": (97, 47),
        "group": (98629247, 47),
        "my-consumer-group": (1513705513, 13),
        "Ünïcødé-群组": (-1040955690, 8),
        "groupcoord-fleet-test": (-1886267384, 14),
    }
    for text, (h, p) in vectors.items():
        assert (java_hash(text), partition_for(text, 50)) == (h, p), text


def test_the_assignment_is_sticky_and_balanced() -> None:
    parts = list(range(50))
    first = assign_partitions(parts, {"m1": "a", "m2": "b"}, {})
    assert sorted(len(v) for v in first.values()) == [25, 25]
    previous = {p: {"m1": "a", "m2": "b"}[m] for m, ps in first.items() for p in ps}
    # A third member joins (new aiokafka member ids, same processes): each keeps 17 at most.
    second = assign_partitions(parts, {"x1": "a", "x2": "b", "x3": "c"}, previous)
    assert sorted(len(v) for v in second.values()) == [16, 17, 17]
    moved = [p for m, ps in second.items() for p in ps if previous[p] != {"x1": "a", "x2": "b",
                                                                            "x3": "c"}[m]]
    assert len(moved) == 16  # only the newcomer's share moved
    assert sorted(p for ps in second.values() for p in ps) == parts


def test_the_assignment_keeps_up_to_its_share_and_gives_the_rest_to_the_fewest() -> None:
    assert assign_partitions([0, 1], {}, {0: "a"}) == {}
    # b held 0-3, but its share of 5 over 2 members is 3: 3 moves to a, the fewest
    plan = assign_partitions([4, 3, 2, 1, 0], {"mb": "b", "ma": "a"},
                             {0: "b", 1: "b", 2: "b", 3: "b"})  # fmt: skip
    assert plan == {"mb": [0, 1, 2], "ma": [3, 4]}
    # free partitions go to the fewest, ties to the lower stable id; a stale owner is ignored
    plan = assign_partitions([0, 1, 2, 3], {"x": "s2", "y": "s1", "z": "s3"},
                             {0: "gone", 3: "s3"})  # fmt: skip
    assert plan == {"x": [1], "y": [0, 2], "z": [3]}
    # exactly the share: kept
    assert assign_partitions([0, 1], {"m": "a", "n": "b"}, {0: "a", 1: "a"}) == {"m": [0],
                                                                                "n": [1]}
    assert assign_partitions([0, 1, 2, 3], {"m": "a", "n": "b"}, {0: "a", 1: "a"}) == {
        "m": [0, 1], "n": [2, 3]}
