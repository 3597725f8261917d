"""kio requests <-> the core's KIP-932 offset admin commands and results:
DescribeShareGroupOffsets (API 90, v0-v1), AlterShareGroupOffsets (API 91, v0) and
DeleteShareGroupOffsets (API 92, v0), Kafka 4.4's versions.

coordinator.serve.adapters registers these beside the other group APIs' converters, so the server
routes 90-92 as it routes them: into the core, through the runtime (persist, then reply).

Invariants:
- DescribeShareGroupOffsets v1 carries the Lag (KIP-1226); v0 does not. A null Topics asks for
  every share partition of the group.
- Unknown topics answer a null topic id.
- Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from coordinator.core.share.admin_messages import (
    AlterShareGroupOffsets,
    AlterShareGroupOffsetsResult,
    DeleteShareGroupOffsets,
    DeleteShareGroupOffsetsResult,
    DescribedShareOffsetGroup,
    DescribeShareGroupOffsets,
    DescribeShareGroupOffsetsResult,
    ShareOffsetsGroupRequest,
)
from protocol.apis import (
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    response_module,
)
from protocol.codec import RequestHeader

__all__ = ["API_KEYS", "COMMAND_TYPES", "TO_COMMAND", "TO_RESPONSE", "error_result"]

API_KEYS: Final = frozenset(
    {DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS}
)
COMMAND_TYPES: Final = (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets)
_ZERO_THROTTLE: Final = i32Timedelta.parse(timedelta(0))
_FIRST_WITH_LAG: Final = 1


def _describe(header: RequestHeader, r: Any, client_host: str) -> DescribeShareGroupOffsets:
    return DescribeShareGroupOffsets(
        tuple(
            ShareOffsetsGroupRequest(
                g.group_id,
                None
                if g.topics is None
                else tuple((t.topic_name, tuple(t.partitions)) for t in g.topics),
            )
            for g in r.groups
        )
    )


def _alter(header: RequestHeader, r: Any, client_host: str) -> AlterShareGroupOffsets:
    return AlterShareGroupOffsets(
        r.group_id,
        tuple(
            (t.topic_name, tuple((p.partition_index, p.start_offset) for p in t.partitions))
            for t in r.topics
        ),
    )


def _delete(header: RequestHeader, r: Any, client_host: str) -> DeleteShareGroupOffsets:
    return DeleteShareGroupOffsets(r.group_id, tuple(t.topic_name for t in r.topics))


TO_COMMAND: Final[dict[int, Callable[[RequestHeader, Any, str], object]]] = {
    DESCRIBE_SHARE_GROUP_OFFSETS: _describe,
    ALTER_SHARE_GROUP_OFFSETS: _alter,
    DELETE_SHARE_GROUP_OFFSETS: _delete,
}


def _describe_response(v: int, res: DescribeShareGroupOffsetsResult) -> object:
    mod = response_module(DESCRIBE_SHARE_GROUP_OFFSETS, v)

    def partition(p: Any) -> object:
        fields: dict[str, Any] = {
            "partition_index": p.partition,
            "start_offset": p.start_offset,
            "leader_epoch": p.leader_epoch,
            "error_code": p.error,
            "error_message": p.error_message,
        }
        if v >= _FIRST_WITH_LAG:
            fields["lag"] = p.lag
        return mod.DescribeShareGroupOffsetsResponsePartition(**fields)

    groups = tuple(
        mod.DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id,
            topics=tuple(
                mod.DescribeShareGroupOffsetsResponseTopic(
                    topic_name=t.name,
                    topic_id=t.topic_id,
                    partitions=tuple(partition(p) for p in t.partitions),
                )
                for t in g.topics
            ),
            error_code=g.error,
            error_message=g.error_message,
        )
        for g in res.groups
    )
    return mod.DescribeShareGroupOffsetsResponse(throttle_time=_ZERO_THROTTLE, groups=groups)


def _alter_response(v: int, res: AlterShareGroupOffsetsResult) -> object:
    mod = response_module(ALTER_SHARE_GROUP_OFFSETS, v)
    return mod.AlterShareGroupOffsetsResponse(
        throttle_time=_ZERO_THROTTLE,
        error_code=res.error,
        error_message=res.error_message,
        responses=tuple(
            mod.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.name,
                topic_id=t.topic_id,
                partitions=tuple(
                    mod.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition,
                        error_code=p.error,
                        error_message=p.error_message,
                    )
                    for p in t.partitions
                ),
            )
            for t in res.topics
        ),
    )


def _delete_response(v: int, res: DeleteShareGroupOffsetsResult) -> object:
    mod = response_module(DELETE_SHARE_GROUP_OFFSETS, v)
    return mod.DeleteShareGroupOffsetsResponse(
        throttle_time=_ZERO_THROTTLE,
        error_code=res.error,
        error_message=res.error_message,
        responses=tuple(
            mod.DeleteShareGroupOffsetsResponseTopic(
                topic_name=t.name,
                topic_id=t.topic_id,
                error_code=t.error,
                error_message=t.error_message,
            )
            for t in res.topics
        ),
    )


TO_RESPONSE: Final[dict[type, tuple[int, Callable[[int, Any], object]]]] = {
    DescribeShareGroupOffsetsResult: (DESCRIBE_SHARE_GROUP_OFFSETS, _describe_response),
    AlterShareGroupOffsetsResult: (ALTER_SHARE_GROUP_OFFSETS, _alter_response),
    DeleteShareGroupOffsetsResult: (DELETE_SHARE_GROUP_OFFSETS, _delete_response),
}


def error_result(
    header: RequestHeader, r: Any, error: ErrorCode
) -> DescribeShareGroupOffsetsResult | AlterShareGroupOffsetsResult | DeleteShareGroupOffsetsResult:
    """One error for a whole request (loading, a failed write, shutdown)."""
    if header.api_key == DESCRIBE_SHARE_GROUP_OFFSETS:
        return DescribeShareGroupOffsetsResult(
            tuple(DescribedShareOffsetGroup(g.group_id, (), error) for g in r.groups)
        )
    if header.api_key == ALTER_SHARE_GROUP_OFFSETS:
        return AlterShareGroupOffsetsResult(error)
    return DeleteShareGroupOffsetsResult(error)
