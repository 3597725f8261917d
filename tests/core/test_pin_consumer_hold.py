"""Which ConsumerGroupHeartbeats the shell may hold (coordinator.core.consumer.hold), through the
GroupCoordinator's entry points the shell calls (`hold_deadline_ms`, `holdable`), pinned where
`make mutation` found them loose: nothing is held while the coordinator loads; a settled member
whose new target keeps what it has is answered at once (its new epoch), unless its group's next
target is paced; a member whose new target takes partitions another member still holds is held,
one that must give up a topic or is revoking is not, even when paced; a member of a group written
by an older Kafka (first epoch 1) is held like any other; the owned partitions a held beat
reports must be exactly what the member holds; the deadline: half the heartbeat interval
(whole milliseconds, none below one), only if the session outlasts twice that; and a join
answered with no partitions at epoch 1 (a static member rejoining a group an older Kafka wrote)
is followed up like any other (hold.follow_up). Fake clock."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from coordinator.core.consumer import ConsumerGroupConfig, ConsumerGroupHeartbeat, MemberState
from coordinator.core.consumer.hold import follow_up
from coordinator.core.consumer.records import ConsumerGroupRecord, TopicPartitions
from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.records import Record
from tests.core.test_consumer_hold import INTERVAL_MS, newcomer_waiting, plain, revoker
from tests.core.test_consumer_support import Client, Harness

HOLD_MS = INTERVAL_MS // 2
ORDERS = (("orders", 4),)


class CoreHarness(Harness):
    """The harness's clients beat a GroupCoordinator (`gc.handle`); `core` is its consumer
    groups, so the harness's views and timers read the same state."""

    def __init__(
        self,
        topics: tuple[tuple[str, int], ...] = ORDERS,
        heartbeat_interval_ms: int = INTERVAL_MS,
        assignment_interval_ms: int = 0,
    ) -> None:
        super().__init__(
            topics,
            ConsumerGroupConfig(
                heartbeat_interval_ms=heartbeat_interval_ms,
                assignment_interval_ms=assignment_interval_ms,
            ),
        )
        self.gc = GroupCoordinator(
            CoordinatorConfig(
                consumer_session_timeout_ms=self.config.session_timeout_ms,
                consumer_heartbeat_interval_ms=heartbeat_interval_ms,
                consumer_assignment_interval_ms=assignment_interval_ms,
            ),
            self.catalog,
            lambda prefix: f"{prefix}-member",
        )
        self.core = self.gc.consumer

    def send(self, **kw: Any) -> Any:
        kw.setdefault("group_id", self.group_id)
        kw.setdefault("client_id", "client")
        kw.setdefault("client_host", "/127.0.0.1")
        fx = self.gc.handle(1, ConsumerGroupHeartbeat(**kw), self.clock.now)
        ((_, response),) = fx.replies
        self.records.extend(ConsumerGroupRecord(r.key, r.value) for r in fx.records)
        return response

    def load(self, records: list[ConsumerGroupRecord]) -> None:
        for r in records:
            self.gc.replay(Record(r.key, r.value))


def topic(h: Harness, name: str) -> Any:
    info = h.catalog.get(name)
    assert info is not None
    return info.topic_id


def keeper(h: Harness) -> Client:
    """The one of a and b whose target, after c joined, keeps both its partitions."""
    (name,) = [n for n in "ab" if h.clients[n] is not revoker(h)]
    return h.clients[name]


def test_through_the_group_coordinator_the_newcomer_is_held_and_its_settled_peer_is_not() -> None:
    h, c = newcomer_waiting(CoreHarness())
    beat = plain(h, c)
    assert h.gc.holdable(beat)
    assert h.gc.hold_deadline_ms(beat, h.clock.now) == h.clock.now + HOLD_MS
    k = keeper(h)
    m = h.group.members[k.member_id]
    assert m.state is MemberState.STABLE and m.member_epoch < h.group.assignment_epoch
    # Its target keeps what it has: processed now, its beat is answered with the new epoch.
    assert not h.gc.holdable(plain(h, k))
    assert h.gc.hold_deadline_ms(plain(h, k), h.clock.now) is None
    old = k.epoch
    assert h.poll(k).member_epoch == h.group.assignment_epoch > old


