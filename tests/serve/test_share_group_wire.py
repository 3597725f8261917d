"""KIP-932 share groups over a real socket: kio-encoded ShareGroupHeartbeat (76) and
ShareGroupDescribe (77) v1 against the standalone server, ApiVersions advertising them, the one
namespace of group ids, and a restart (kill -9) that restores the share group from its records."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from tests.support.sidecar_util import RawClient, kio


def heartbeat(group: str, member: str, epoch: int, topics: tuple[str, ...] | None = None) -> Any:
    return kio(76, 1, "ShareGroupHeartbeatRequest", group_id=group, member_id=member,
               member_epoch=epoch, rack_id=None, subscribed_topic_names=topics)


def describe(*groups: str) -> Any:
    return kio(77, 1, "ShareGroupDescribeRequest", group_ids=groups,
               include_authorized_operations=False)


def partitions(response: Any) -> list[int]:
    assert response.assignment is not None
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


async def test_share_group_membership_survives_a_restart(server: Callable[..., Any]) -> None:
    broker = server(topics={"t": 3}, share_heartbeat_interval_ms=7000)  # a setting reaches it
    client = await RawClient.connect(broker.port)
    versions = await client.call(kio(18, 3, "ApiVersionsRequest", client_software_name="test",
                                     client_software_version="1"))
    advertised = {int(k.api_key): (int(k.min_version), int(k.max_version))
                  for k in versions.api_keys}
    assert advertised[76] == (1, 1) and advertised[77] == (1, 1)

    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    first = await client.call(heartbeat("g", m1, 0, ("t",)))
    assert (first.error_code, first.member_id, first.member_epoch) == (ErrorCode.none, m1, 1)
    assert first.heartbeat_interval.total_seconds() == 7 and partitions(first) == [0, 1, 2]
    second = await client.call(heartbeat("g", m2, 0, ("t",)))
    # 3 partitions, 2 members: each partition to one member, 2 + 1 (which gets 2 is Kafka's
    # HashMap order, ours the member ids' order).
    again = await client.call(heartbeat("g", m1, 1))
    assert (second.member_epoch, again.member_epoch) == (2, 2)
    assert sorted(partitions(again) + partitions(second)) == [0, 1, 2]
    fenced = await client.call(heartbeat("g", m1, 7))
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    unknown = await client.call(heartbeat("g", str(uuid.uuid4()), 2))
    assert unknown.error_code == ErrorCode.unknown_member_id

    consumer = kio(68, 1, "ConsumerGroupHeartbeatRequest", group_id="cg", member_id=m1,
                   member_epoch=0, instance_id=None, rack_id=None,
                   rebalance_timeout=timedelta(seconds=30),
                   subscribed_topic_names=("t",), subscribed_topic_regex=None,
                   server_assignor=None, topic_partitions=())
    assert (await client.call(consumer)).error_code == ErrorCode.none
    wrong = await client.call(heartbeat("cg", m1, 0, ("t",)))
    assert (wrong.error_code, wrong.error_message) == (
        ErrorCode.group_id_not_found, "Group cg is not a share group.")

    before = (await client.call(describe("g", "cg", "nope"))).groups
    g = before[0]
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        ErrorCode.none, "Stable", 2, 2, "simple")
    assert {m.member_id for m in g.members} == {m1, m2}
    assert [x.error_code for x in before[1:]] == [ErrorCode.group_id_not_found] * 2
    assert before[1].error_message == "Group cg is not a share group."
    client.close()

    broker.stop()  # SIGKILL: only what was written before the replies is there
    restarted = server(topics={"t": 3}, extra=["--data-dir", str(broker.data_dir)])
    client = await RawClient.connect(restarted.port)
    after = (await client.call(describe("g"))).groups[0]
    assert after == g
    beat = await client.call(heartbeat("g", m2, 2))
    assert (beat.error_code, beat.member_epoch) == (ErrorCode.none, 2)
    left = await client.call(heartbeat("g", m2, -1))
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    final = (await client.call(describe("g"))).groups[0]
    assert [m.member_id for m in final.members] == [m1] and final.group_epoch == 3
    client.close()
