"""Real clients over real sockets: N members of one client kind split a 12-partition topic.

Issue 2, "Tests that must pass": every partition is owned by exactly one member once stable, and the
coordinator's DescribeGroups (through an admin client) agrees with what each client says it owns.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.realclients import (
    PARTITIONS,
    assert_stable_and_described,
    describe_kafka_python,
    kind_params,
    require_kind,
)

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("kind", kind_params())
async def test_n_members_split_the_topic(request, server, members, kind, n):
    require_kind(request, kind)
    broker = server(topics={"orders": PARTITIONS})
    group = f"g-{kind}-{n}"
    ms = [await members(kind, f"{kind}-{i}", bootstrap=broker.bootstrap, group=group,
                        topic="orders", assignors=["range"], session_timeout_ms=10000)
          for i in range(n)]
    view = await assert_stable_and_described(broker, group, ms)
    assert view.protocol == "range"
    assert set(view.client_ids.values()) == {m.name for m in ms}
    # A second admin client (kafka-python) reads the same group the same way.
    other = await asyncio.to_thread(describe_kafka_python, broker.bootstrap, group)
    assert other.members == view.members
    assert other.protocol == "range"
    # Range on one topic: counts differ by at most one (12 over 5 = 3,3,2,2,2).
    sizes = sorted(len(m.owned) for m in ms)
    assert sizes[-1] - sizes[0] <= 1, sizes