def test_nothing_is_held_while_the_coordinator_loads() -> None:
    live, c = newcomer_waiting()
    h = CoreHarness()
    h.clock.now = live.clock.now
    h.load(live.records)
    assert h.gc.loading
    beat = plain(live, c)
    assert not h.gc.holdable(beat)  # requests wait for the load: nothing to hold yet
    assert h.gc.hold_deadline_ms(beat, h.clock.now) is None
    h.gc.finish_loading(h.clock.now)
    assert h.gc.holdable(beat)  # the loaded newcomer still waits for the same partitions
    assert h.gc.hold_deadline_ms(beat, h.clock.now) == h.clock.now + HOLD_MS


def older_kafka(records: list[ConsumerGroupRecord]) -> list[ConsumerGroupRecord]:
    """The records as Kafka 4.3 and older write them: a new group's first bump is epoch 1 (its
    ModernGroup started at 0; coordinator.core.consumer.coordinator.NEW_GROUP_EPOCH)."""
    out = []
    for r in records:
        value: Any = r.value
        if dataclasses.is_dataclass(value):
            shifted = {
                f.name: getattr(value, f.name) - 1
                for f in dataclasses.fields(value)
                if f.name in ("epoch", "assignment_epoch", "member_epoch", "previous_member_epoch")
                and getattr(value, f.name) > 0
            }
            value = dataclasses.replace(value, **shifted)
        out.append(ConsumerGroupRecord(r.key, value))
    return out


def test_a_member_at_epoch_one_of_a_group_an_older_kafka_wrote_is_held_like_any_other() -> None:
    topics = (("orders", 4), ("payments", 2), ("audit", 1))
    live = Harness(topics)
    live.poll(live.client("a"))  # alone: all of orders
    h = CoreHarness(topics, assignment_interval_ms=1_000)
    h.clock.now = live.clock.now
    h.load(older_kafka(live.records))
    h.gc.finish_loading(h.clock.now)
    a = h.client("a", epoch=1, joined=True, owned=dict(live.clients["a"].owned))
    assert h.group.members["a"].member_epoch == 1
    assert not h.gc.holdable(plain(h, a))  # it has its target, nothing pending: a steady beat
    h.poll(h.client("b", topics=("payments",)))  # the first bump after the load: assigned now
    h.poll(h.client("c", topics=("audit",)))  # inside the interval: paced
    assert h.group.group_epoch > h.group.assignment_epoch > 1
    assert h.gc.holdable(plain(h, a))  # its target is unchanged and the next one is paced
    assert h.gc.hold_deadline_ms(plain(h, a), h.clock.now) is None  # due after the deadline
    h.clock.now += HOLD_MS  # the target is due by the deadline now
    assert h.gc.hold_deadline_ms(plain(h, a), h.clock.now) == h.clock.now + HOLD_MS


def test_a_member_reporting_two_topics_is_held_and_one_losing_a_topic_or_revoking_is_not() -> None:
    h = CoreHarness((("one", 1), ("two", 1)), assignment_interval_ms=1_000)
    a = h.client("a", topics=("one", "two"))
    h.poll(a)
    h.poll(a)
    assert len(a.owned_tps()) == 2
    h.poll(h.client("b", topics=("one", "two")))  # inside the interval: paced
    assert h.gc.holdable(plain(h, a))  # both topics reported, exactly as held
    h.advance(1_000)  # the timer computes the target: b takes one of a's topics
    assert len(h.group.target_assignment["a"]) == 1
    assert not h.gc.holdable(plain(h, a))  # a whole topic to revoke: told at once
    h.poll(a)
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    h.poll(h.client("c", topics=("one", "two")))  # inside the interval again: paced
    assert h.group.group_epoch > h.group.assignment_epoch
    # Revoking (its rebalance timeout runs): never held, though the next target is paced.
    assert not h.gc.holdable(plain(h, a, topic_partitions=None))


def test_a_settled_member_whose_new_target_takes_anothers_partitions_is_held() -> None:
    h = CoreHarness((("orders", 4), ("payments", 2)))
    a, b = h.client("a"), h.client("b")
    h.settle()
    b_orders = tuple(sorted(b.owned[topic(h, "orders")]))
    b.topics = ("payments",)
    h.poll(b, full=True)  # b moves to payments: a's target takes all of orders
    m = h.group.members["a"]
    assert m.state is MemberState.STABLE and m.member_epoch < h.group.assignment_epoch
    assert len(h.group.target_assignment["a"][topic(h, "orders")]) == 4
    # Processed now its beat gets the new epoch at most, and b's partitions a beat after b
    # releases them: held.
    assert h.gc.holdable(plain(h, a))
    assert h.gc.hold_deadline_ms(plain(h, a), h.clock.now) == h.clock.now + HOLD_MS
    # Its owned partitions must be exactly what it holds; an empty topic entry counts for none.
    mine = a.owned_tps()
    assert h.gc.holdable(plain(h, a, topic_partitions=(TopicPartitions(topic(h, "payments"), ()),
                                                        *mine)))  # fmt: skip
    (orders,) = mine
    fewer = (TopicPartitions(orders.topic_id, orders.partitions[:1]),)
    assert not h.gc.holdable(plain(h, a, topic_partitions=fewer))
    others = (TopicPartitions(orders.topic_id, b_orders),)  # as many, but not its own
    assert not h.gc.holdable(plain(h, a, topic_partitions=others))


