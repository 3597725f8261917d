"""The Heartbeat and OffsetCommit fast paths agree with the general decoder, and step aside when
unsure.

Differential: every frame the fast path accepts must decode, through `codec.decode_request` (kio),
to the same fields; frames it refuses must still be handled by the general path. Arbitrary bytes
never make it raise.
"""

from __future__ import annotations

import datetime
import struct
import sys
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.core.consumer.messages import HeartbeatResponse
from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.messages import (
    CommitPartition,
    CommitTopic,
    OffsetCommit,
    OffsetCommitResult,
    PartitionError,
    TopicErrors,
)
from coordinator.serve import adapters, consumer_adapters
from protocol import apis, codec, fastpath
from protocol.apis import HEARTBEAT
from protocol.codec import RequestHeader
from tests.protocol.test_codec import read_response, request_frame, write

MAX = 1 << 20
ids = st.text(max_size=40)
long_ids = st.text(min_size=0, max_size=200)


def heartbeat_frame(
    version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    instance_id: str | None,
    correlation_id: int,
    client_id: str | None,
) -> bytes:
    cls = apis.request_class(HEARTBEAT, version)
    kwargs: dict[str, object] = {
        "group_id": group_id,
        "generation_id": generation_id,
        "member_id": member_id,
    }
    if version >= 3:
        kwargs["group_instance_id"] = instance_id
    body = write(cls(**kwargs))
    frame = request_frame(HEARTBEAT, version, body, correlation_id, client_id)
    return struct.pack(">i", len(frame)) + frame


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(0, 4),
    group_id=long_ids,
    generation_id=st.integers(-(2**31), 2**31 - 1),
    member_id=long_ids,
    instance_id=st.none() | ids,
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | ids,
)
def test_fast_path_agrees_with_kio(
    version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    instance_id: str | None,
    correlation_id: int,
    client_id: str | None,
) -> None:
    data = heartbeat_frame(
        version, group_id, generation_id, member_id, instance_id, correlation_id, client_id
    )
    fields = fastpath.parse_heartbeat(data, MAX)
    _, request = codec.decode_request(data[4:])
    expected = (
        version,
        correlation_id,
        request.group_id,  # type: ignore[attr-defined]
        request.generation_id,  # type: ignore[attr-defined]
        request.member_id,  # type: ignore[attr-defined]
        request.group_instance_id if version >= 3 else None,  # type: ignore[attr-defined]
    )
    if fields is None:
        # Refusing is always allowed, but it must be for a reason: a long compact string.
        assert version == 4
        assert max(len(group_id.encode()), len(member_id.encode())) >= 126 or (
            instance_id is not None and len(instance_id.encode()) >= 126
        )
    else:
        assert fields == expected


def test_typical_frames_take_the_fast_path() -> None:
    for version in range(5):
        data = heartbeat_frame(version, "orders", 7, "consumer-1-abc", None, 42, "consumer-1")
        assert fastpath.parse_heartbeat(data, MAX) == (
            version,
            42,
            "orders",
            7,
            "consumer-1-abc",
            None,
        )


def test_refuses_what_it_should_not_decode() -> None:
    data = heartbeat_frame(3, "g", 1, "m", "i", 1, "c")
    assert fastpath.parse_heartbeat(data + b"x", MAX) is None  # two reads' worth / wrong size
    assert fastpath.parse_heartbeat(data[:-1], MAX) is None  # short
    assert fastpath.parse_heartbeat(data, len(data) - 5) is None  # over the frame cap
    other = bytearray(data)
    other[5] = apis.JOIN_GROUP
    assert fastpath.parse_heartbeat(bytes(other), MAX) is None
    unsupported = bytearray(data)
    unsupported[7] = 9  # Heartbeat v9
    assert fastpath.parse_heartbeat(bytes(unsupported), MAX) is None
    # v4 with a header tagged field: the general path skips it (KIP-482); the fast path steps aside.
    flexible = heartbeat_frame(4, "g", 1, "m", None, 1, "c")
    tagged = bytearray(flexible)
    client_end = 4 + 10 + 1  # size, api key/version/correlation, client id length, "c"
    assert tagged[client_end] == 0
    tagged[client_end : client_end + 1] = b"\x01\x05\x01\x00"  # one unknown tag, 1 byte
    tagged[0:4] = struct.pack(">i", len(tagged) - 4)
    assert fastpath.parse_heartbeat(bytes(tagged), MAX) is None
    header, _ = codec.decode_request(bytes(tagged[4:]))
    assert header.api_key == HEARTBEAT


