"""A classic JoinGroup to an id held by another kind of group, pinned where `make mutation`
found it loose (issue 36: `handlers/join.handle`): a share group's id is refused with
INCONSISTENT_GROUP_PROTOCOL under the request's own reply and member id, and an Empty KIP-848
consumer group's id is taken over: the consumer group's tombstones, then the new classic group.
Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import JoinGroupResult
from coordinator.core.records import GroupMetadataKey
from tests.core.test_pin_group_kinds_admin import consumer_member, share_group
from tests.support.fakeclock import Harness


def test_a_join_to_a_share_group_s_id_is_refused_under_its_own_reply_and_member_id() -> None:
    h = Harness()
    share_group(h, "sg", leave=False)
    h.join("g")  # another request first: the refusal goes to the join's own reply_to
    before = (len(h.records), len(h.events))
    rt = h.join("sg", "m-7")
    assert h.reply(rt) == JoinGroupResult(E.inconsistent_group_protocol, member_id="m-7")
    assert (len(h.records), len(h.events)) == before
    assert "sg" not in h.core.state.groups


def test_a_join_to_an_empty_consumer_group_writes_its_tombstones_then_the_classic_group() -> None:
    h = Harness()
    consumer_member(h, "cg", "m1")
    h.call(ConsumerGroupHeartbeat("cg", "m1", -1))
    before = len(h.records)
    h.join("cg")
    written = h.records[before:]
    assert [r.key for r in written] == [
        ConsumerGroupTargetAssignmentMetadataKey("cg"),
        ConsumerGroupMetadataKey("cg"),
        GroupMetadataKey("cg"),
    ]
    assert [r.value is None for r in written] == [True, True, False]
    assert "cg" not in h.core.state.consumer.groups and "cg" in h.core.state.groups
