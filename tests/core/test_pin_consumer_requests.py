"""What a ConsumerGroupHeartbeat's fields do, pinned where `make mutation` found them loose:
- GroupCoordinatorService's request checks answer INVALID_REQUEST with Kafka's own messages, in
  its order, and the empty member id is refused at v0 too when the epoch says the member exists
  (above 0) or leaves (-1);
- every optional field the request leaves out (null, or -1 for the rebalance timeout) keeps the
  member's value, and one it gives replaces it, alone or with others (Kafka's
  ConsumerGroupMember.Builder maybeUpdate* calls); the client id and host are always the
  request's; a classic member heartbeating with the consumer protocol becomes a consumer one."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.consumer import ConsumerGroupHeartbeat
from coordinator.core.consumer.records import TopicPartitions
from tests.core.test_consumer_support import Harness
from tests.core.test_pin_consumer_classic_member import classic_join

JOIN: dict[str, Any] = {"member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 5_000,
                        "subscribed_topic_names": ("orders",), "topic_partitions": ()}  # fmt: skip


@pytest.mark.parametrize(("fields", "message"), [
    (dict(JOIN, member_id=""), "MemberId can't be empty."),
    (dict(JOIN, member_id="", member_epoch=1, api_version=0), "MemberId can't be empty."),
    (dict(JOIN, member_id="", member_epoch=-1, api_version=0), "MemberId can't be empty."),
    (dict(JOIN, group_id=""), "GroupId can't be empty."),
    (dict(JOIN, instance_id=""), "InstanceId can't be empty."),
    (dict(JOIN, rack_id=""), "RackId can't be empty."),
    (dict(JOIN, rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided in first request."),
    (dict(JOIN, topic_partitions=None), "TopicPartitions must be empty when (re-)joining."),
    (dict(JOIN, subscribed_topic_names=None),
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({"member_id": "m", "member_epoch": -2}, "InstanceId can't be null."),
    ({"member_id": "m", "member_epoch": -3}, "MemberEpoch is invalid."),
])  # fmt: skip
def test_invalid_requests_are_refused_with_kafkas_message(
    fields: dict[str, Any], message: str
) -> None:
    h = Harness()
    fields.setdefault("group_id", "g")
    result = h.core.heartbeat(ConsumerGroupHeartbeat(**fields), h.clock.now)
    assert result.response is not None and not result.records
    assert (result.response.error.name, result.response.error_message) == (
        "invalid_request", message)  # fmt: skip


def test_a_v0_join_without_a_member_id_gets_one() -> None:
    h = Harness()
    response = h.send(**dict(JOIN, member_id="", api_version=0))
    assert response.error.name == "none" and response.member_id == "generated-1"


def fields_of(h: Harness) -> tuple[Any, ...]:
    m = h.group.members["m"]
    return (m.instance_id, m.rack_id, m.rebalance_timeout_ms, m.server_assignor,
            tuple(sorted(m.subscribed_topic_names)), m.subscribed_topic_regex, m.client_id,
            m.client_host)  # fmt: skip


def test_each_field_a_heartbeat_gives_replaces_the_members_and_the_others_are_kept() -> None:
    h = Harness()
    h.send(member_id="m", member_epoch=0, instance_id="i", rack_id="r1", rebalance_timeout_ms=5_000,
           server_assignor="range", subscribed_topic_regex="pay.*", topic_partitions=(),
           client_id="c1", client_host="/h1")  # fmt: skip
    h.advance(0)
    base = ("i", "r1", 5_000, "range", (), "pay.*", "c1", "/h1")
    assert fields_of(h) == base

    def beat(**changed: Any) -> tuple[Any, ...]:
        m = h.group.members["m"]
        owned = tuple(TopicPartitions(t, tuple(sorted(ps)))
                      for t, ps in m.assigned_partitions.items())  # fmt: skip
        fields = {"member_id": "m", "member_epoch": m.member_epoch, "topic_partitions": owned,
                      "client_id": "c1", "client_host": "/h1"}  # fmt: skip
        response = h.send(**(fields | changed))
        assert response.error.name == "none", response
        return fields_of(h)

    assert beat() == base  # a steady heartbeat changes nothing
    assert beat(rack_id="r2") == ("i", "r2", 5_000, "range", (), "pay.*", "c1", "/h1")
    assert beat(rebalance_timeout_ms=1) == ("i", "r2", 1, "range", (), "pay.*", "c1", "/h1")
    assert beat(rebalance_timeout_ms=-2)[2] == -2  # only -1 means "unchanged"
    assert beat(rebalance_timeout_ms=7_000) == ("i", "r2", 7_000, "range", (), "pay.*", "c1",
                                                "/h1")  # fmt: skip
    assert beat(server_assignor="uniform") == ("i", "r2", 7_000, "uniform", (), "pay.*", "c1",
                                               "/h1")  # fmt: skip
    assert beat(subscribed_topic_regex="or.*") == ("i", "r2", 7_000, "uniform", (), "or.*", "c1",
                                                   "/h1")  # fmt: skip
    assert beat(subscribed_topic_names=("audit",)) == (
        "i", "r2", 7_000, "uniform", ("audit",), "or.*", "c1", "/h1")  # fmt: skip
    assert beat(client_id="c2") == ("i", "r2", 7_000, "uniform", ("audit",), "or.*", "c2", "/h1")
    assert beat(client_id="c2", client_host="/h2") == (
        "i", "r2", 7_000, "uniform", ("audit",), "or.*", "c2", "/h2")  # fmt: skip
    # With the instance id given again and a field changed, nothing else moves either.
    assert beat(instance_id="i", client_id="c2", client_host="/h2", rack_id="r3") == (
        "i", "r3", 7_000, "uniform", ("audit",), "or.*", "c2", "/h2")  # fmt: skip
    assert h.replayed()["g"].members["m"] == h.group.members["m"]  # record 5 says the same


def test_a_classic_member_heartbeating_with_the_consumer_protocol_becomes_one() -> None:
    h = Harness()
    h.client("n1")
    h.settle()
    mid = classic_join(h).member_id
    member = h.group.members[mid]
    assert member.classic is not None
    response = h.send(member_id=mid, member_epoch=member.member_epoch, client_id="cl",
                      client_host="/h", topic_partitions=())  # fmt: skip
    assert response.error.name == "none"
    assert h.group.members[mid].classic is None


def test_an_unsupported_server_assignor_is_refused_naming_the_supported_ones() -> None:
    h = Harness()
    response = h.send(**(JOIN | {"server_assignor": "sticky"}))
    assert (response.error.name, response.error_message) == (
        "unsupported_assignor",
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.")  # fmt: skip