@given(st.binary(max_size=80))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    fastpath.parse_heartbeat(data, MAX)


@given(st.binary(max_size=60), st.integers(0, 60))
def test_mutated_heartbeats_never_raise(noise: bytes, at: int) -> None:
    data = bytearray(heartbeat_frame(4, "group", 3, "member", "inst", 9, "client"))
    data[at % len(data) : at % len(data) + len(noise)] = noise
    fastpath.parse_heartbeat(bytes(data), MAX)


def test_response_frame_matches_general_encoder() -> None:
    for version in range(5):
        for error in (ErrorCode.none, ErrorCode.rebalance_in_progress, ErrorCode.unknown_member_id):
            data = codec.heartbeat_response_frame(version, 99, error)
            correlation_id, entity = read_response(data, HEARTBEAT, version)
            assert correlation_id == 99
            assert entity.error_code == error  # type: ignore[attr-defined]


# -- OffsetCommit responses ------------------------------------------------------------------------

error_codes = st.sampled_from(list(ErrorCode))
commit_topics = st.lists(
    st.builds(
        TopicErrors,
        name=st.text(max_size=70),
        partitions=st.lists(
            st.builds(PartitionError, partition=st.integers(0, 2**31 - 1), error=error_codes),
            max_size=140,
        ).map(tuple),
    ),
    max_size=5,
).map(tuple)


@settings(max_examples=200, deadline=None)
@given(
    version=st.integers(2, 9),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    topics=commit_topics,
)
def test_offset_commit_response_matches_kio(
    version: int, correlation_id: int, topics: tuple[TopicErrors, ...]
) -> None:
    data = fastpath.offset_commit_response_frame(version, correlation_id, topics)
    header = RequestHeader(apis.OFFSET_COMMIT, version, correlation_id, "c")
    expected = codec.encode_response(
        header, adapters.to_response(header, OffsetCommitResult(topics))
    )
    assert data == expected
    got_correlation, entity = read_response(data, apis.OFFSET_COMMIT, version)
    assert got_correlation == correlation_id
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in entity.topics  # type: ignore[attr-defined]
    ] == [(t.name, [(p.partition, p.error) for p in t.partitions]) for t in topics]


# -- OffsetCommit requests -------------------------------------------------------------------------

commit_partitions = st.lists(
    st.tuples(
        st.integers(-(2**31), 2**31 - 1),  # partition
        st.integers(-(2**63), 2**63 - 1),  # offset
        st.integers(-(2**31), 2**31 - 1),  # leader epoch (v6+)
        st.none() | st.text(max_size=150),  # metadata
    ),
    max_size=6,
)
commit_request_topics = st.lists(st.tuples(st.text(max_size=150), commit_partitions), max_size=4)


def offset_commit_frame(
    version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    instance_id: str | None,
    retention_ms: int,
    topics: list[tuple[str, list[tuple[int, int, int, str | None]]]],
    correlation_id: int,
    client_id: str | None,
) -> bytes:
    cls = apis.request_class(apis.OFFSET_COMMIT, version)
    mod = sys.modules[cls.__module__]
    kio_topics = []
    for name, parts in topics:
        kio_parts = []
        for partition, offset, epoch, metadata in parts:
            fields: dict[str, object] = {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_metadata": metadata,
            }
            if version >= 6:
                fields["committed_leader_epoch"] = epoch
            kio_parts.append(mod.OffsetCommitRequestPartition(**fields))
        kio_topics.append(mod.OffsetCommitRequestTopic(name=name, partitions=tuple(kio_parts)))
    kwargs: dict[str, object] = {
        "group_id": group_id,
        "generation_id_or_member_epoch": generation_id,
        "member_id": member_id,
        "topics": tuple(kio_topics),
    }
    if version >= 7:
        kwargs["group_instance_id"] = instance_id
    if version <= 4:
        kwargs["retention_time"] = datetime.timedelta(milliseconds=retention_ms)
    frame = request_frame(
        apis.OFFSET_COMMIT, version, write(cls(**kwargs)), correlation_id, client_id
    )
    return struct.pack(">i", len(frame)) + frame


def fast_commit(
    data: bytes, max_frame: int = MAX
) -> fastpath.OffsetCommitFields[CommitTopic] | None:
    return fastpath.parse_offset_commit(
        data, max_frame, fastpath.OffsetCommitFields, CommitTopic, CommitPartition
    )


