"""A KIP-848 consumer group's rebalances as the core's events (issue 23 item 7): what metrics,
the status page, the history log and the audit see. An epoch bump is a rebalance start with its
cause and trigger; every member reconciled (Stable), or no member left, completes it; each member
reaching its target is a MemberReconciled. The history rows they make decode as written.

`consumer_history()` is also the audit test's input (tests/pipeline/test_audit.py)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.coordinator import CoordinatorConfig, Effects, GroupCoordinator
from coordinator.core.events import (
    Event,
    GroupCreated,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    MemberReconciled,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
)
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve.history import HistoryTranslator, Row
from storage.history import Kind, decode_event, encode_fields

T, TID, G = "orders", uuid.UUID(int=7), "kip848"
SESSION_MS = 10_000


def _core() -> GroupCoordinator:
    ids = itertools.count()
    return GroupCoordinator(
        CoordinatorConfig(
            consumer_session_timeout_ms=SESSION_MS, consumer_heartbeat_interval_ms=500
        ),
        TopicCatalog([TopicInfo(T, TID, 4)]),
        lambda prefix: f"{prefix}-{next(ids)}",
    )


def _beat(
    c: GroupCoordinator, now: int, mid: str, epoch: int, owned: tuple[int, ...] | None = None
) -> tuple[HeartbeatResponse, list[Event]]:
    who = {"client_id": f"client-{mid}", "client_host": "/10.0.0.1"}
    if epoch == 0:
        cmd = ConsumerGroupHeartbeat(
            G, mid, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(T,),
            topic_partitions=(), **who,
        )  # fmt: skip
    else:
        parts = None if owned is None else (TopicPartitions(TID, owned),)
        cmd = ConsumerGroupHeartbeat(G, mid, epoch, topic_partitions=parts, **who)
    fx: Effects = c.handle(1, cmd, now)
    ((_, response),) = fx.replies
    assert isinstance(response, HeartbeatResponse)
    assert response.error == 0, response
    return response, list(fx.events)


def consumer_history() -> tuple[list[tuple[int, Event]], list[list[Event]]]:
    """Two members join, one leaves, the other's session expires: (every event with its
    monotonic time, the events of each step)."""
    c = _core()
    steps: list[list[Event]] = []
    timed: list[tuple[int, Event]] = []

    def step(now: int, events: list[Event]) -> None:
        steps.append(events)
        timed.extend((now, e) for e in events)

    step(0, _beat(c, 0, "m1", 0)[1])
    step(100, _beat(c, 100, "m2", 0)[1])  # m2's partitions are m1's until it revokes them
    # A new group is at epoch 1 (as in Kafka 4.4), so m1's join makes it 2.
    r, events = _beat(c, 200, "m1", 2, (0, 1, 2, 3))
    assert r.member_epoch == 2  # unrevoked partitions: m1 stays at epoch 2
    step(200, events)
    step(300, _beat(c, 300, "m1", 2, (0, 1))[1])  # revoked: m1 reaches epoch 3
    step(400, _beat(c, 400, "m2", 3, ())[1])  # m2 takes the released partitions: Stable
    step(500, _beat(c, 500, "m2", -1)[1])  # m2 leaves
    step(600, _beat(c, 600, "m1", 3, (0, 1))[1])  # m1 takes everything: Stable again
    step(600 + SESSION_MS, list(c.expire(600 + SESSION_MS).events))  # m1's session expires
    return timed, steps


def test_a_consumer_groups_rebalances_are_the_cores_events() -> None:
    _, steps = consumer_history()
    first, second, revoking, revoked, stable, left, alone, expired = steps

    assert [type(e) for e in first] == [
        GroupCreated, MemberJoined, RebalanceStarted, MemberReconciled, RebalanceCompleted
    ]  # fmt: skip
    joined = first[1]
    assert isinstance(joined, MemberJoined)
    assert (joined.member_id, joined.client_id, joined.client_host) == (
        "m1",
        "client-m1",
        "/10.0.0.1",
    )
    done = first[-1]
    assert isinstance(done, RebalanceCompleted)
    assert (done.group_type, done.generation_id, done.protocol_name, done.leader) == (
        "consumer", 2, "uniform", None
    )  # fmt: skip

    assert [type(e) for e in second] == [MemberJoined, RebalanceStarted]
    started = second[1]
    assert isinstance(started, RebalanceStarted)
    assert (started.cause, started.trigger.member_id, started.trigger.client_id) == (
        RebalanceCause.MEMBER_JOINED, "m2", "client-m2"
    )  # fmt: skip
    assert revoking == []  # still revoking: nothing reconciled
    assert revoked == [MemberReconciled(G, "m1", 3, 200)]  # 200 ms after m2's join bumped
    assert stable[0] == MemberReconciled(G, "m2", 3, 300)
    done = stable[1]
    assert isinstance(done, RebalanceCompleted)
    assert (done.generation_id, done.members, done.cause, done.trigger.member_id) == (
        3, 2, RebalanceCause.MEMBER_JOINED, "m2"
    )  # fmt: skip
    assert (done.join_completed_ms - done.started_ms, done.now_ms - done.started_ms) == (0, 300)

    gone, bump = left
    assert isinstance(gone, MemberLeft) and gone.reason is LeaveReason.LEFT
    assert gone.client_id == "client-m2"
    assert isinstance(bump, RebalanceStarted) and bump.cause is RebalanceCause.MEMBER_LEFT
    assert [type(e) for e in alone] == [MemberReconciled, RebalanceCompleted]

    gone, bump, done = expired
    assert isinstance(gone, MemberLeft) and gone.reason is LeaveReason.EXPIRED
    assert isinstance(bump, RebalanceStarted) and bump.cause is RebalanceCause.SESSION_EXPIRED
    assert isinstance(done, RebalanceCompleted) and (done.members, done.generation_id) == (0, 5)


def history_rows(wall0_ms: int) -> list[Row]:
    """The history rows of `consumer_history`, at wall clock wall0_ms + its monotonic time."""
    translator = HistoryTranslator()
    rows: list[Row] = []
    for now, event in consumer_history()[0]:
        translator.translate(wall0_ms + now, event, rows)
    return rows


def test_the_history_log_gets_the_rebalances_with_the_group_type() -> None:
    rows = history_rows(1_000_000)
    decoded: list[Any] = []
    for ts, gid, kind, fields in rows:
        event = decode_event(gid.encode(), encode_fields(kind, fields), ts)
        assert event is not None
        decoded.append(event)
    kinds = [e.kind for e in decoded]
    assert kinds.count(Kind.REBALANCE_STARTED) == 4
    assert kinds.count(Kind.MEMBER_RECONCILED) == 4
    completed = [e for e in decoded if e.kind is Kind.REBALANCE_COMPLETED]
    assert [(e.get("generation_id"), e.get("cause"), e.get("group_type")) for e in completed] == [
        (2, "member_joined", "consumer"),
        (3, "member_joined", "consumer"),
        (4, "member_left", "consumer"),
        (5, "session_expired", "consumer"),
    ]
    assert [e.get("member_id") for e in completed] == ["m1", "m2", "m2", "m1"]  # the triggers
    assert completed[1].get("rebalance_ms") == 300
    reconciled = [e for e in decoded if e.kind is Kind.MEMBER_RECONCILED]
    got = [(e.get("member_id"), e.get("generation_id"), e.get("reconcile_ms")) for e in reconciled]
    assert got == [("m1", 2, 0), ("m1", 3, 200), ("m2", 3, 300), ("m1", 4, 100)]
    assert Kind.GROUP_EMPTIED in kinds  # the expiry emptied it


def test_a_restart_mid_rebalance_still_completes_it_once() -> None:
    """The rebalance tracker is soft state, rebuilt at loading: a group loaded mid-rebalance is
    tracked again from the load, so its end is one RebalanceCompleted (its start and cause are
    not in the log: it reads as started at the load by a metadata change)."""
    c = _core()
    records: list[Any] = []
    real_handle = c.handle

    def handle(reply_to: int, cmd: Any, now: int) -> Effects:
        fx = real_handle(reply_to, cmd, now)
        records.extend(fx.records)
        return fx

    c.handle = handle  # type: ignore[method-assign]
    _beat(c, 0, "m1", 0)
    _beat(c, 100, "m2", 0)  # a rebalance under way: m1 must revoke two partitions
    restarted = _core()
    for record in records:
        restarted.replay(record)
    restarted.finish_loading(1_000)
    completed: list[RebalanceCompleted] = []
    # A new group starts at epoch 1 (Kafka 4.4): m1 joined at 2, m2 at 3.
    steps = [("m1", 2, (0, 1, 2, 3)), ("m1", 2, (0, 1)), ("m2", 3, ()), ("m1", 3, (0, 1)),
             ("m2", 3, (2, 3))]  # fmt: skip
    for i, (mid, epoch, owned) in enumerate(steps):
        _, events = _beat(restarted, 1_100 + 100 * i, mid, epoch, owned)
        completed += [e for e in events if isinstance(e, RebalanceCompleted)]
    assert restarted.consumer.state_of(G).value == "Stable"
    assert len(completed) == 1
    done = completed[0]
    assert (done.generation_id, done.members, done.cause) == (
        3, 2, RebalanceCause.METADATA_CHANGED
    )  # fmt: skip
    assert (done.started_ms, done.now_ms) == (1_000, 1_300)
