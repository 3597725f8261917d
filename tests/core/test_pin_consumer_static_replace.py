"""A static member of a KIP-848 group replaced by a new member id with its instance id (Kafka's
replaceMember), pinned where `make mutation` found it loose: the departed id's timers go with it
(its session timeout no longer wakes the coordinator), and the event says who was replaced, by
which client, and why."""

from __future__ import annotations

from coordinator.core.consumer.messages import MemberRemoved
from tests.core.test_consumer_support import Harness


def test_a_replaced_static_members_timers_go_with_it_and_the_event_names_it() -> None:
    h = Harness()
    session_ms = h.config.session_timeout_ms
    h.send(member_id="s1", member_epoch=0, instance_id="i-1", rebalance_timeout_ms=30_000,
           subscribed_topic_names=("orders",), topic_partitions=(), client_id="app-1",
           client_host="/10.0.0.1")  # fmt: skip
    h.clock.now += 1_000
    h.leave(h.client("s1", instance_id="i-1"), static=True)  # -2: its session timeout runs on
    assert h.core.next_deadline_ms() == 1_000 + session_ms
    h.clock.now += 5_000
    h.events.clear()
    response = h.poll(h.client("s2", instance_id="i-1"))
    assert response.error.name == "none" and set(h.group.members) == {"s2"}
    # Only the new id's session timeout is left to wake the coordinator.
    assert h.core.next_deadline_ms() == h.clock.now + session_ms
    removed = [e for e in h.events if isinstance(e, MemberRemoved)]
    assert removed == [MemberRemoved("g", "s1", "static_replaced", "i-1", "app-1", "/10.0.0.1")]
