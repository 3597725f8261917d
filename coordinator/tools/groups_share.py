"""`groupcoord groups describe` of a KIP-932 share group: ShareGroupDescribe (API 77) for its
members and their assignments, DescribeShareGroupOffsets (API 90) for its share-partition start
offsets, which stand for the committed offsets in the views (CURRENT-OFFSET is the SPSO, LAG is
the log end offset minus it), as kafka-share-groups.sh --describe shows them.

Both calls go to the group's coordinator; a coordinator that does not offer them (a broker
without share groups) or does not know the id as a share group answers None, and the caller
falls back to the classic describe.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.broker.answers import make
from coordinator.tools.groups_wire import (
    Coordinator,
    GroupView,
    KafkaConnection,
    MemberView,
    check,
    committed,
    describe_on,
    find_coordinator,
    nested,
    with_retries,
)
from protocol import apis

__all__ = ["describe_group", "describe_share", "share_offsets"]


async def describe_group(
    host: str, port: int, group: str, timeout_s: float, offsets: bool = True
) -> GroupView:
    """FindCoordinator, then on the coordinator ConsumerGroupDescribe, ShareGroupDescribe or
    DescribeGroups, and (with `offsets`) OffsetFetch, or a share group's start offsets. A group
    that does not exist comes back in state Dead, as DescribeGroups answers."""

    async def attempt() -> GroupView:
        coordinator = await find_coordinator(host, port, group, timeout_s)
        conn = await KafkaConnection.open(coordinator.host, coordinator.port, timeout_s)
        try:
            view = await describe_share(conn, coordinator, group, timeout_s)
            if view is None:
                view = await describe_on(conn, coordinator, group, timeout_s)
            if offsets and view.group_type == "share":  # KIP-932: the start offsets
                view.offsets = await share_offsets(conn, group, timeout_s)
            elif offsets:
                view.offsets = await committed(conn, group, view, timeout_s)
            return view
        finally:
            conn.close()

    return await with_retries(timeout_s, attempt)


async def describe_share(
    conn: KafkaConnection, coordinator: Coordinator, group: str, timeout_s: float
) -> GroupView | None:
    if apis.SHARE_GROUP_DESCRIBE not in conn.versions:
        return None
    described = await conn.call(
        apis.SHARE_GROUP_DESCRIBE, timeout_s, group_ids=(group,),
        include_authorized_operations=False,
    )  # fmt: skip
    g = described.groups[0]
    if g.error_code == ErrorCode.group_id_not_found:
        return None
    check(g.error_code, "ShareGroupDescribe")
    view = GroupView(group, coordinator, g.group_state, "share", g.assignor_name or "",
                     group_type="share", group_epoch=int(g.group_epoch),
                     assignment_epoch=int(g.assignment_epoch))  # fmt: skip
    for m in g.members:
        assignment = {
            tp.topic_name: sorted(int(p) for p in tp.partitions)
            for tp in m.assignment.topic_partitions
            if tp.partitions
        }
        view.members.append(
            MemberView(m.member_id, None, m.client_id, m.client_host, assignment,
                       int(m.member_epoch))
        )  # fmt: skip
    return view


async def share_offsets(
    conn: KafkaConnection, group: str, timeout_s: float
) -> dict[str, dict[int, int]]:
    """topic -> partition -> start offset, for the partitions that have one."""
    version = conn.version(apis.DESCRIBE_SHARE_GROUP_OFFSETS)
    cls = nested(
        apis.DESCRIBE_SHARE_GROUP_OFFSETS, version, "DescribeShareGroupOffsetsRequestGroup"
    )
    response = await conn.call(
        apis.DESCRIBE_SHARE_GROUP_OFFSETS,
        timeout_s,
        groups=(make(cls, group_id=group, topics=None),),
    )
    result = response.groups[0]
    check(result.error_code, "DescribeShareGroupOffsets")
    offsets: dict[str, dict[int, int]] = {}
    for topic in result.topics:
        for p in topic.partitions:
            if p.error_code == ErrorCode.none and int(p.start_offset) >= 0:
                offsets.setdefault(topic.topic_name, {})[int(p.partition_index)] = int(
                    p.start_offset
                )
    return offsets