def test_a_settled_member_with_its_target_is_held_while_the_next_target_is_paced() -> None:
    h, _ = newcomer_waiting(CoreHarness(assignment_interval_ms=1_000))
    assert h.group.group_epoch == h.group.assignment_epoch  # c came after a quiet interval
    k = keeper(h)
    assert not h.gc.holdable(plain(h, k))  # nothing paced: its new epoch is news
    h.poll(h.client("d"))  # inside the interval: paced
    assert h.group.group_epoch > h.group.assignment_epoch
    m = h.group.members[k.member_id]
    assert m.state is MemberState.STABLE and m.member_epoch < h.group.assignment_epoch
    assert h.gc.holdable(plain(h, k))


@pytest.mark.parametrize(("interval_ms", "hold_ms"), [(1, None), (2, 1), (3, 1), (1_001, 500)])
def test_a_beat_is_held_half_the_interval_in_whole_milliseconds(
    interval_ms: int, hold_ms: int | None
) -> None:
    h, c = newcomer_waiting(CoreHarness(heartbeat_interval_ms=interval_ms))
    beat = plain(h, c)
    assert h.gc.holdable(beat)
    deadline = h.gc.hold_deadline_ms(beat, h.clock.now)
    assert deadline == (None if hold_ms is None else h.clock.now + hold_ms)
    assert deadline is None or type(deadline) is int


def test_a_beat_is_held_only_if_its_session_outlasts_twice_the_hold() -> None:
    h, c = newcomer_waiting(CoreHarness())
    session_ms = h.clock.now + h.config.session_timeout_ms  # c's last beat was just now
    beat = plain(h, c)
    late = session_ms - 2 * HOLD_MS
    assert h.gc.hold_deadline_ms(beat, late - 1) == late - 1 + HOLD_MS
    assert h.gc.hold_deadline_ms(beat, late) is None


def fields(req: ConsumerGroupHeartbeat) -> dict[str, Any]:
    return {f.name: getattr(req, f.name) for f in dataclasses.fields(req)}


def test_a_static_rejoin_answered_at_epoch_one_with_nothing_is_followed_up() -> None:
    """Kafka 4.3 and older start a group at epoch 1: a static member that left (-2) and rejoins
    under a new id takes its old place at the group's assignment epoch, 1, with its target of
    nothing. Its join's answer gave it no partitions, so its plain beat follows, at epoch 1."""
    live = Harness(ORDERS)
    live.poll(live.client("s", instance_id="i-s", topics=("absent",)))  # no partitions to have
    h = CoreHarness()
    h.clock.now = live.clock.now
    h.load(older_kafka(live.records))
    h.gc.finish_loading(h.clock.now)
    assert h.group.group_epoch == h.group.assignment_epoch == 1
    h.leave(h.client("s", instance_id="i-s", epoch=1, joined=True), static=True)
    join = ConsumerGroupHeartbeat(
        group_id="g", member_id="s2", member_epoch=0, instance_id="i-s",
        rebalance_timeout_ms=30_000, subscribed_topic_names=("absent",), topic_partitions=(),
        client_id="client", client_host="/127.0.0.1",
    )  # fmt: skip
    answer = h.send(**fields(join))
    assert (answer.error.name, answer.member_id, answer.member_epoch) == ("none", "s2", 1)
    assert answer.assignment == ()
    beat = follow_up(join, answer)
    assert beat == ConsumerGroupHeartbeat(
        group_id="g", member_id="s2", member_epoch=1, topic_partitions=(), client_id="client",
        client_host="/127.0.0.1", api_version=join.api_version,
    )  # fmt: skip
    # Stable at the assignment epoch, nothing paced: the shell processes it at once.
    assert h.gc.hold_deadline_ms(beat, h.clock.now, join=True) is None
    assert h.send(**fields(beat)).member_epoch == 1
