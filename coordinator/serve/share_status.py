"""A KIP-932 share group for the status page and its JSON (`/groups`, `groupcoord groups`), in
the shape of the other groups (coordinator.serve.status): the group epoch stands for the
generation, the assignor for the protocol; each member shows its epoch and assignment.

Offsets: one row per share partition (with state, or assigned to a member), where the committed
offset is the share-partition start offset (SPSO) and the lag is Kafka's share lag (KIP-1226):
end offset - SPSO - records already acknowledged or archived past it, None where the end offset
is unknown. A partition is read by every member it is assigned to: `member_id` lists them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.share.messages import ShareGroupDescribe
from coordinator.core.share.partition import SharePartition
from coordinator.serve.share_metrics import record_counts

__all__ = ["share_group"]

TopicPartition = tuple[str, int]
EndOffsets = Callable[[list[TopicPartition]], Mapping[TopicPartition, int]]


def share_group(
    core: GroupCoordinator, group_id: str, end_offsets: EndOffsets | None
) -> dict[str, Any] | None:
    share = core.share
    if group_id not in share.groups:
        return None
    d = share.describe(ShareGroupDescribe((group_id,))).groups[0]
    session_ms = core.config.share_session_timeout_ms
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": None,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "session_timeout_ms": session_ms,
            "leader": False,
            "member_epoch": m.member_epoch,
            "member_state": "stable",
            "subscribed_topics": list(m.subscribed_topic_names),
            "assignment": {name: list(ps) for _, name, ps in m.assignment},
        }
        for m in d.members
    ]
    return {
        "group_id": group_id,
        "type": "share",
        "state": d.group_state,
        "protocol_type": "share",
        "protocol": d.assignor_name,
        "generation_id": d.group_epoch,
        "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
        "leader": None,
        "members": members,
        "pending_members": 0,
        "rebalancing": None,
        "offsets": _offsets(core, group_id, members, end_offsets),
        "rebalances": [],
        "extra": {},
    }


def _offsets(
    core: GroupCoordinator,
    group_id: str,
    members: list[dict[str, Any]],
    end_offsets: EndOffsets | None,
) -> list[dict[str, Any]]:
    owners: dict[TopicPartition, list[str]] = {}
    for m in members:
        for topic, parts in m["assignment"].items():
            for p in parts:
                owners.setdefault((topic, p), []).append(m["member_id"])
    states: dict[TopicPartition, SharePartition] = {}
    for (gid, topic_id, partition), shared in list(core.share.partitions.items()):
        name = core.topics.name_of(topic_id)
        if gid == group_id and name is not None:
            states[name, partition] = shared
    partitions = sorted(owners.keys() | states.keys())
    ends: Mapping[TopicPartition, int] = {}
    if end_offsets is not None and partitions:
        try:
            ends = end_offsets(partitions)
        except Exception:  # a broken source must not take the page down: ends unknown
            ends = {}
    rows = []
    for tp in partitions:
        part = states.get(tp)
        end = ends.get(tp)
        start = None if part is None else part.start_offset
        counts, _ = record_counts(part) if part is not None else ({}, 0)
        complete = counts.get("acknowledged", 0) + counts.get("archived", 0)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed_offset": start,
                "start_offset": start,
                "end_offset": end,
                "lag": None if start is None or end is None else max(0, end - start - complete),
                "in_flight": counts,
                "member_id": ",".join(owners.get(tp, [])) or None,
            }
        )
    return rows
