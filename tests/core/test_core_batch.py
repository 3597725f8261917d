"""GroupCoordinator.handle_many (the server's batch of fast-path commits) against handle."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.messages import CommitPartition, CommitTopic, Heartbeat, OffsetCommit
from tests.support.fakeclock import Harness

partitions = st.builds(
    CommitPartition,
    st.integers(-1, 5),  # 4 and 5 do not exist (orders has 4 partitions), -1 never does
    st.integers(-1, 2**40),
    st.integers(-1, 3),
    st.none() | st.text(max_size=3),
)
topics = st.builds(
    CommitTopic, st.sampled_from(["orders", "nope"]), st.tuples(partitions) | st.tuples()
)
commits = st.builds(
    OffsetCommit,
    st.sampled_from(["g0", "g1", "g2"]),  # group_id
    st.sampled_from([-1, -1, 0, 1]),  # generation: mostly simple commits
    st.sampled_from(["", "", "m-1"]),  # member_id
    st.none(),
    st.sampled_from([-1, 60_000]),  # retention_time_ms
    st.lists(topics, max_size=2).map(tuple),
    st.sampled_from([2, 7, 9]),
)
heartbeats = st.builds(
    Heartbeat, st.sampled_from(["g0", "g1"]), st.just(0), st.just("m"), st.none()
)
batches = st.lists(st.lists(commits | heartbeats, min_size=1, max_size=8), min_size=1, max_size=4)


def state(h: Harness) -> Any:
    return (
        [(rt, h.replies[rt]) for rt in sorted(h.replies)],
        h.records,
        h.events,
        {g: h.core.group(g) for g in ("g0", "g1", "g2")},
    )


@settings(max_examples=150, deadline=None)
@given(batches)
def test_handle_many_is_handle_in_order(batches: list[list[Any]]) -> None:
    one, many = Harness(), Harness()
    for batch in batches:
        for command in batch:
            one.send(command)
        first = many._next + 1
        many._next += len(batch)
        many.absorb(many.core.handle_many(list(enumerate(batch, first)), many.now))
        one.advance(100)
        many.advance(100)
    assert state(many) == state(one)
    assert len(many.replies) == sum(len(b) for b in batches)  # nothing parked, nothing lost
