"""consumer.release_first through GroupCoordinator.handle_many, pinned for mutation testing: in
one batch (one pass of the server's loop, one request per connection), the consumer heartbeats
that may free partitions (a member revoking, a member leaving) are applied first, and every
other request after them in arrival order, none lost. The first case (a revocation read after
the newcomer's beat) is tests/core/test_consumer_wiring.py's."""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.messages import FetchGroup, OffsetFetch, OffsetFetchResult
from tests.core.test_consumer_wiring import core, join, reply

NOW = 1_000  # past the assignment interval: b's join is assigned at once


def count(tps: tuple[TopicPartitions, ...] | None) -> int:
    return 0 if tps is None else sum(len(tp.partitions) for tp in tps)


def holder_and_newcomer() -> tuple[GroupCoordinator, HeartbeatResponse, HeartbeatResponse]:
    """a holds the 4 partitions; b joined and waits for 2 of them (UNRELEASED_PARTITIONS)."""
    c = core()
    a = join(c, "g", "a")
    assert count(a.assignment) == 4
    b = join(c, "g", "b", NOW)
    assert b.assignment == ()
    return c, a, b


def told_to_revoke(c: GroupCoordinator, a: HeartbeatResponse) -> HeartbeatResponse:
    told = reply(c.handle(2, ConsumerGroupHeartbeat("g", "a", a.member_epoch,
                                                    topic_partitions=a.assignment), NOW))
    assert isinstance(told, HeartbeatResponse) and count(told.assignment) == 2
    return told


def beat(member: str, r: HeartbeatResponse, owned: tuple[TopicPartitions, ...] | None = ()
         ) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat("g", member, r.member_epoch, topic_partitions=owned)


def test_requests_after_a_revocation_read_first_are_all_applied_in_order() -> None:
    """The revocation first in the batch, then the newcomer's beat, a fetch and heartbeats of a
    group and a member the coordinator does not know: every one answered, the rest in arrival
    order, the newcomer given the partitions freed."""
    c, a, b = holder_and_newcomer()
    told = told_to_revoke(c, a)
    fx = c.handle_many([
        (4, beat("a", told, told.assignment)),
        (3, beat("b", b)),
        (5, OffsetFetch((FetchGroup("g", None),), False, 9)),
        (6, ConsumerGroupHeartbeat("nope", "x", 1, topic_partitions=())),
        (7, ConsumerGroupHeartbeat("g", "stranger", 1, topic_partitions=())),
    ], NOW)  # fmt: skip
    assert [to for to, _ in fx.replies] == [4, 3, 5, 6, 7]
    replies = dict(fx.replies)
    assert isinstance(replies[5], OffsetFetchResult)
    got = replies[3]
    assert isinstance(got, HeartbeatResponse) and count(got.assignment) == 2


def test_a_leave_read_after_the_newcomers_beat_frees_its_partitions_for_it() -> None:
    c, a, b = holder_and_newcomer()
    fx = c.handle_many([
        (3, beat("b", b)),
        (5, OffsetFetch((FetchGroup("g", None),), False, 9)),
        (4, ConsumerGroupHeartbeat("g", "a", -1, topic_partitions=a.assignment)),
    ], NOW)  # fmt: skip
    assert [to for to, _ in fx.replies] == [4, 3, 5]  # the leave first, the rest in order
    got = dict(fx.replies)[3]
    assert isinstance(got, HeartbeatResponse) and count(got.assignment) >= 2


def test_a_leave_read_first_and_the_requests_after_it() -> None:
    c, a, b = holder_and_newcomer()
    fx = c.handle_many([
        (4, ConsumerGroupHeartbeat("g", "a", -1, topic_partitions=a.assignment)),
        (3, beat("b", b)),
        (5, OffsetFetch((FetchGroup("g", None),), False, 9)),
    ], NOW)  # fmt: skip
    assert [to for to, _ in fx.replies] == [4, 3, 5]
    got = dict(fx.replies)[3]
    assert isinstance(got, HeartbeatResponse) and count(got.assignment) >= 2


def test_a_steady_member_and_other_requests_keep_their_order() -> None:
    """Nobody revoking or leaving: the batch is applied as read, a fetch first included."""
    c, a, b = holder_and_newcomer()
    fx = c.handle_many([
        (5, OffsetFetch((FetchGroup("g", None),), False, 9)),
        (3, beat("b", b)),
        (4, beat("a", a, a.assignment)),
    ], NOW)  # fmt: skip
    assert [to for to, _ in fx.replies] == [5, 3, 4]
    got = dict(fx.replies)[3]
    assert isinstance(got, HeartbeatResponse) and got.assignment is None  # a holds them yet


def test_a_revocation_read_in_the_middle_goes_first_and_loses_nothing_after_it() -> None:
    c, a, b = holder_and_newcomer()
    told = told_to_revoke(c, a)
    fx = c.handle_many([
        (5, OffsetFetch((FetchGroup("g", None),), False, 9)),
        (4, beat("a", told, told.assignment)),
        (3, beat("b", b)),
    ], NOW)  # fmt: skip
    assert [to for to, _ in fx.replies] == [4, 5, 3]
    got = dict(fx.replies)[3]
    assert isinstance(got, HeartbeatResponse) and count(got.assignment) == 2


def test_a_leave_read_in_the_middle_goes_first_and_loses_nothing_after_it() -> None:
    c, a, b = holder_and_newcomer()
    fx = c.handle_many([
        (5, OffsetFetch((FetchGroup("g", None),), False, 9)),
        (4, ConsumerGroupHeartbeat("g", "a", -1, topic_partitions=a.assignment)),
        (3, beat("b", b)),
    ], NOW)  # fmt: skip
    assert [to for to, _ in fx.replies] == [4, 5, 3]
    got = dict(fx.replies)[3]
    assert isinstance(got, HeartbeatResponse) and count(got.assignment) >= 2
