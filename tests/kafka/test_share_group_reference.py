"""ShareGroupHeartbeat and ShareGroupDescribe on Apache Kafka 4.4 and on groupcoord, the same
requests to both (KIP-932): the refusals answer the same error codes and messages, three members
of one partition all get that partition (the simple assignor's sharing), and the described
group agrees. Intended difference: Kafka assigns a partition only once its share state is
initialized, so its first answers may carry an empty assignment; groupcoord assigns at once."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tests.support.kafka import unique
from tests.support.realclients import wait_until
from tests.support.sidecar_util import RawClient, create_topic, kio


def heartbeat(group: str, member: str, epoch: int, topics: tuple[str, ...] | None = None) -> Any:
    return kio(76, 1, "ShareGroupHeartbeatRequest", group_id=group, member_id=member,
               member_epoch=epoch, rack_id=None, subscribed_topic_names=topics)


def assigned(response: Any) -> list[int]:
    if response.assignment is None:
        return []
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


async def coordinator_ready(client: RawClient, group: str) -> None:
    """Kafka's group coordinator partition for `group` may still be created or loading."""
    find = kio(10, 4, "FindCoordinatorRequest", key_type=0, coordinator_keys=(group,))

    async def ready() -> bool:
        return (await client.call(find)).coordinators[0].error_code == ErrorCode.none

    await wait_until(ready, 60, f"a coordinator for {group}", interval=0.5)


async def refusals(client: RawClient, group: str, topic: str) -> list[tuple[int, str | None]]:
    """Requests each broker must refuse, and a join that must not be refused."""
    await coordinator_ready(client, group)
    member = str(uuid.uuid4())
    out: list[tuple[int, str | None]] = []

    def keep(r: Any) -> None:  # ids and epochs differ between the two brokers
        message = r.error_message
        if message is not None:
            message = message.replace(group, "G").replace(member, "M").replace(stranger, "S")
            message = re.sub(r"\(\d+\)", "(N)", message)
        out.append((int(r.error_code), message))

    stranger = str(uuid.uuid4())
    for request in (
        heartbeat(group, "", 0, (topic,)),
        heartbeat(group, "m" * 37, 0, (topic,)),
        heartbeat(group, member, 0, None),
        heartbeat(group, member, -2),
        heartbeat(group, member, 1),  # no such group yet
    ):
        keep(await client.call(request))
    joined = await client.call(heartbeat(group, member, 0, (topic,)))
    # Kafka 4.4 answers a first join with epoch 2 (and no partitions yet), groupcoord with 1:
    # clients only echo the epoch.
    assert joined.error_code == ErrorCode.none, joined
    for request in (
        heartbeat(group, member, joined.member_epoch + 5),
        heartbeat(group, stranger, 1),
        heartbeat(group, stranger, -1),
    ):
        keep(await client.call(request))
    return out


async def three_members_share_one_partition(client: RawClient, group: str, topic: str) -> Any:
    await coordinator_ready(client, group)
    members = [str(uuid.uuid4()) for _ in range(3)]
    epochs, held = {}, {}
    for m in members:
        r = await client.call(heartbeat(group, m, 0, (topic,)))
        assert r.error_code == ErrorCode.none, r
        epochs[m], held[m] = r.member_epoch, assigned(r)  # a join's answer always has one

    async def everyone_has_it() -> bool:
        for m in members:
            r = await client.call(heartbeat(group, m, epochs[m]))
            assert r.error_code == ErrorCode.none, r
            epochs[m] = r.member_epoch
            if r.assignment is not None:
                held[m] = assigned(r)
        return all(held.get(m) == [0] for m in members)

    await wait_until(everyone_has_it, 60, "every member to be assigned partition 0", interval=0.5)
    describe = kio(77, 1, "ShareGroupDescribeRequest", group_ids=(group,),
                   include_authorized_operations=False)
    return (await client.call(describe)).groups[0]


async def test_share_group_heartbeat_as_kafka_answers_it(kafka: Any,
                                                         server: Callable[..., Any]) -> None:
    topic = unique("share-ref")
    await create_topic(kafka.bootstrap, topic, 1)
    ours = server(topics={topic: 1})
    answers = []
    described = []
    for port in (kafka.nodes[0].port, ours.port):  # one node: it is the group coordinator
        client = await RawClient.connect(port)
        try:
            answers.append(await refusals(client, unique("share-ref-g"), topic))
            described.append(
                await three_members_share_one_partition(client, unique("share-ref-g"), topic))
        finally:
            client.close()
    theirs, mine = answers
    assert mine == theirs
    k, g = described
    assert (g.group_state, g.assignor_name, len(g.members)) == (
        k.group_state, k.assignor_name, len(k.members)) == ("Stable", "simple", 3)
    for d in (k, g):
        assert all([tp.partitions for tp in m.assignment.topic_partitions] == [(0,)]
                   for m in d.members)
