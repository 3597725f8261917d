"""A ConsumerGroupHeartbeat's changes to its member, the lost-response check (issue 23;
Kafka's ConsumerGroupMember builders and throwIfConsumerGroupMemberEpochIsInvalid), and whether
its answer carries the assignment (`AssignmentAcks`). Pure."""

from __future__ import annotations

import uuid

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.model import (
    ConsumerGroup,
    ConsumerGroupMember,
    PartitionMap,
    replace_member,
)
from coordinator.core.consumer.records import TopicPartitions


def owns_subset(owned: tuple[TopicPartitions, ...] | None, assigned: PartitionMap) -> bool:
    if owned is None:
        return False
    for tp in owned:
        partitions = assigned.get(tp.topic_id)
        if partitions is None or not partitions.issuperset(tp.partitions):
            return False
    return True


class AssignmentAcks:
    """Whether a heartbeat's answer carries the member's assignment (`due`). Kafka's rule
    (consumerGroupHeartbeat): on a join, on a full request (every optional field present, as
    after an error), or when this heartbeat changed it.

    We differ on purpose: an answer that handed a member partitions it did not report owning is
    repeated in every answer until a heartbeat of the member reports owning them all (or a full
    request gets it again). librdkafka (2.16) times a ConsumerGroupHeartbeat out after one
    heartbeat interval (rd_kafka_ConsumerGroupHeartbeatRequest's FIXME), drops the late
    answer and retries with no full request, unlike the Java consumer; by Kafka's rule such an
    answer was never repeated, and the member kept fewer partitions than the coordinator
    counted it reconciled to: a Stable group with partitions nobody consumed (issue 38, 100
    members through a loaded fleet of three). Both clients ignore an assignment equal to the
    one they have; both report it once reconciled (librdkafka: its acknowledgement), which ends
    the repeats. A lost answer that only took partitions away needs none: the member keeps
    reporting them and is fenced at its rebalance timeout, as in Kafka.

    Soft state, never written: a restart or a fleet move forgets it (repeats end there)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[str, set[str]] = {}  # group id -> members yet to report partitions

    def due(
        self,
        group: ConsumerGroup,
        req: ConsumerGroupHeartbeat,
        before: ConsumerGroupMember,
        after: ConsumerGroupMember,
    ) -> bool:
        owned, member_id = req.topic_partitions, after.member_id
        pending = self._pending.get(group.group_id)
        waiting = pending is not None and member_id in pending
        full = (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and owned is not None
        )
        kafka = (
            req.member_epoch == 0 or full or after.assigned_partitions != before.assigned_partitions
        )
        if not (kafka or waiting):
            return False  # the steady heartbeat: nothing to compare
        covered = owned is not None and _owns_all(owned, after.assigned_partitions)
        if waiting and covered:
            assert pending is not None
            pending.discard(member_id)
            waiting = False
        if kafka and not covered:
            pending = self._pending.setdefault(group.group_id, set())
            pending.add(member_id)
            if len(pending) > len(group.members):  # some left meanwhile
                pending.intersection_update(group.members)
        return kafka or waiting

    def forget(self, group_id: str) -> None:
        self._pending.pop(group_id, None)


def _owns_all(owned: tuple[TopicPartitions, ...], assigned: PartitionMap) -> bool:
    reported: dict[uuid.UUID, set[int]] = {}
    for tp in owned:
        reported.setdefault(tp.topic_id, set()).update(tp.partitions)
    return all(partitions <= reported.get(t, set()) for t, partitions in assigned.items())


def updated_member(member: ConsumerGroupMember, req: ConsumerGroupHeartbeat) -> ConsumerGroupMember:
    """The request's non-null fields over the member (Kafka's maybeUpdate* builders)."""
    if (
        req.instance_id is None
        and req.rack_id is None
        and req.rebalance_timeout_ms == -1
        and req.server_assignor is None
        and req.subscribed_topic_names is None
        and req.subscribed_topic_regex is None
        and req.client_id == member.client_id
        and req.client_host == member.client_host
        and member.classic is None
    ):
        return member  # a steady heartbeat changes nothing (and replace() is slow)
    return replace_member(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=(
            req.server_assignor if req.server_assignor is not None else member.server_assignor
        ),
        subscribed_topic_names=(
            frozenset(req.subscribed_topic_names)
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            req.subscribed_topic_regex
            if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        client_id=req.client_id,
        client_host=req.client_host,
        classic=None,  # a ConsumerGroupHeartbeat makes it a consumer-protocol member (Kafka)
    )
