"""Which ConsumerGroupHeartbeats the shell may hold back (coordinator.core.consumer.hold): a
plain beat of a member waiting on others (partitions not released yet, or its group's paced
target), never one that carries something new; a release or a new target wakes it. Fake clock;
the holding itself is coordinator.serve.beat_hold's (tests/serve/test_beat_hold.py)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from coordinator.core.consumer import ConsumerGroupConfig, ConsumerGroupHeartbeat, MemberState
from coordinator.core.consumer.hold import follow_up, hold_deadline_ms, holdable, woken_groups
from coordinator.core.consumer.messages import HeartbeatResponse
from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.messages import ErrorCode
from tests.core.test_consumer_support import Client, Harness

INTERVAL_MS = 1_000  # the heartbeat interval: a beat is held half of it at most


def harness(assignment_interval_ms: int = 0) -> Harness:
    return Harness(
        topics=(("orders", 4),),
        config=ConsumerGroupConfig(
            heartbeat_interval_ms=INTERVAL_MS, assignment_interval_ms=assignment_interval_ms
        ),
    )


def plain(h: Harness, c: Client, **changes: Any) -> ConsumerGroupHeartbeat:
    """The beat `Harness.poll` would send next (epoch and owned partitions only)."""
    beat = ConsumerGroupHeartbeat(
        group_id=h.group_id,
        member_id=c.member_id,
        member_epoch=c.epoch,
        topic_partitions=c.owned_tps(),
        client_id="client",
        client_host="/127.0.0.1",
    )
    return dataclasses.replace(beat, **changes)


def revoker(h: Harness) -> Client:
    """The member whose target gives up a partition to the newcomer (the uniform assignor's
    4 partitions over 3: one of a and b keeps 2)."""
    (name,) = [n for n in "ab" if sum(map(len, h.group.target_assignment[n].values())) < 2]
    return h.clients[name]


def newcomer_waiting(h: Harness | None = None) -> tuple[Harness, Client]:
    """a and b share the 4 partitions; c joins and is assigned at once (no pacing): its target
    is partitions a and b still hold. `h`: a harness of one 4-partition topic, else harness()."""
    h = h or harness()
    a, b = h.client("a"), h.client("b")
    h.settle()
    assert len(a.owned_set()) == len(b.owned_set()) == 2
    c = h.client("c")
    h.poll(c)
    assert h.group.members["c"].state is MemberState.UNRELEASED_PARTITIONS
    assert not c.owned
    return h, c


def test_a_newcomer_waiting_for_unreleased_partitions_may_be_held_until_half_an_interval() -> None:
    h, c = newcomer_waiting()
    beat = plain(h, c)
    assert holdable(h.core, beat)
    assert hold_deadline_ms(h.core, beat, h.clock.now) == h.clock.now + INTERVAL_MS // 2
    assert holdable(h.core, plain(h, c, topic_partitions=None))  # owned omitted: unchanged


def test_a_beat_carrying_something_new_is_never_held() -> None:
    h, c = newcomer_waiting()
    other = h.clients["a"].owned_tps()
    assert not holdable(h.core, plain(h, c, topic_partitions=other))  # owns something new
    assert not holdable(h.core, plain(h, c, member_epoch=-1))  # a leave
    assert not holdable(h.core, plain(h, c, member_epoch=-2))  # a static member's leave
    assert not holdable(h.core, plain(h, c, member_epoch=0))  # a (re)join
    assert not holdable(h.core, plain(h, c, member_epoch=c.epoch - 1))  # an old epoch
    assert not holdable(h.core, plain(h, c, subscribed_topic_names=("orders", "audit")))
    assert not holdable(h.core, plain(h, c, subscribed_topic_regex="ord.*"))
    assert not holdable(h.core, plain(h, c, rebalance_timeout_ms=5_000))
    assert not holdable(h.core, plain(h, c, server_assignor="range"))
    assert not holdable(h.core, plain(h, c, client_id="renamed"))
    assert not holdable(h.core, plain(h, c, member_id="nobody"))
    assert not holdable(h.core, plain(h, c, group_id="other"))


def test_members_not_waiting_are_answered_at_once() -> None:
    h, _ = newcomer_waiting()
    a = revoker(h)  # its target takes a partition away: it must hear so now
    assert not holdable(h.core, plain(h, a))
    a_owned = a.owned_tps()
    h.poll(a)
    assert h.group.members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    # revoking (its rebalance timeout runs): never held
    assert not holdable(h.core, plain(h, a, topic_partitions=a_owned))
    assert not holdable(h.core, plain(h, a, topic_partitions=None))
    h.settle()
    for c in h.clients.values():  # a stable group: Kafka's steady beat, answered at once
        assert not holdable(h.core, plain(h, c))


def test_a_release_wakes_the_waiting_newcomer_and_its_beat_picks_the_partitions_up() -> None:
    h, c = newcomer_waiting()
    holder = revoker(h)
    beat = plain(h, c)  # sent before the holder acked: held
    assert holdable(h.core, beat)
    h.poll(holder)  # told to revoke
    assert holdable(h.core, beat)  # still held by it
    mark = len(h.records)
    h.poll(holder)  # acks: the partition is free
    assert "g" in woken_groups(r.key for r in h.records[mark:])
    assert not holdable(h.core, beat)  # woken: nothing to wait for now
    answer = h.send(**{f.name: getattr(beat, f.name) for f in dataclasses.fields(beat)})
    assert answer.assignment is not None
    assert sum(len(tp.partitions) for tp in answer.assignment) == 1
    assert h.group.members["c"].state is MemberState.STABLE


def test_a_member_waiting_for_its_paced_target_is_held_until_the_target_is_computed() -> None:
    h = harness(assignment_interval_ms=1_000)
    a = h.client("a")
    h.poll(a)  # a quiet group: assigned at once
    h.poll(a)
    assert len(a.owned_set()) == 4
    assert not holdable(h.core, plain(h, a))  # nothing pending: Kafka's steady beat
    h.poll(h.client("b"))  # inside the interval: the target waits for the pacer's timer
    assert h.group.group_epoch > h.group.assignment_epoch
    assert holdable(h.core, plain(h, a))
    # After a run over one member, due when the joins pause (a fifth of the interval).
    assert hold_deadline_ms(h.core, plain(h, a), h.clock.now) == h.clock.now + INTERVAL_MS // 2
    mark = len(h.records)
    h.advance(200)  # the timer computes the target
    assert "g" in woken_groups(r.key for r in h.records[mark:])
    assert not holdable(h.core, plain(h, a))  # it has partitions to revoke now


def test_a_beat_is_not_held_for_a_paced_target_due_after_its_deadline() -> None:
    h = harness(assignment_interval_ms=1_000)
    a, b = h.client("a"), h.client("b")
    h.poll(a)
    h.poll(b)
    h.advance(200)  # one run over both
    for _ in range(3):  # a revokes, b takes them up: no time passes
        h.poll(a)
        h.poll(b)
    assert len(a.owned_set()) == len(b.owned_set()) == 2
    h.poll(h.client("c"))  # inside the interval of a run over two: due at its end
    assert h.group.group_epoch > h.group.assignment_epoch
    assert holdable(h.core, plain(h, a))
    # Due in 1 s, after the beat's deadline: held for nothing, it would only come back later.
    assert hold_deadline_ms(h.core, plain(h, a), h.clock.now) is None
    h.clock.now += 1_000 - INTERVAL_MS // 2  # now due by the deadline
    assert hold_deadline_ms(h.core, plain(h, a), h.clock.now) == h.clock.now + INTERVAL_MS // 2


def test_a_beat_near_its_members_session_deadline_is_not_held() -> None:
    h, c = newcomer_waiting()
    beat = plain(h, c)
    session_ms = h.config.session_timeout_ms
    late = h.clock.now + session_ms - INTERVAL_MS  # silent for most of its session
    assert holdable(h.core, beat)
    assert hold_deadline_ms(h.core, beat, late) is None
    assert hold_deadline_ms(h.core, beat, h.clock.now + session_ms - 2 * INTERVAL_MS) is not None


def test_only_assignment_records_wake() -> None:
    h, _ = newcomer_waiting()
    kinds = {type(r.key).__name__ for r in h.records if woken_groups([r.key])}
    assert kinds == {"ConsumerGroupCurrentMemberAssignmentKey",
                     "ConsumerGroupTargetAssignmentMetadataKey"}  # fmt: skip
    assert not woken_groups(r.key for r in h.records if type(r.key).__name__ not in kinds)


def _answer(**changes: Any) -> HeartbeatResponse:
    answer = HeartbeatResponse(ErrorCode.none, None, "c", 7, INTERVAL_MS, ())
    return dataclasses.replace(answer, **changes)


def test_a_join_answered_with_no_partitions_is_followed_by_the_plain_beat_owning_nothing() -> None:
    join = ConsumerGroupHeartbeat(
        group_id="g", member_id="", member_epoch=0, instance_id="i", rack_id="r",
        rebalance_timeout_ms=60_000, subscribed_topic_names=("orders",), server_assignor="range",
        topic_partitions=(), client_id="client", client_host="/127.0.0.1", api_version=0,
    )  # fmt: skip
    beat = follow_up(join, _answer())
    assert beat == ConsumerGroupHeartbeat(
        group_id="g", member_id="c", member_epoch=7, topic_partitions=(), client_id="client",
        client_host="/127.0.0.1", api_version=0,
    )  # fmt: skip
    assert follow_up(join, _answer(assignment=None)) == beat  # nothing changed, nothing sent
    empty_topic = (TopicPartitions(uuid.uuid4(), ()),)
    assert follow_up(join, _answer(assignment=empty_topic)) == beat
    # Answered now: partitions given, an error, no epoch, not a join.
    assert follow_up(join, _answer(assignment=(TopicPartitions(uuid.uuid4(), (0,)),))) is None
    assert follow_up(join, _answer(error=ErrorCode.unknown_member_id)) is None
    assert follow_up(join, _answer(member_epoch=0)) is None
    assert follow_up(join, _answer(member_id=None)) is None
    for epoch in (-2, -1, 3):
        assert follow_up(dataclasses.replace(join, member_epoch=epoch), _answer()) is None


def test_a_joins_follow_up_is_held_up_to_the_pacers_longest_wait_or_half_an_interval() -> None:
    h, c = newcomer_waiting(harness(assignment_interval_ms=300))
    beat, now = plain(h, c), h.clock.now
    assert hold_deadline_ms(h.core, beat, now) == now + INTERVAL_MS // 2
    assert hold_deadline_ms(h.core, beat, now, join=True) == now + 5 * 300
    h2, c2 = newcomer_waiting(harness(assignment_interval_ms=50))
    beat2, now2 = plain(h2, c2), h2.clock.now
    assert hold_deadline_ms(h2.core, beat2, now2, join=True) == now2 + INTERVAL_MS // 2
