"""The KIP-848 coordinator's set-up and its timer sweep (coordinator.core.consumer.coordinator),
pinned where `make mutation` found them loose: an unknown or empty list of server assignors is
refused, naming the unknown and the known ones; the group metadata hash uses the configured
KIP-1101 hash function; and one late sweep that finds a deferred target assignment due before
members' session timeouts runs both."""

from __future__ import annotations

import re

import pytest

from coordinator.core.consumer import ConsumerGroupConfig, ConsumerGroupCoordinator
from coordinator.core.consumer.messages import MemberRemoved, TargetAssignmentComputed
from coordinator.core.topichash import TopicHashCache
from tests.core.test_consumer_support import Harness


@pytest.mark.parametrize(
    ("assignors", "unknown"), [(("uniform", "sticky"), "['sticky']"), ((), "[]")]
)
def test_unknown_or_no_assignors_are_refused(assignors: tuple[str, ...], unknown: str) -> None:
    h = Harness()
    said = f"unknown consumer group assignors {unknown}: use ['uniform', 'range']"
    with pytest.raises(ValueError, match=re.escape(said)):
        ConsumerGroupCoordinator(
            ConsumerGroupConfig(assignors=assignors), h.catalog, lambda: "m", 0
        )


@pytest.mark.parametrize("algorithm", ["murmur3", "xxh3"])
def test_the_metadata_hash_uses_the_configured_function(algorithm: str) -> None:
    h = Harness(config=ConsumerGroupConfig(topic_hash=algorithm))
    h.poll(h.client("a", topics=("orders", "payments")))
    expected = TopicHashCache(h.catalog, algorithm).group_hash(("orders", "payments"))
    assert h.group.metadata_hash == expected
    other = "xxh3" if algorithm == "murmur3" else "murmur3"
    assert expected != TopicHashCache(h.catalog, other).group_hash(("orders", "payments"))


def test_a_late_sweep_runs_a_deferred_assignment_and_the_session_timeouts_after_it() -> None:
    h = Harness(config=ConsumerGroupConfig(assignment_interval_ms=100))
    h.poll(h.client("a"))  # assigned at once
    h.clock.now += 10
    h.poll(h.client("b"))  # inside the interval: deferred to a timer
    assert not [e for e in h.events if isinstance(e, TargetAssignmentComputed) and e.members == 2]
    # Nobody heartbeats again; the sweep runs once, long after every deadline.
    late = h.core.expire(h.clock.now + 100_000)
    assert [e.members for e in late.events if isinstance(e, TargetAssignmentComputed)] == [2]
    assert sorted(e.member_id for e in late.events if isinstance(e, MemberRemoved)) == ["a", "b"]
    assert h.group.members == {}
