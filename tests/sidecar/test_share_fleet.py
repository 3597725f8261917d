"""KIP-932 in a sidecar fleet: any member serves ShareFetch/ShareAcknowledge for any share group by
forwarding to the member that owns the group, so the fleet keeps one state per share partition;
and that state fails over with the group's state partition (kill -9 of the owner: acknowledged
records are never delivered again, acquired ones are)."""

from __future__ import annotations

import pytest

from tests.sidecar.test_fleet import FAST_FLEET, fleet, owner_of, settled
from tests.support import realclients as rc
from tests.support.share_wire import ACCEPT, ack_errors, deliveries, share_ack, share_fetch
from tests.support.sidecar_util import (
    RawClient,
    Stack,
    Upstream,
    create_topic,
    produce,
    stack,
    upstream,
)

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]


async def _acquire(client: RawClient, group: str, member: str, tid: object, first_epoch: int,
                   want: int) -> tuple[list[int], int]:
    """ShareFetch until `want` offsets were acquired: (offsets, the next epoch)."""
    offsets: list[int] = []
    epoch = [first_epoch]

    async def more() -> bool:
        response = await client.call(share_fetch(group, member, epoch[0], tid, max_wait_ms=500))
        epoch[0] += 1
        if response.error_code != 0:  # no session yet where the owner moved: open one
            epoch[0] = 0
            return False
        for d in deliveries(response).values():
            offsets.extend(d.offsets)
        return len(offsets) >= want

    await rc.wait_until(more, 60, f"{want} records acquired by {member}")
    return offsets, epoch[0]


async def test_one_share_state_across_the_fleet_and_its_failover(stack: Stack,
                                                                 upstream: Upstream) -> None:
    sidecars = await fleet(stack, upstream.bootstrap, 2, *FAST_FLEET)
    topic, group = upstream.name("fleet-shares"), upstream.name("fleet-sg")
    await create_topic(upstream.bootstrap, topic, 1)
    owner = await rc.wait_until(lambda: owner_of(stack, group, sidecars), 30, "an owner")
    other = next(s for s in sidecars if s is not owner)
    via_other = await RawClient.connect(other.port)
    via_owner = await RawClient.connect(owner.port)
    try:
        tid = await rc.wait_until(lambda: _topic_id(via_other, topic), 30, "the topic id")

        async def opened() -> bool:  # once the owner knows the topic too (it starts there)
            response = await via_other.call(share_fetch(group, "m1", 0, tid))
            return response.error_code == 0 and deliveries(response)[0].error == 0

        await rc.wait_until(opened, 30, "a share session on the owner")
        await produce(upstream.bootstrap, topic, [f"k{i}" for i in range(5)])
        got, epoch = await _acquire(via_other, group, "m1", tid, 1, 5)
        assert got == [0, 1, 2, 3, 4]
        # The owner answers from the same state: nothing left for another member.
        seen = await via_owner.call(share_fetch(group, "m2", 0, tid, max_wait_ms=300))
        assert deliveries(seen)[0].acquired == []
        acked = await via_other.call(share_ack(group, "m1", epoch, tid, {0: [(0, 1, ACCEPT)]}))
        assert ack_errors(acked) == {0: 0}, acked
    finally:
        via_other.close()
        via_owner.close()
    owner.kill()
    await settled(stack, [other])
    survivor = await RawClient.connect(other.port)
    try:
        got, _ = await _acquire(survivor, group, "m3", tid, 0, 3)
        assert sorted(got) == [2, 3, 4], got  # 0-1 acknowledged before the kill
    finally:
        survivor.close()


async def _topic_id(client: RawClient, topic: str) -> object:
    from tests.support.share_wire import topic_id

    try:
        return await topic_id(client, topic)
    except AssertionError:
        return None
