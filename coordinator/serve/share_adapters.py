"""kio requests <-> the core's KIP-932 share-group commands and results: ShareGroupHeartbeat
(API 76) and ShareGroupDescribe (API 77), version 1 (Kafka 4.1-4.4's only version).

coordinator.serve.adapters registers these beside the classic and KIP-848 converters, so the
server routes 76/77 as the other group APIs: into the core, through the runtime (persist, then
reply).

Invariants:
- The assignment is sent only when the core says so (null otherwise); partitions ascending.
- A described member's assignment names only topics the catalog knows (Kafka leaves the others
  out); authorized operations are never computed (INT32_MIN). A failed group's other fields are
  defaults ("" state, epochs 0), as Kafka's DescribedGroup with only an error set.
- Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from coordinator.core.share.messages import (
    DescribedShareGroup,
    ShareGroupDescribe,
    ShareGroupDescribeResult,
    ShareGroupHeartbeat,
    ShareHeartbeatResponse,
)
from coordinator.serve import consumer_adapters
from protocol.apis import SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT, response_module
from protocol.codec import RequestHeader

__all__ = ["COMMAND_TYPES", "TO_COMMAND", "TO_RESPONSE", "error_result"]

COMMAND_TYPES: Final = (ShareGroupHeartbeat, ShareGroupDescribe)
_ZERO_THROTTLE: Final = i32Timedelta.parse(timedelta(0))
_AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)


def _heartbeat(header: RequestHeader, r: Any, client_host: str) -> ShareGroupHeartbeat:
    topics = r.subscribed_topic_names
    return ShareGroupHeartbeat(
        group_id=r.group_id,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        rack_id=r.rack_id,
        subscribed_topic_names=None if topics is None else tuple(topics),
        client_id=header.client_id or "",
        client_host=client_host,
    )


def _describe(header: RequestHeader, r: Any, client_host: str) -> ShareGroupDescribe:
    return ShareGroupDescribe(tuple(r.group_ids), r.include_authorized_operations)


TO_COMMAND: Final[dict[int, Callable[[RequestHeader, Any, str], object]]] = {
    SHARE_GROUP_HEARTBEAT: _heartbeat,
    SHARE_GROUP_DESCRIBE: _describe,
}


def _heartbeat_response(v: int, res: ShareHeartbeatResponse) -> object:
    mod = response_module(SHARE_GROUP_HEARTBEAT, v)
    return consumer_adapters.heartbeat_response(mod, mod.ShareGroupHeartbeatResponse, res)


def _describe_response(v: int, res: ShareGroupDescribeResult) -> object:
    mod = response_module(SHARE_GROUP_DESCRIBE, v)

    def group(g: DescribedShareGroup) -> object:
        members = tuple(
            mod.Member(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                assignment=mod.Assignment(
                    topic_partitions=tuple(
                        mod.TopicPartitions(topic_id=tid, topic_name=name, partitions=ps)
                        for tid, name, ps in m.assignment
                    )
                ),
            )
            for m in g.members
        )
        return mod.DescribedGroup(
            error_code=g.error,
            error_message=g.error_message,
            group_id=g.group_id,
            group_state=g.group_state,
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
            assignor_name=g.assignor_name,
            members=members,
            authorized_operations=_AUTHORIZED_OPERATIONS_OMITTED,
        )

    return mod.ShareGroupDescribeResponse(
        throttle_time=_ZERO_THROTTLE, groups=tuple(group(g) for g in res.groups)
    )


TO_RESPONSE: Final[dict[type, tuple[int, Callable[[int, Any], object]]]] = {
    ShareHeartbeatResponse: (SHARE_GROUP_HEARTBEAT, _heartbeat_response),
    ShareGroupDescribeResult: (SHARE_GROUP_DESCRIBE, _describe_response),
}


def error_result(
    header: RequestHeader, r: Any, error: ErrorCode
) -> ShareHeartbeatResponse | ShareGroupDescribeResult:
    """One error for a whole request (loading, a failed write, shutdown)."""
    if header.api_key == SHARE_GROUP_HEARTBEAT:
        return ShareHeartbeatResponse(error)
    return ShareGroupDescribeResult(tuple(DescribedShareGroup(g, error) for g in r.group_ids))