@settings(max_examples=400, deadline=None)
@given(
    version=st.integers(2, 9),
    group_id=long_ids,
    generation_id=st.integers(-(2**31), 2**31 - 1),
    member_id=long_ids,
    instance_id=st.none() | ids,
    retention_ms=st.integers(-1, 2**40),
    topics=commit_request_topics,
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | ids,
)
def test_offset_commit_fast_path_agrees_with_kio(
    version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    instance_id: str | None,
    retention_ms: int,
    topics: list[tuple[str, list[tuple[int, int, int, str | None]]]],
    correlation_id: int,
    client_id: str | None,
) -> None:
    data = offset_commit_frame(
        version,
        group_id,
        generation_id,
        member_id,
        instance_id,
        retention_ms,
        topics,
        correlation_id,
        client_id,
    )
    fields = fast_commit(data)
    header, request = codec.decode_request(data[4:])
    expected = adapters.to_command(header, request, "/h")
    if fields is None:
        # Refusing is always allowed, but only for a reason: a compact string too long for a
        # one-byte length (v8+).
        strings = [group_id, member_id, instance_id or ""]
        strings += [name for name, _ in topics]
        strings += [m or "" for _, parts in topics for *_, m in parts]
        assert version >= 8
        assert max(len(s.encode()) for s in strings) >= 126
        return
    assert (fields.version, fields.correlation_id, fields.client_id) == (
        header.api_version,
        header.correlation_id,
        header.client_id,
    )
    got = OffsetCommit(
        fields.group_id,
        fields.generation_id,
        fields.member_id,
        fields.group_instance_id,
        fields.retention_time_ms,
        fields.topics,
        fields.version,
    )
    assert got == expected


def test_typical_commits_take_the_fast_path() -> None:
    for version in range(2, 10):
        data = offset_commit_frame(
            version, "orders", 5, "consumer-1-abc", None, -1, [("t", [(0, 42, 3, "")])], 8, "c"
        )
        fields = fast_commit(data)
        assert fields is not None
        assert fields.topics == (
            CommitTopic("t", (CommitPartition(0, 42, 3 if version >= 6 else -1, ""),)),
        )


def test_offset_commit_refuses_what_it_should_not_decode() -> None:
    data = offset_commit_frame(8, "g", 1, "m", None, -1, [("t", [(0, 1, 2, None)])], 1, "c")
    assert fast_commit(data + b"x") is None  # two reads' worth / wrong size
    assert fast_commit(data[:-1]) is None  # short
    assert fast_commit(data, len(data) - 5) is None  # over the frame cap
    # A retention kio cannot hold in a timedelta: the general path closes the connection.
    assert fast_commit(offset_commit_frame(2, "g", -1, "", None, 0, [], 1, "c")) is not None
    far = bytearray(offset_commit_frame(2, "g", -1, "", None, 0, [], 1, "c"))
    struct.pack_into(">q", far, 24, 2**62)  # size, header with client id "c", "g", -1, ""
    assert fast_commit(bytes(far)) is None
    huge = bytearray(offset_commit_frame(7, "g", 1, "m", None, -1, [], 1, "c"))
    huge[-4:] = struct.pack(">i", 2**31 - 1)  # a topics count no frame could hold
    assert fast_commit(bytes(huge)) is None
    # A partition tagged field (v8+): the general path skips it; the fast path steps aside.
    tagged = bytearray(data)
    assert tagged[-4:] == b"\x00\x00\x00\x00"  # metadata null, partition/topic/request tags
    tagged[-3:-2] = b"\x01\x05\x01\x00"
    tagged[0:4] = struct.pack(">i", len(tagged) - 4)
    assert fast_commit(bytes(tagged)) is None
    assert codec.decode_request(bytes(tagged[4:]))[0].api_key == apis.OFFSET_COMMIT


@given(st.binary(max_size=60), st.integers(0, 80))
def test_mutated_commits_never_raise(noise: bytes, at: int) -> None:
    for version in (2, 7, 9):
        data = bytearray(
            offset_commit_frame(version, "g", 3, "m", "i", 5, [("t", [(1, 2, 3, "x")])], 9, "c")
        )
        data[at % len(data) : at % len(data) + len(noise)] = noise
        fast_commit(bytes(data))


