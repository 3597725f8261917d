"""What a classic member's JoinGroup changes of its member in a KIP-848 consumer group (Kafka's
classicGroupJoinToConsumerGroup and the ConsumerGroupMember builder's maybeUpdate* calls),
pinned where `make mutation` found it loose: a field the request leaves out (no rack in an old
subscription, a rebalance timeout of -1, no instance id) keeps the member's value, one it gives
replaces it; and the epoch bump's cause (a new member, or a changed subscription) and time."""

from __future__ import annotations

import struct

from coordinator.core.consumer.messages import GroupEpochBumped, MemberAdded, RebalanceSettled
from tests.core.test_consumer_support import Harness
from tests.core.test_pin_consumer_classic_member import classic_join


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription_v3(topics: tuple[str, ...], rack: str | None) -> bytes:
    """ConsumerProtocolSubscription v3: topics, no user data, no owned partitions, generation
    -1, rack."""
    data = struct.pack(">hi", 3, len(topics)) + b"".join(_s(t) for t in topics)
    data += struct.pack(">iii", -1, 0, -1)
    return data + (struct.pack(">h", -1) if rack is None else _s(rack))


def group_with_consumer_member() -> Harness:
    h = Harness()
    h.client("n1")
    h.settle()
    return h


def test_a_classic_members_rack_is_its_subscriptions_and_kept_when_a_rejoin_has_none() -> None:
    h = group_with_consumer_member()
    joined = classic_join(h, metadata=subscription_v3(("orders",), "rack-1"))
    mid = joined.member_id
    assert h.group.members[mid].rack_id == "rack-1"
    classic_join(h, mid, metadata=subscription_v3(("orders",), None))
    assert h.group.members[mid].rack_id == "rack-1"
    classic_join(h, mid, metadata=subscription_v3(("orders",), "rack-2"))
    assert h.group.members[mid].rack_id == "rack-2"
    assert h.replayed()["g"].members[mid].rack_id == "rack-2"  # record 5 carries it


def test_a_rebalance_timeout_of_minus_one_keeps_the_members() -> None:
    h = group_with_consumer_member()
    mid = classic_join(h, rebalance_timeout_ms=20_000).member_id
    classic_join(h, mid, rebalance_timeout_ms=-1)
    assert h.group.members[mid].rebalance_timeout_ms == 20_000
    classic_join(h, mid, rebalance_timeout_ms=1)
    assert h.group.members[mid].rebalance_timeout_ms == 1
    classic_join(h, mid, rebalance_timeout_ms=-2)  # not the sentinel: taken as it is
    assert h.group.members[mid].rebalance_timeout_ms == -2


def test_a_static_members_rejoin_by_member_id_alone_keeps_its_instance_id() -> None:
    h = group_with_consumer_member()
    mid = classic_join(h, instance_id="static").member_id
    classic_join(h, mid)  # no instance id: found by its member id
    assert h.group.members[mid].instance_id == "static"
    assert h.group.static_members == {"static": mid}


def test_a_classic_members_client_host_is_its_requests() -> None:
    h = group_with_consumer_member()
    mid = classic_join(h, client_host="/10.0.0.7").member_id
    assert h.group.members[mid].client_host == "/10.0.0.7"
    classic_join(h, mid, client_host="/10.0.0.8")
    assert h.replayed()["g"].members[mid].client_host == "/10.0.0.8"


def test_the_epoch_bump_of_a_classic_join_says_why_and_when() -> None:
    h = group_with_consumer_member()
    n1 = h.clients["n1"]
    h.clock.now = 5_000
    h.events.clear()
    mid = classic_join(h).member_id
    assert [(e.member_id, e.client_id) for e in h.events if isinstance(e, MemberAdded)] == [
        (mid, "cl")]  # fmt: skip
    bumps = [e for e in h.events if isinstance(e, GroupEpochBumped)]
    assert [(e.cause, e.member_id) for e in bumps] == [("member_joined", mid)]
    h.clock.now = 6_000
    h.poll(n1)
    h.poll(n1)  # n1 revokes; the classic member rejoins to take its share: settled
    classic_join(h, mid)
    (settled,) = [e for e in h.events if isinstance(e, RebalanceSettled)]
    assert (settled.started_ms, settled.now_ms) == (5_000, 6_000)
    h.events.clear()
    classic_join(h, mid, metadata=subscription_v3(("orders", "payments"), None))
    bumps = [e for e in h.events if isinstance(e, GroupEpochBumped)]
    assert [(e.cause, e.member_id) for e in bumps] == [("subscription_changed", mid)]
    assert not [e for e in h.events if isinstance(e, MemberAdded)]
