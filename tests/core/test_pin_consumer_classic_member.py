"""A classic member inside a KIP-848 consumer group (coordinator.core.consumer.classic), driven
straight through the consumer core with a fake clock, pinned where `make mutation` found it
loose: its LeaveGroup's events (who left, why, and the rebalance it ends), ConsumerGroupDescribe
naming it a classic member, and its Heartbeat telling it to rejoin once the partitions it waited
for are released (Kafka's waitingOnUnreleasedPartition)."""

from __future__ import annotations

from coordinator.core.consumer import classic
from coordinator.core.consumer.messages import (
    GroupEpochBumped,
    MemberRemoved,
    RebalanceSettled,
)
from coordinator.core.consumer.model import MemberState
from coordinator.core.messages import (
    ErrorCode,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeavingMember,
    Protocol,
)
from tests.core.test_consumer_migration import subscription
from tests.core.test_consumer_support import Harness, topic_id

ORDERS = topic_id(0)  # the Harness's "orders", 6 partitions (test_consumer_migration's T)


def classic_join(h: Harness, member_id: str = "", owned: tuple[int, ...] = (), *,
                 instance_id: str | None = None, protocol: str = "range",
                 metadata: bytes | None = None, rebalance_timeout_ms: int = 20_000,
                 client_host: str = "/h", error: ErrorCode = ErrorCode.none,
                 ) -> JoinGroupResult:  # fmt: skip
    """A JoinGroup v3 (no MEMBER_ID_REQUIRED round) of a classic member subscribing to orders."""
    metadata = subscription(owned) if metadata is None else metadata
    cmd = JoinGroup("g", 6_000, rebalance_timeout_ms, member_id, instance_id, "consumer",
                    (Protocol(protocol, metadata),), None, "cl", client_host, 3)  # fmt: skip
    result = classic.join(h.core, cmd, h.clock.now)
    h.records.extend(result.records)
    h.events.extend(result.events)
    assert isinstance(result.response, JoinGroupResult)
    assert result.response.error is error, result.response
    return result.response


def classic_heartbeat(h: Harness, joined: JoinGroupResult) -> ErrorCode:
    cmd = Heartbeat("g", joined.generation_id, joined.member_id, None)
    return classic.heartbeat(h.core, cmd, h.clock.now).error


def test_a_classic_members_leave_is_a_left_member_and_ends_the_rebalance_at_its_time() -> None:
    h = Harness()
    n1 = h.client("n1")
    h.settle()
    joined = classic_join(h)
    h.leave(n1)  # a bump the classic member never heartbeats for: the rebalance is under way
    h.clock.now += 7_000
    h.events.clear()
    result = classic.leave(h.core, LeaveGroup("g", (LeavingMember(joined.member_id, None),), 3),
                           h.clock.now)  # fmt: skip
    assert [(m.member_id, m.error) for m in result.response.members] == [  # type: ignore[union-attr]
        (joined.member_id, ErrorCode.none)]  # fmt: skip
    removed = [e for e in result.events if isinstance(e, MemberRemoved)]
    assert [(e.group_id, e.member_id, e.reason, e.client_id) for e in removed] == [
        ("g", joined.member_id, "left", "cl")]  # fmt: skip
    bumped = [e for e in result.events if isinstance(e, GroupEpochBumped)]
    assert [e.cause for e in bumped] == ["member_left"]
    (settled,) = [e for e in result.events if isinstance(e, RebalanceSettled)]
    assert (settled.group_id, settled.members, settled.now_ms) == ("g", 0, h.clock.now)
    assert h.core.groups["g"].members == {}


def test_describe_names_a_classic_member_classic() -> None:
    h = Harness()
    h.client("n1")
    h.settle()
    joined = classic_join(h)
    described = h.core.describe("g")
    assert described is not None
    kinds = {m.member_id: m.classic for m in described.members}
    assert kinds == {"n1": False, joined.member_id: True}


def test_a_classic_member_waiting_on_a_partition_rejoins_once_it_is_released() -> None:
    h = Harness()
    n1, n2 = h.client("n1"), h.client("n2")
    h.settle()
    joined = classic_join(h)  # its target: one partition from n1, one from n2, held by them
    mid = joined.member_id
    h.poll(n1)
    h.poll(n1)  # n1 revoked its share (the Java consumer reports what it kept)
    joined = classic_join(h, mid)  # takes the released partition, waits for n2's
    member = h.core.groups["g"].members[mid]
    assert member.state is MemberState.UNRELEASED_PARTITIONS
    assert member.assigned_partitions.get(ORDERS)
    assert classic_heartbeat(h, joined) is ErrorCode.none  # still held by n2: nothing to do
    h.poll(n2)
    h.poll(n2)  # n2 released it: the classic member must rejoin to take it
    assert classic_heartbeat(h, joined) is ErrorCode.rebalance_in_progress
    joined = classic_join(h, mid)
    member = h.core.groups["g"].members[mid]
    assert member.state is MemberState.STABLE and len(member.assigned_partitions[ORDERS]) == 2
