"""coordinator.serve.authz without a server: DescribeGroups and ConsumerGroupDescribe (KIP-848)
answer the groups a principal may not DESCRIBE with GROUP_AUTHORIZATION_FAILED, after the
others, each in its own API's DescribedGroup."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.broker.answers import make
from coordinator.security.acl import Operation, ResourceType
from coordinator.serve import authz
from protocol import apis
from protocol.codec import RequestHeader


def only_a(operation: Operation, resource_type: ResourceType, name: str) -> bool:
    return operation is Operation.DESCRIBE and resource_type is ResourceType.GROUP and name == "a"


@pytest.mark.parametrize(("api_key", "version", "field"), [
    (apis.DESCRIBE_GROUPS, 5, "groups"),
    (apis.CONSUMER_GROUP_DESCRIBE, 0, "group_ids"),
    (apis.CONSUMER_GROUP_DESCRIBE, 1, "group_ids"),
    (apis.SHARE_GROUP_DESCRIBE, 1, "group_ids"),
])
def test_undescribable_groups_are_refused_each_in_its_apis_shape(
    api_key: int, version: int, field: str
) -> None:
    request: Any = apis.request_class(api_key, version)(
        **{field: ("a", "b"), "include_authorized_operations": False}
    )
    plan = authz.plan(RequestHeader(api_key, version, 1, "t"), request, only_a)
    assert plan.error is None and getattr(plan.request, field) == ("a",)
    assert plan.amend is not None
    empty = make(apis.response_class(api_key, version), throttle_time=timedelta(0), groups=())
    amended = plan.amend(empty)
    [denied] = amended.groups
    assert (denied.group_id, denied.error_code) == ("b", ErrorCode.group_authorization_failed)


def test_share_group_heartbeat_needs_group_read_then_describe_on_its_topics() -> None:
    """KIP-932 (KafkaApis.handleShareGroupHeartbeat, Kafka 4.4)."""
    header = RequestHeader(apis.SHARE_GROUP_HEARTBEAT, 1, 1, "t")

    def request(topics: tuple[str, ...] | None) -> Any:
        return apis.request_class(apis.SHARE_GROUP_HEARTBEAT, 1)(
            group_id="g", member_id="m", member_epoch=0, rack_id=None,
            subscribed_topic_names=topics,
        )

    def may(operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if resource_type is ResourceType.GROUP:
            return operation is Operation.READ and name == "g"
        return operation is Operation.DESCRIBE and name == "seen"

    assert authz.plan(header, request(("seen",)), may).error is None
    assert authz.plan(header, request(None), may).error is None  # unchanged: nothing to judge
    assert authz.plan(header, request(("seen", "hidden")), may).error == (
        ErrorCode.topic_authorization_failed)
    assert authz.plan(header, request(("seen",)), lambda *_: False).error == (
        ErrorCode.group_authorization_failed)
