"""Replaying what heartbeats emitted rebuilds the same groups; invariants hold at every step."""

from __future__ import annotations

import uuid
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.consumer.model import (
    ConsumerGroupState,
    from_topic_partitions,
    to_topic_partitions,
)
from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.topics import TopicInfo
from tests.core.test_consumer_support import Harness, snapshot

NAMES = [f"c{i}" for i in range(5)]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("poll"), st.sampled_from(NAMES)),
        st.tuples(st.just("join"), st.sampled_from(NAMES), st.booleans(), st.booleans()),
        st.tuples(st.just("leave"), st.sampled_from(NAMES), st.booleans()),
        st.tuples(st.just("crash"), st.sampled_from(NAMES)),
        st.tuples(st.just("time"), st.integers(0, 50_000)),
        st.tuples(st.just("grow"), st.sampled_from(["orders", "payments"])),
        st.tuples(st.just("create"), st.integers(0, 3)),
        st.tuples(st.just("stale"), st.sampled_from(NAMES)),
    ),
    max_size=60,
)


def run(h: Harness, step: tuple) -> None:  # type: ignore[type-arg]
    kind = step[0]
    if kind == "poll" and step[1] in h.clients:
        h.poll(h.clients[step[1]])
    elif kind == "join" and step[1] not in h.clients:
        _, name, static, regex = step
        c = h.client(
            name,
            instance_id=f"i-{name}" if static else None,
            topics=None if regex else ("orders", "payments"),
            regex="(orders|new-.*)" if regex else None,
        )
        h.poll(c)
    elif kind == "leave" and step[1] in h.clients:
        c = h.clients[step[1]]
        h.leave(c, static=step[2] and c.instance_id is not None)
    elif kind == "crash":
        h.clients.pop(step[1], None)
    elif kind == "time":
        h.advance(step[1])
    elif kind == "grow":
        info = h.catalog.get(step[1])
        assert info is not None
        h.catalog.put(info.with_partitions(info.partitions + 1))
        h.core.topic_changed(step[1])
    elif kind == "create":
        name = f"new-{step[1]}"
        if h.catalog.get(name) is None:
            h.catalog.put(TopicInfo(name, uuid.UUID(int=1000 + step[1]), 2))
            h.core.topic_changed(name)
    elif kind == "stale" and step[1] in h.clients:
        c = h.clients[step[1]]
        h.send(member_id=c.member_id, member_epoch=c.epoch + 5, topic_partitions=())


@settings(max_examples=150, deadline=None)
@given(steps)
def test_replay_equals_live_and_invariants_hold(sequence) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    for step in sequence:
        run(h, step)
        h.check_invariants()
        for group in h.core.groups.values():
            assert group.group_epoch >= group.assignment_epoch
    replayed = h.replayed()
    assert replayed.keys() == h.core.groups.keys()
    for gid, group in h.core.groups.items():
        assert snapshot(replayed[gid]) == snapshot(group)
    # and the survivors converge: every subscribed partition owned exactly once
    h.settle(rounds=12)
    h.check_invariants()
    if h.clients and "g" in h.core.groups:
        group = h.group
        live = {c.member_id for c in h.clients.values() if c.joined}
        if group.state is ConsumerGroupState.STABLE and set(group.members) == live:
            owned = set().union(*(c.owned_set() for c in h.clients.values()))
            held = {
                (t, p)
                for m in group.members.values()
                for t, ps in m.assigned_partitions.items()
                for p in ps
            }
            assert owned == held
            subscribed = group.subscribed_topic_names()
            expected = {
                (info.topic_id, p)
                for info in h.catalog
                if info.name in subscribed
                for p in range(info.partitions)
            }
            assert held == expected


# -- the record form of a partition map ----------------------------------------------------------

partition_maps = st.dictionaries(
    st.uuids(), st.frozensets(st.integers(0, 2**31 - 1), max_size=5), max_size=3
).map(MappingProxyType)


@given(partition_maps)
def test_a_partition_map_s_record_form_is_canonical_and_reads_back(partitions: Any) -> None:
    """Topics by id, partitions ascending, empty topics left out; the one-topic shortcut gives
    the same as the general form."""
    tps = to_topic_partitions(partitions)
    assert [tp.topic_id for tp in tps] == sorted(
        (t for t, ps in partitions.items() if ps), key=lambda t: t.int
    )
    assert all(list(tp.partitions) == sorted(partitions[tp.topic_id]) for tp in tps)
    assert from_topic_partitions(tps) == {t: ps for t, ps in partitions.items() if ps}


def test_a_one_topic_map_with_no_partitions_has_no_record_form() -> None:
    t = uuid.UUID(int=7)
    assert to_topic_partitions(MappingProxyType({t: frozenset()})) == ()
    assert to_topic_partitions(MappingProxyType({t: frozenset({2, 1})})) == (
        TopicPartitions(t, (1, 2)),
    )
