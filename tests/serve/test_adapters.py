"""serve.adapters: every group API and version, and each version rule of docs/protocol.md §2."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.core import messages as m
from coordinator.serve import adapters
from protocol import apis
from protocol.codec import RequestHeader, decode_request, encode_response
from tests.protocol.test_codec import read_response, request_frame, write

E = ErrorCode
GROUP_VERSIONS = [
    (spec.api_key, v)
    for spec in apis.API_TABLE
    if spec.api_key in apis.GROUP_APIS
    for v in range(spec.min_version, spec.max_version + 1)
]


def hdr(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(api_key, version, 1, "client-1")


def req(api_key: int, version: int, **kwargs: Any) -> Any:
    return apis.request_class(api_key, version)(**kwargs)


def nested(api_key: int, version: int, cls_name: str, **kwargs: Any) -> Any:
    return getattr(apis.request_module(api_key, version), cls_name)(**kwargs)


def through_wire(header: RequestHeader, response: object) -> Any:
    """Encode with the codec and read back with kio: proves the entity fits its version."""
    _, decoded = read_response(
        encode_response(header, response), header.api_key, header.api_version
    )
    assert decoded == response
    return decoded


# --------------------------------------------------------------------------------------------------
# Every API and version: commands from random requests, error responses that encode


@pytest.mark.parametrize(("api_key", "version"), GROUP_VERSIONS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_request_converts(api_key: int, version: int, data: st.DataObject) -> None:
    request = data.draw(st.from_type(apis.request_class(api_key, version)))
    _, decoded = decode_request(request_frame(api_key, version, write(request)))
    command = adapters.to_command(hdr(api_key, version), decoded, "/127.0.0.1")
    if not isinstance(command, adapters.COMMAND_TYPES):  # answered on the wire (SyncGroup v5+)
        assert api_key == apis.SYNC_GROUP and version >= 5
        assert (
            through_wire(hdr(api_key, version), command).error_code == E.inconsistent_group_protocol
        )
        return
    response = adapters.error_response(
        hdr(api_key, version), decoded, E.coordinator_load_in_progress
    )
    through_wire(hdr(api_key, version), response)


# --------------------------------------------------------------------------------------------------
# JoinGroup


def join_request(version: int, **over: Any) -> Any:
    kwargs: dict[str, Any] = {
        "group_id": "g",
        "session_timeout": timedelta(seconds=10),
        "member_id": "m-1",
        "protocol_type": "consumer",
        "protocols": (
            nested(11, version, "JoinGroupRequestProtocol", name="range", metadata=b"\1"),
        ),
    }
    if version >= 1:
        kwargs["rebalance_timeout"] = timedelta(seconds=60)
    if version >= 5:
        kwargs["group_instance_id"] = "i-1"
    if version >= 8:
        kwargs["reason"] = "because"
    kwargs.update(over)
    return req(11, version, **kwargs)


@pytest.mark.parametrize("version", range(10))
def test_join_group_command(version: int) -> None:
    command = adapters.to_command(hdr(11, version), join_request(version), "/10.0.0.1")
    assert command == m.JoinGroup(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000 if version == 0 else 60_000,  # v0: session timeout is used
        member_id="m-1",
        group_instance_id="i-1" if version >= 5 else None,
        protocol_type="consumer",
        protocols=(m.Protocol("range", b"\1"),),
        reason="because" if version >= 8 else None,
        client_id="client-1",
        client_host="/10.0.0.1",
        api_version=version,
    )


@pytest.mark.parametrize("version", range(10))
@pytest.mark.parametrize("protocol_name", [None, "", "range"])
def test_join_group_protocol_name_by_version(version: int, protocol_name: str | None) -> None:
    result = m.JoinGroupResult(
        error=E.none,
        generation_id=3,
        protocol_type="consumer",
        protocol_name=protocol_name,
        leader="m-1",
        skip_assignment=True,
        member_id="m-1",
        members=(m.JoinGroupMember("m-1", "i-1", b"meta"),),
    )
    response = through_wire(hdr(11, version), adapters.to_response(hdr(11, version), result))
    if version < 7:
        assert response.protocol_name == (protocol_name or "")
    else:
        assert response.protocol_name == (protocol_name or None)
        assert response.protocol_type == "consumer"
    assert response.generation_id == 3 and response.leader == "m-1"
    assert (response.skip_assignment if version >= 9 else False) is (version >= 9)
    member = response.members[0]
    assert member.member_id == "m-1" and member.metadata == b"meta"
    if version >= 5:
        assert member.group_instance_id == "i-1"


@pytest.mark.parametrize("version", range(10))
def test_join_group_error_echoes_member_id(version: int) -> None:
    header = hdr(11, version)
    response = adapters.error_response(header, join_request(version), E.not_coordinator)
    response = through_wire(header, response)
    assert response.error_code == E.not_coordinator
    assert response.member_id == "m-1"
    assert response.generation_id == -1 and response.leader == "" and response.members == ()


# --------------------------------------------------------------------------------------------------
# SyncGroup


def sync_request(
    version: int, protocol_type: str | None = "consumer", name: str | None = "range"
) -> Any:
    kwargs: dict[str, Any] = {
        "group_id": "g",
        "generation_id": 2,
        "member_id": "m-1",
        "assignments": (
            nested(14, version, "SyncGroupRequestAssignment", member_id="m-1", assignment=b"a"),
        ),
    }
    if version >= 3:
        kwargs["group_instance_id"] = None
    if version >= 5:
        kwargs["protocol_type"] = protocol_type
        kwargs["protocol_name"] = name
    return req(14, version, **kwargs)


@pytest.mark.parametrize("version", range(6))
def test_sync_group_command_and_response(version: int) -> None:
    command = adapters.to_command(hdr(14, version), sync_request(version), "/h")
    assert command == m.SyncGroup(
        group_id="g",
        generation_id=2,
        member_id="m-1",
        group_instance_id=None,
        protocol_type="consumer" if version >= 5 else None,
        protocol_name="range" if version >= 5 else None,
        assignments=(m.SyncAssignment("m-1", b"a"),),
        api_version=version,
    )
    result = m.SyncGroupResult(E.none, "consumer", "range", b"assigned")
    response = through_wire(hdr(14, version), adapters.to_response(hdr(14, version), result))
    assert response.assignment == b"assigned"
    if version >= 5:
        assert (response.protocol_type, response.protocol_name) == ("consumer", "range")


@pytest.mark.parametrize(("ptype", "pname"), [(None, "range"), ("consumer", None), (None, None)])
def test_sync_group_v5_null_protocol_is_inconsistent(ptype: str | None, pname: str | None) -> None:
    answer = adapters.to_command(hdr(14, 5), sync_request(5, ptype, pname), "/h")
    assert not isinstance(answer, adapters.COMMAND_TYPES)
    assert through_wire(hdr(14, 5), answer).error_code == E.inconsistent_group_protocol


# --------------------------------------------------------------------------------------------------
# Heartbeat, LeaveGroup


@pytest.mark.parametrize("version", range(5))
def test_heartbeat(version: int) -> None:
    kwargs: dict[str, Any] = {"group_id": "g", "generation_id": 4, "member_id": "m"}
    if version >= 3:
        kwargs["group_instance_id"] = "i"
    command = adapters.to_command(hdr(12, version), req(12, version, **kwargs), "/h")
    assert command == m.Heartbeat("g", 4, "m", "i" if version >= 3 else None)
    result = m.HeartbeatResult(E.rebalance_in_progress)
    response = through_wire(hdr(12, version), adapters.to_response(hdr(12, version), result))
    assert response.error_code == E.rebalance_in_progress


@pytest.mark.parametrize("version", range(3))
def test_leave_group_v0_2_single_member_and_error_copy(version: int) -> None:
    command = adapters.to_command(
        hdr(13, version), req(13, version, group_id="g", member_id="m"), "/h"
    )
    assert command == m.LeaveGroup("g", (m.LeavingMember("m", None),), version)
    result = m.LeaveGroupResult(E.none, (m.LeftMember("m", None, E.unknown_member_id),))
    response = through_wire(hdr(13, version), adapters.to_response(hdr(13, version), result))
    assert response.error_code == E.unknown_member_id  # the member's error moves to the top
    top = m.LeaveGroupResult(
        E.coordinator_not_available, (m.LeftMember("m", None, E.unknown_member_id),)
    )
    response = adapters.to_response(hdr(13, version), top)
    assert response.error_code == E.coordinator_not_available  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [3, 4, 5])
def test_leave_group_v3_batch(version: int) -> None:
    extra = {"reason": "bye"} if version >= 5 else {}
    members = (
        nested(13, version, "MemberIdentity", member_id="m", group_instance_id=None, **extra),
        nested(13, version, "MemberIdentity", member_id="", group_instance_id="i", **extra),
    )
    command = adapters.to_command(
        hdr(13, version), req(13, version, group_id="g", members=members), "/h"
    )
    reason = "bye" if version >= 5 else None
    assert command == m.LeaveGroup(
        "g", (m.LeavingMember("m", None, reason), m.LeavingMember("", "i", reason)), version
    )
    result = m.LeaveGroupResult(
        E.none, (m.LeftMember("m", None, E.none), m.LeftMember("", "i", E.unknown_member_id))
    )
    response = through_wire(hdr(13, version), adapters.to_response(hdr(13, version), result))
    assert response.error_code == E.none
    assert [x.error_code for x in response.members] == [E.none, E.unknown_member_id]


# --------------------------------------------------------------------------------------------------
# OffsetCommit, OffsetFetch, OffsetDelete


def commit_request(version: int) -> Any:
    part: dict[str, Any] = {
        "partition_index": 1,
        "committed_offset": 42,
        "committed_metadata": None,
    }
    if version >= 6:
        part["committed_leader_epoch"] = 7
    topic = nested(
        8, version, "OffsetCommitRequestTopic",
        name="t", partitions=(nested(8, version, "OffsetCommitRequestPartition", **part),),
    )  # fmt: skip
    kwargs: dict[str, Any] = {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "topics": (topic,),
    }  # fmt: skip
    if version <= 4:
        kwargs["retention_time"] = timedelta(milliseconds=5000)
    if version >= 7:
        kwargs["group_instance_id"] = None
    return req(8, version, **kwargs)


@pytest.mark.parametrize("version", range(2, 10))
def test_offset_commit(version: int) -> None:
    command = adapters.to_command(hdr(8, version), commit_request(version), "/h")
    assert command == m.OffsetCommit(
        group_id="g",
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=5000 if version <= 4 else -1,
        topics=(m.CommitTopic("t", (m.CommitPartition(1, 42, 7 if version >= 6 else -1, None),)),),
        api_version=version,
    )
    error = adapters.error_response(
        hdr(8, version), commit_request(version), E.coordinator_load_in_progress
    )
    response = through_wire(hdr(8, version), error)
    assert [
        (t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions
    ] == [("t", 1, E.coordinator_load_in_progress)]


def fetch_request(version: int, topics: tuple[tuple[str, tuple[int, ...]], ...] | None) -> Any:
    if version >= 8:
        mod_topics = (
            None
            if topics is None
            else tuple(
                nested(9, version, "OffsetFetchRequestTopics", name=n, partition_indexes=p)
                for n, p in topics
            )
        )
        extra = {"member_id": None, "member_epoch": -1} if version >= 9 else {}
        group = nested(
            9, version, "OffsetFetchRequestGroup", group_id="g", topics=mod_topics, **extra
        )
        return req(9, version, groups=(group,), require_stable=True)
    mod_topics = (
        None
        if topics is None
        else tuple(
            nested(9, version, "OffsetFetchRequestTopic", name=n, partition_indexes=p)
            for n, p in topics
        )
    )
    kwargs: dict[str, Any] = {"group_id": "g", "topics": mod_topics}
    if version >= 7:
        kwargs["require_stable"] = True
    return req(9, version, **kwargs)


@pytest.mark.parametrize("version", range(1, 10))
def test_offset_fetch_command(version: int) -> None:
    topics = (("t", (0, 1)),)
    command = adapters.to_command(hdr(9, version), fetch_request(version, topics), "/h")
    assert command == m.OffsetFetch(
        (m.FetchGroup("g", (m.FetchTopic("t", (0, 1)),)),), version >= 7, version
    )
    if version >= 2:
        all_topics = adapters.to_command(hdr(9, version), fetch_request(version, None), "/h")
        assert all_topics.groups[0].topics is None  # type: ignore[union-attr]


@pytest.mark.parametrize("version", range(1, 10))
def test_offset_fetch_group_error_placement(version: int) -> None:
    partition = m.FetchedPartition(0, 10, 3, "meta", E.none)
    result = m.OffsetFetchResult(
        (m.FetchedGroup("g", E.not_coordinator, (m.FetchedTopic("t", (partition,)),)),)
    )
    response = through_wire(hdr(9, version), adapters.to_response(hdr(9, version), result))
    if version >= 8:
        assert response.groups[0].error_code == E.not_coordinator
    elif version >= 2:
        assert response.error_code == E.not_coordinator
        assert response.topics[0].partitions[0].committed_offset == 10
    else:  # v1: copied into every partition, offset -1, metadata ""
        p = response.topics[0].partitions[0]
        assert (p.committed_offset, p.metadata, p.error_code) == (-1, "", E.not_coordinator)


@pytest.mark.parametrize("version", range(1, 10))
def test_offset_fetch_error_response(version: int) -> None:
    request = fetch_request(version, (("t", (0, 1)),))
    response = through_wire(
        hdr(9, version),
        adapters.error_response(hdr(9, version), request, E.coordinator_load_in_progress),
    )
    if version >= 8:
        assert [(g.group_id, g.error_code, g.topics) for g in response.groups] == [
            ("g", E.coordinator_load_in_progress, ())
        ]
    elif version >= 2:
        assert (response.error_code, response.topics) == (E.coordinator_load_in_progress, ())
    else:
        partitions = response.topics[0].partitions
        assert [(p.partition_index, p.committed_offset, p.error_code) for p in partitions] == [
            (0, -1, E.coordinator_load_in_progress), (1, -1, E.coordinator_load_in_progress)
        ]  # fmt: skip


@pytest.mark.parametrize("version", range(5, 10))
def test_offset_fetch_leader_epoch(version: int) -> None:
    partition = m.FetchedPartition(0, 10, 3, "", E.none)
    result = m.OffsetFetchResult(
        (m.FetchedGroup("g", E.none, (m.FetchedTopic("t", (partition,)),)),)
    )
    response: Any = adapters.to_response(hdr(9, version), result)
    topics = response.groups[0].topics if version >= 8 else response.topics
    assert topics[0].partitions[0].committed_leader_epoch == 3


def test_offset_delete_field_order() -> None:
    part = nested(47, 0, "OffsetDeleteRequestPartition", partition_index=2)
    topic = nested(47, 0, "OffsetDeleteRequestTopic", name="t", partitions=(part,))
    command = adapters.to_command(hdr(47, 0), req(47, 0, group_id="g", topics=(topic,)), "/h")
    assert command == m.OffsetDelete("g", (m.FetchTopic("t", (2,)),))
    result = m.OffsetDeleteResult(
        E.none, (m.TopicErrors("t", (m.PartitionError(2, E.group_subscribed_to_topic),)),)
    )
    data = encode_response(hdr(47, 0), adapters.to_response(hdr(47, 0), result))
    # ErrorCode int16, then ThrottleTimeMs int32, then Topics.
    assert data[8:14] == b"\x00\x00\x00\x00\x00\x00"
    error = adapters.error_response(
        hdr(47, 0), req(47, 0, group_id="g", topics=(topic,)), E.group_id_not_found
    )
    data = encode_response(hdr(47, 0), error)
    assert data[8:10] == (69).to_bytes(2, "big")


# --------------------------------------------------------------------------------------------------
# DescribeGroups, ListGroups, DeleteGroups


@pytest.mark.parametrize("version", range(6))
def test_describe_groups(version: int) -> None:
    kwargs: dict[str, Any] = {"groups": ("g", "missing")}
    if version >= 3:
        kwargs["include_authorized_operations"] = False
    command = adapters.to_command(hdr(15, version), req(15, version, **kwargs), "/h")
    assert command == m.DescribeGroups(("g", "missing"), version)
    member = m.DescribedMember("m", "i", "client", "/1.2.3.4", b"meta", b"assign")
    result = m.DescribeGroupsResult(
        (
            m.DescribedGroup(E.none, "g", "Stable", "consumer", "range", (member,)),
            m.DescribedGroup(E.group_id_not_found, "missing", "Dead", "", "", (), "not found"),
        )
    )
    response = through_wire(hdr(15, version), adapters.to_response(hdr(15, version), result))
    stable, missing = response.groups
    assert (stable.group_state, stable.protocol_data) == ("Stable", "range")
    assert stable.members[0].member_metadata == b"meta"
    assert (missing.error_code, missing.group_state) == (
        E.none,
        "Dead",
    )  # GROUP_ID_NOT_FOUND is v6+
    if version >= 3:
        assert stable.authorized_operations == -(2**31)
    if version >= 4:
        assert stable.members[0].group_instance_id == "i"


@pytest.mark.parametrize("version", range(6))
def test_list_groups(version: int) -> None:
    kwargs: dict[str, Any] = {}
    if version >= 4:
        kwargs["states_filter"] = ("Stable",)
    if version >= 5:
        kwargs["types_filter"] = ("classic",)
    command = adapters.to_command(hdr(16, version), req(16, version, **kwargs), "/h")
    assert command == m.ListGroups(
        ("Stable",) if version >= 4 else (), ("classic",) if version >= 5 else ()
    )
    result = m.ListGroupsResult(E.none, (m.ListedGroup("g", "consumer", "Stable", "classic"),))
    response = through_wire(hdr(16, version), adapters.to_response(hdr(16, version), result))
    assert response.groups[0].group_id == "g"
    if version >= 5:
        assert response.groups[0].group_type == "classic"


@pytest.mark.parametrize("version", range(3))
def test_delete_groups(version: int) -> None:
    request = req(42, version, groups_names=("a", "b"))
    assert adapters.to_command(hdr(42, version), request, "/h") == m.DeleteGroups(("a", "b"))
    result = m.DeleteGroupsResult(
        (m.DeletedGroup("a", E.none), m.DeletedGroup("b", E.non_empty_group))
    )
    response = through_wire(hdr(42, version), adapters.to_response(hdr(42, version), result))
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("a", E.none),
        ("b", E.non_empty_group),
    ]
    error = through_wire(
        hdr(42, version), adapters.error_response(hdr(42, version), request, E.not_coordinator)
    )
    assert [r.error_code for r in error.results] == [E.not_coordinator, E.not_coordinator]


def test_to_response_refuses_mismatched_result() -> None:
    with pytest.raises(TypeError):
        adapters.to_response(hdr(12, 4), m.SyncGroupResult(E.none))