def test_a_failed_fast_commit_gets_every_partition_the_error() -> None:
    """`Server._fail` answers a fast-path commit from the command it kept (not a kio request)."""
    data = offset_commit_frame(
        7, "g", 1, "m", None, -1, [("t", [(0, 1, 2, None), (3, 4, 5, "")])], 1, "c"
    )
    f = fast_commit(data)
    assert f is not None
    command = OffsetCommit(
        f.group_id, f.generation_id, f.member_id, None, f.retention_time_ms, f.topics, f.version
    )
    header = RequestHeader(apis.OFFSET_COMMIT, 7, 1, "c")
    response = adapters.error_response(header, command, ErrorCode.not_coordinator)
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in response.topics  # type: ignore[attr-defined]
    ] == [("t", [(0, ErrorCode.not_coordinator), (3, ErrorCode.not_coordinator)])]


# ---- the group id a request is routed by in a fleet (coordinator.sidecar.forward._fast) ----

GROUP_FIRST_VERSIONS = [
    (api_key, version)
    for api_key in sorted(fastpath.GROUP_FIRST)
    for version in range(apis.APIS[api_key].min_version, apis.APIS[api_key].max_version + 1)
]


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


@pytest.mark.parametrize(("api_key", "version"), GROUP_FIRST_VERSIONS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), client_id=st.none() | st.text(max_size=20))
def test_group_first_agrees_with_kio(
    api_key: int, version: int, data: st.DataObject, client_id: str | None
) -> None:
    request: Any = data.draw(st.from_type(apis.request_class(api_key, version)))
    frame = sized(request_frame(api_key, version, write(request), 1234, client_id))
    got = fastpath.group_first(frame)
    if apis.is_flexible(api_key, version) and len(request.group_id.encode()) >= 127:
        assert got is None  # a long compact string: the general path's
    else:
        assert got == (api_key, 1234, request.group_id)


def test_group_first_leaves_the_rest_to_the_general_path() -> None:
    body = struct.pack(">h", 2) + b"gr"
    assert fastpath.group_first(sized(request_frame(HEARTBEAT, 2, body))) == (HEARTBEAT, 7, "gr")
    cut = sized(request_frame(HEARTBEAT, 2, struct.pack(">h", 5) + b"gr"))
    assert fastpath.group_first(cut) is None  # the group id runs past the end
    assert fastpath.group_first(sized(request_frame(HEARTBEAT, 2, body))[:-1]) is None  # size
    assert fastpath.group_first(sized(request_frame(HEARTBEAT, 5, body))) is None  # not offered
    assert fastpath.group_first(sized(request_frame(apis.OFFSET_FETCH, 1, body))) is None
    tagged = bytearray(sized(request_frame(HEARTBEAT, 4, b"\x03gr")))
    assert fastpath.group_first(bytes(tagged)) == (HEARTBEAT, 7, "gr")
    tagged[-4] = 1  # the header's tagged fields: one (the general path skips them)
    assert fastpath.group_first(bytes(tagged)) is None


# -- ConsumerGroupHeartbeat responses --------------------------------------------------------------

beat_assignments = st.none() | st.lists(
    st.tuples(st.uuids(), st.lists(st.integers(0, 2**31 - 1), max_size=8).map(tuple)),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(
        apis.APIS[apis.CONSUMER_GROUP_HEARTBEAT].min_version,
        apis.APIS[apis.CONSUMER_GROUP_HEARTBEAT].max_version,
    ),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    error=error_codes,
    error_message=st.none() | st.text(max_size=150),
    member_id=st.none() | st.text(max_size=150),
    member_epoch=st.integers(-(2**31), 2**31 - 1),
    interval_ms=st.integers(0, 2**31 - 1),
    assignment=beat_assignments,
)
def test_consumer_heartbeat_response_matches_kio(
    version: int,
    correlation_id: int,
    error: ErrorCode,
    error_message: str | None,
    member_id: str | None,
    member_epoch: int,
    interval_ms: int,
    assignment: list[tuple[uuid.UUID, tuple[int, ...]]] | None,
) -> None:
    result = HeartbeatResponse(
        error,
        error_message,
        member_id,
        member_epoch,
        interval_ms,
        None if assignment is None else tuple(TopicPartitions(t, ps) for t, ps in assignment),
    )
    header = RequestHeader(apis.CONSUMER_GROUP_HEARTBEAT, version, correlation_id, "c")
    data = adapters.response_frame(header, result)
    assert data == codec.encode_response(header, adapters.to_response(header, result))
    got_correlation, entity = read_response(data, apis.CONSUMER_GROUP_HEARTBEAT, version)
    assert (got_correlation, entity.member_id, entity.member_epoch) == (  # type: ignore[attr-defined]
        correlation_id,
        member_id,
        member_epoch,
    )


