"""KIP-848 consumer groups in a sidecar fleet (issue 23): the fleet answers ConsumerGroupHeartbeat
and ConsumerGroupDescribe as it answers the classic group APIs, whatever the upstream offers
(tansu has neither), routing each to the member that owns the group's state partition; the
group's records travel in the state topic, so a kill -9 of the owner moves the group, with its
epochs and assignment, to the member that takes the partition over.

Two sidecars in front of one upstream (tansu, or Apache Kafka 4.4), a confluent-kafka consumer
(group.protocol=consumer) at each: one group of two. Then the owner (and its pod's consumer) is
killed: the other consumer keeps its member id and member epoch, the group epoch goes on from
where it was (a bump for the fenced member, never back to 1), and the survivor ends up owning
every partition.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.tools.groups_wire import one_call
from protocol import apis
from tests.sidecar.test_fleet import owner_of, settled
from tests.support import realclients as rc
from tests.support.sidecar_util import HOST, Sidecar, Stack, Upstream, create_topic, stack, upstream

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

TOPIC, GROUP, PARTITIONS = "kip848-fleet", "fleet-consumers", 6
CONSUMER_ARGS = ("--consumer-heartbeat-interval-ms", "500", "--consumer-session-timeout-ms", "4000")


async def describe(s: Sidecar) -> Any:
    """ConsumerGroupDescribe (API 69) through one sidecar."""
    response = await one_call(HOST, s.port, apis.CONSUMER_GROUP_DESCRIBE, 10, group_ids=(GROUP,),
                              include_authorized_operations=False)  # fmt: skip
    (described,) = response.groups
    return described


def epochs(described: Any) -> dict[str, int]:
    return {m.member_id: m.member_epoch for m in described.members}


async def test_a_consumer_group_spans_the_fleet_and_survives_its_owners_kill(
    stack: Stack, upstream: Upstream, members: Any
) -> None:
    sidecars = [stack.sidecar(upstream.bootstrap, *CONSUMER_ARGS, fleet=True) for _ in range(2)]
    await settled(stack, sidecars)
    topic = upstream.name(TOPIC)
    await create_topic(upstream.bootstrap, topic, PARTITIONS)
    ms = [
        await members("confluent", f"kip848-{i}", bootstrap=s.bootstrap, group=GROUP,
                      topic=topic, assignors=["uniform"], group_protocol="consumer")
        for i, s in enumerate(sidecars)
    ]  # fmt: skip

    async def one_stable_group() -> Any:
        if not (rc.partition_of(ms, PARTITIONS) and all(m.member_id for m in ms)):
            return None
        views = [await describe(s) for s in sidecars]  # the same group through either member
        ok = all(v.error_code == 0 and v.group_state == "Stable" for v in views)
        same = len({tuple(sorted(epochs(v).items())) for v in views}) == 1
        return (
            views[0] if ok and same and set(epochs(views[0])) == {m.member_id for m in ms} else None
        )

    before = await rc.wait_until(one_stable_group, 60, "one Stable group of 2 across the fleet",
                                 interval=0.2, explain=stack.explain)  # fmt: skip
    owner = owner_of(stack, GROUP, sidecars)
    assert owner is not None, stack.explain()
    index = sidecars.index(owner)
    survivor, survivor_member = sidecars[1 - index], ms[1 - index]
    owner.kill()  # kill -9 of the pod: its sidecar and its consumer
    ms[index].kill()

    async def moved() -> Any:
        if not rc.partition_of([survivor_member], PARTITIONS):
            return None
        view = await describe(survivor)
        ok = view.error_code == 0 and view.group_state == "Stable" and len(view.members) == 1
        return view if ok else None

    after = await rc.wait_until(moved, 60, "the survivor to own every partition, Stable",
                                interval=0.2, explain=stack.explain)  # fmt: skip
    assert owner_of(stack, GROUP, [survivor]) is survivor
    # The group went on from its epochs: the fenced member bumped it once more (at least).
    assert after.group_epoch > before.group_epoch, (before, after)
    assert after.assignment_epoch == after.group_epoch
    (member,) = after.members
    assert member.member_id == survivor_member.member_id
    assert member.member_epoch >= epochs(before)[member.member_id]
    assert member.member_epoch == after.group_epoch  # reconciled to the new target
