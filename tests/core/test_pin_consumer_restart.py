"""A KIP-848 group's rebalance events across a restart (coordinator.core.consumer.rebalances:
the tracker is soft state, rebuilt at loading), pinned where `make mutation` found them loose:
only a group loaded mid-rebalance is tracked again; a Stable group's heartbeats after the load
settle nothing, and a member joining it starts a new rebalance with its own cause, which
settles once, started at the join."""

from __future__ import annotations

from coordinator.core.consumer.messages import GroupEpochBumped, RebalanceSettled
from coordinator.core.consumer.model import ConsumerGroupState
from tests.core.test_consumer_support import Harness
from tests.core.test_pin_consumer_loading import loaded


def test_a_stable_group_loaded_is_not_mid_rebalance() -> None:
    h = Harness()
    h.client("a")
    h.settle()
    assert h.group.state is ConsumerGroupState.STABLE
    h.clock.now += 1_000
    other = loaded(h)
    other.clients = h.clients
    other.round()
    assert not [e for e in other.events if isinstance(e, RebalanceSettled)]
    joined_ms = other.clock.now
    other.poll(other.client("b"))
    other.settle()
    settled = [e for e in other.events if isinstance(e, RebalanceSettled)]
    assert len(settled) == 1
    assert (settled[0].started_ms, settled[0].bump.cause) == (joined_ms, "member_joined")
    assert [e.cause for e in other.events if isinstance(e, GroupEpochBumped)] == ["member_joined"]