# -- ConsumerGroupHeartbeat requests ---------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
owned_partitions = st.none() | st.lists(
    st.tuples(st.uuids(), st.lists(int32s, max_size=6).map(tuple)), max_size=4
).map(tuple)


def consumer_heartbeat_frame(version: int, correlation_id: int, client_id: str | None,
                             fields: dict[str, Any]) -> bytes:  # fmt: skip
    cls = apis.request_class(apis.CONSUMER_GROUP_HEARTBEAT, version)
    kwargs = dict(fields)
    owned = kwargs.pop("owned")
    if version < 1:
        kwargs.pop("subscribed_topic_regex")
    kwargs["rebalance_timeout"] = datetime.timedelta(milliseconds=kwargs.pop("rebalance_timeout"))
    topic_partitions = sys.modules[cls.__module__].TopicPartitions
    kwargs["topic_partitions"] = (
        None
        if owned is None
        else tuple(topic_partitions(topic_id=t, partitions=ps) for t, ps in owned)
    )
    body = write(cls(**kwargs))
    frame = request_frame(apis.CONSUMER_GROUP_HEARTBEAT, version, body, correlation_id, client_id)
    return struct.pack(">i", len(frame)) + frame


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(0, 1),
    correlation_id=int32s,
    client_id=st.none() | ids,
    fields=st.fixed_dictionaries(
        {
            "group_id": ids,
            "member_id": ids,
            "member_epoch": int32s,
            "instance_id": st.none() | ids,
            "rack_id": st.none() | ids,
            "rebalance_timeout": int32s,
            "subscribed_topic_names": st.none() | st.lists(ids, max_size=4).map(tuple),
            "subscribed_topic_regex": st.none() | ids,
            "server_assignor": st.none() | ids,
            "owned": owned_partitions,
        }
    ),
)
def test_consumer_heartbeat_fast_path_agrees_with_kio(
    version: int, correlation_id: int, client_id: str | None, fields: dict[str, Any]
) -> None:
    data = consumer_heartbeat_frame(version, correlation_id, client_id, fields)
    header, request = codec.decode_request(data[4:])
    general = adapters.to_command(header, request, "/10.0.0.1")
    fast = fastpath.parse_consumer_heartbeat(data, MAX)
    strings = [v for k, v in fields.items() if isinstance(v, str)]
    strings += list(fields["subscribed_topic_names"] or ())
    if fast is None:  # only what it leaves to the general path: strings of 127 bytes or more
        assert any(len(x.encode()) >= 127 for x in strings), fields
        return
    assert consumer_adapters.fast_command(fast, "/10.0.0.1") == (header, general)


def test_consumer_heartbeat_fast_path_takes_a_steady_beat_and_steps_aside_when_unsure() -> None:
    fields = {
        "group_id": "g", "member_id": "m", "member_epoch": 7, "instance_id": None,
        "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
        "subscribed_topic_regex": None, "server_assignor": None,
        "owned": ((uuid.uuid4(), (2, 0, 1)),),
    }  # fmt: skip
    for version in (0, 1):
        data = consumer_heartbeat_frame(version, 5, "c", fields)
        assert fastpath.parse_consumer_heartbeat(data, MAX) is not None
        assert fastpath.parse_consumer_heartbeat(data, len(data) - 5) is None  # too big
        assert fastpath.parse_consumer_heartbeat(data[:-1], MAX) is None  # truncated
        assert fastpath.parse_consumer_heartbeat(data + b"\x00", MAX) is None  # size mismatch
    long = consumer_heartbeat_frame(1, 5, "c", {**fields, "member_id": "m" * 200})
    assert fastpath.parse_consumer_heartbeat(long, MAX) is None  # a two-byte varint length


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_consumer_heartbeat_fast_path_never_raises(tail: bytes) -> None:
    head = struct.pack(">ihhih", len(tail) + 10, apis.CONSUMER_GROUP_HEARTBEAT, 1, 3, 0)
    fastpath.parse_consumer_heartbeat(head + tail, MAX)
