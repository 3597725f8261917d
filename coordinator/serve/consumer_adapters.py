"""kio requests <-> the core's KIP-848 commands and results: ConsumerGroupHeartbeat (API 68) and
ConsumerGroupDescribe (API 69), every advertised version (issue 23).

coordinator.serve.adapters registers these converters beside the classic APIs' (`TO_COMMAND`,
`TO_RESPONSE`, `error_result`), so the server routes 68/69 exactly as the classic group APIs:
into the core, through the runtime (persist, then reply).

Invariants:
- Owned partitions are sorted (the core's canonical order); a null topic id (kio's reading of
  the zero Uuid) is the zero Uuid.
- The response's assignment is sent only when the core says it changed (null = unchanged).
- ConsumerGroupDescribe v1 adds MemberType: 1, a consumer-protocol member; 0, a classic member
  inside the consumer group (the online upgrade/downgrade, issue 23 item 6). An assignment's
  topic id the catalog no longer knows is left out, as Kafka does; authorized operations are
  never computed (INT32_MIN).
- Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from coordinator.core.consumer.messages import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    DescribedConsumerGroup,
    HeartbeatResponse,
)
from coordinator.core.consumer.records import TopicPartitions
from protocol import fastpath
from protocol.apis import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, response_module
from protocol.codec import RequestHeader

__all__ = [
    "COMMAND_TYPES",
    "TO_COMMAND",
    "TO_RESPONSE",
    "HeartbeatResponse",
    "error_result",
    "fast_command",
    "heartbeat_frame",
]

COMMAND_TYPES: Final = (ConsumerGroupHeartbeat, ConsumerGroupDescribe)

_ZERO_UUID: Final = uuid.UUID(int=0)
_ZERO_THROTTLE: Final = i32Timedelta.parse(timedelta(0))
_AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
_CONSUMER_MEMBER: Final = 1  # ConsumerGroupDescribe v1 MemberType: the consumer protocol
_CLASSIC_MEMBER: Final = 0  # ... and the classic protocol
_ONE_MS: Final = timedelta(milliseconds=1)


def _heartbeat(header: RequestHeader, r: Any, client_host: str) -> ConsumerGroupHeartbeat:
    owned = r.topic_partitions
    return ConsumerGroupHeartbeat(
        group_id=r.group_id,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        instance_id=r.instance_id,
        rack_id=r.rack_id,
        rebalance_timeout_ms=r.rebalance_timeout // _ONE_MS,
        subscribed_topic_names=(
            None if r.subscribed_topic_names is None else tuple(r.subscribed_topic_names)
        ),
        # v0 (Kafka 4.0's schema, which kio follows; Java 3.9 sends it) has no regex field.
        subscribed_topic_regex=r.subscribed_topic_regex if header.api_version >= 1 else None,
        server_assignor=r.server_assignor,
        topic_partitions=(
            None
            if owned is None
            else tuple(
                TopicPartitions(tp.topic_id or _ZERO_UUID, tuple(sorted(tp.partitions)))
                for tp in owned
            )
        ),
        client_id=header.client_id or "",
        client_host=client_host,
        api_version=header.api_version,
    )


def fast_command(
    fields: fastpath.ConsumerHeartbeatFields, client_host: str
) -> tuple[RequestHeader, ConsumerGroupHeartbeat]:
    """`_heartbeat` for a request protocol.fastpath parsed: the same command (checked against
    kio's reading, tests/protocol/test_fastpath.py)."""
    (version, correlation_id, client_id, group_id, member_id, member_epoch, instance_id, rack_id,
     rebalance_timeout_ms, names, regex, assignor, owned) = fields  # fmt: skip
    header = RequestHeader(CONSUMER_GROUP_HEARTBEAT, version, correlation_id, client_id)
    command = ConsumerGroupHeartbeat(
        group_id=group_id,
        member_id=member_id,
        member_epoch=member_epoch,
        instance_id=instance_id,
        rack_id=rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=(
            None
            if owned is None
            else tuple(TopicPartitions(_topic_id(t), tuple(sorted(ps))) for t, ps in owned)
        ),
        client_id=client_id,
        client_host=client_host,
        api_version=version,
    )
    return header, command


# Every member repeats its topics' ids in each beat: one UUID per distinct id. Bounded.
_topic_ids: dict[bytes, uuid.UUID] = {}
_TOPIC_IDS_MAX: Final = 65_536


def _topic_id(raw: bytes) -> uuid.UUID:
    topic_id = _topic_ids.get(raw)
    if topic_id is None:
        topic_id = uuid.UUID(bytes=raw)
        if len(_topic_ids) >= _TOPIC_IDS_MAX:
            _topic_ids.clear()
        _topic_ids[raw] = topic_id
    return topic_id


def _describe(header: RequestHeader, r: Any, client_host: str) -> ConsumerGroupDescribe:
    return ConsumerGroupDescribe(tuple(r.group_ids), header.api_version)


TO_COMMAND: Final[dict[int, Callable[[RequestHeader, Any, str], object]]] = {
    CONSUMER_GROUP_HEARTBEAT: _heartbeat,
    CONSUMER_GROUP_DESCRIBE: _describe,
}


def _heartbeat_response(v: int, res: HeartbeatResponse) -> object:
    mod = response_module(CONSUMER_GROUP_HEARTBEAT, v)
    return heartbeat_response(mod, mod.ConsumerGroupHeartbeatResponse, res)


def heartbeat_response(mod: Any, response_type: Any, res: Any) -> object:
    """A KIP-848-shaped heartbeat's kio response (ConsumerGroupHeartbeat's, and
    ShareGroupHeartbeat's, whose fields are the same) from the core's result."""
    assignment = None
    if res.assignment is not None:
        assignment = mod.Assignment(
            topic_partitions=tuple(
                mod.TopicPartitions(topic_id=tp.topic_id, partitions=tp.partitions)
                for tp in res.assignment
            )
        )
    return response_type(
        throttle_time=_ZERO_THROTTLE,
        error_code=res.error,
        error_message=res.error_message,
        member_id=res.member_id,
        member_epoch=res.member_epoch,
        heartbeat_interval=i32Timedelta.parse(timedelta(milliseconds=res.heartbeat_interval_ms)),
        assignment=assignment,
    )


def heartbeat_frame(header: RequestHeader, res: HeartbeatResponse) -> bytes:
    """`_heartbeat_response`'s frame, written by protocol.fastpath instead of kio."""
    assignment = res.assignment
    return fastpath.consumer_heartbeat_response_frame(
        header.correlation_id,
        res.error,
        res.error_message,
        res.member_id,
        res.member_epoch,
        res.heartbeat_interval_ms,
        None if assignment is None else [(tp.topic_id.bytes, tp.partitions) for tp in assignment],
    )


def _describe_response(v: int, res: ConsumerGroupDescribeResult) -> object:
    mod = response_module(CONSUMER_GROUP_DESCRIBE, v)

    def group(g: DescribedConsumerGroup) -> object:
        d = g.description
        if d is None:
            # Kafka 4.4 leaves a failed group's fields at their defaults: no state, epochs 0
            # (checked against Kafka by tests/conformance).
            return mod.DescribedGroup(
                error_code=g.error,
                error_message=g.error_message,
                group_id=g.group_id,
                group_state="",
                group_epoch=0,
                assignment_epoch=0,
                assignor_name="",
                members=(),
                authorized_operations=_AUTHORIZED_OPERATIONS_OMITTED,
            )
        names = dict(g.topic_names)

        def assignment(tps: tuple[TopicPartitions, ...]) -> object:
            return mod.Assignment(
                topic_partitions=tuple(
                    mod.TopicPartitions(
                        topic_id=tp.topic_id,
                        topic_name=names[tp.topic_id],
                        partitions=tp.partitions,
                    )
                    for tp in tps
                    if tp.topic_id in names
                )
            )

        members = []
        for m in d.members:
            kwargs: dict[str, Any] = {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": m.subscribed_topic_names,
                # Kafka 4.4 describes "no regex" as "" (checked by tests/conformance).
                "subscribed_topic_regex": m.subscribed_topic_regex or "",
                "assignment": assignment(m.assignment),
                "target_assignment": assignment(m.target_assignment),
            }
            if v >= 1:
                kwargs["member_type"] = _CLASSIC_MEMBER if m.classic else _CONSUMER_MEMBER
            members.append(mod.Member(**kwargs))
        return mod.DescribedGroup(
            error_code=ErrorCode.none,
            error_message=None,
            group_id=d.group_id,
            group_state=d.state.value,
            group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name,
            members=tuple(members),
            authorized_operations=_AUTHORIZED_OPERATIONS_OMITTED,
        )

    return mod.ConsumerGroupDescribeResponse(
        throttle_time=_ZERO_THROTTLE, groups=tuple(group(g) for g in res.groups)
    )


TO_RESPONSE: Final[dict[type, tuple[int, Callable[[int, Any], object]]]] = {
    HeartbeatResponse: (CONSUMER_GROUP_HEARTBEAT, _heartbeat_response),
    ConsumerGroupDescribeResult: (CONSUMER_GROUP_DESCRIBE, _describe_response),
}


def error_result(
    header: RequestHeader, r: Any, error: ErrorCode
) -> HeartbeatResponse | ConsumerGroupDescribeResult:
    """One error for a whole request (loading, a failed write, shutdown)."""
    if header.api_key == CONSUMER_GROUP_HEARTBEAT:
        return HeartbeatResponse(error)
    return ConsumerGroupDescribeResult(tuple(DescribedConsumerGroup(g, error) for g in r.group_ids))
