"""The events of a KIP-848 group's membership changes and epoch bumps (what metrics, the status
page and the history see), and the leave's refusals, pinned where `make mutation` found them
loose: every field of MemberAdded, GroupEpochBumped and MemberRemoved; the metadata hash a
fencing bump records (the group's own, so the next heartbeat bumps nothing more); a topic change
blames only the topics the group reads; the leave's errors in Kafka's words; a static member
leaving for now (-2) keeps its partitions but none pending revocation."""

from __future__ import annotations

from coordinator.core.consumer.messages import GroupEpochBumped, MemberAdded, MemberRemoved
from coordinator.core.consumer.model import MemberState
from tests.core.test_consumer_support import Harness


def of(h: Harness, kind: type) -> list[object]:
    return [e for e in h.events if isinstance(e, kind)]


def test_joining_and_leaving_are_told_with_every_field() -> None:
    h = Harness()
    h.send(member_id="s", member_epoch=0, instance_id="i-s", rebalance_timeout_ms=5_000,
           subscribed_topic_names=("orders",), topic_partitions=(), client_id="app",
           client_host="/10.0.0.9")  # fmt: skip
    group = h.group
    assert of(h, MemberAdded) == [MemberAdded("g", "s", "i-s", "app", "/10.0.0.9")]
    assert of(h, GroupEpochBumped) == [GroupEpochBumped(
        "g", group.group_epoch, group.metadata_hash, "member_joined", "s", "i-s", "app",
        "/10.0.0.9")]  # fmt: skip
    assert group.metadata_hash != 0
    h.send(member_id="d", member_epoch=0, rebalance_timeout_ms=5_000,
           subscribed_topic_names=("orders",), topic_partitions=())  # fmt: skip
    epoch, metadata_hash = group.group_epoch, group.metadata_hash
    h.events.clear()
    assert h.send(member_id="s", member_epoch=-1, instance_id="i-s").error.name == "none"
    assert "s" not in group.members
    assert of(h, MemberRemoved) == [MemberRemoved("g", "s", "left", "i-s", "app", "/10.0.0.9")]
    assert of(h, GroupEpochBumped) == [GroupEpochBumped(
        "g", epoch + 1, metadata_hash, "member_left", "s", "i-s", "app", "/10.0.0.9")]  # fmt: skip
    assert (group.group_epoch, group.metadata_hash) == (epoch + 1, metadata_hash)
    h.events.clear()
    d = group.members["d"]
    h.send(member_id="d", member_epoch=d.member_epoch, topic_partitions=())
    assert group.group_epoch == epoch + 1 and not of(h, GroupEpochBumped)  # nothing more


def test_a_dynamic_members_leave_is_told_left() -> None:
    h = Harness()
    a = h.client("a")
    h.client("b")
    h.settle()
    h.events.clear()
    h.leave(a)
    assert [(e.member_id, e.reason) for e in of(h, MemberRemoved)] == [("a", "left")]


def test_a_topic_change_blames_only_the_topics_the_group_reads() -> None:
    h = Harness()
    h.client("a")
    h.settle()
    for name, partitions in (("audit", 4), ("orders", 8)):  # audit: no member reads it
        info = h.catalog.get(name)
        assert info is not None
        h.catalog.put(info.with_partitions(partitions))
        h.core.topic_changed(name)
    h.events.clear()
    h.settle()
    group = h.group
    assert of(h, GroupEpochBumped) == [GroupEpochBumped(
        "g", group.group_epoch, group.metadata_hash, "metadata_changed",
        topics=("orders",))]  # fmt: skip


def test_leave_refusals_say_what_kafka_says() -> None:
    h = Harness()
    h.client("a")
    h.client("s", instance_id="i-s")
    h.settle()

    def refused(**fields: object) -> tuple[str, str | None]:
        response = h.send(**fields)
        return response.error.name, response.error_message

    assert refused(group_id="nope", member_id="a", member_epoch=-1) == (
        "group_id_not_found", "Group nope not found.")  # fmt: skip
    assert refused(member_id="ghost", member_epoch=-1) == (
        "unknown_member_id", "Member ghost is not a member of group g.")  # fmt: skip
    assert refused(member_id="s", member_epoch=-1, instance_id="i-none") == (
        "unknown_member_id", "Instance id i-none is unknown.")  # fmt: skip
    assert refused(member_id="x", member_epoch=-2, instance_id="i-s") == (
        "fenced_instance_id",
        "Static member x with instance id i-s was fenced by member s.")  # fmt: skip
    assert set(h.group.members) == {"a", "s"}


def test_a_static_member_leaving_for_now_while_revoking_keeps_nothing_pending() -> None:
    h = Harness()
    s = h.client("s", instance_id="i-s")
    h.settle()
    h.poll(h.client("b"))
    h.poll(s)  # s is asked to give b half: revoking
    member = h.group.members["s"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    h.leave(s, static=True)
    member = h.group.members["s"]
    assert member.member_epoch == -2 and member.assigned_partitions
    assert not member.partitions_pending_revocation
