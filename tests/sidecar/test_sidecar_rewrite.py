"""sidecar.rewrite: framing, Produce's acks, the rewritten answers and ApiVersions, for every
version the sidecar offers. Pure: no sockets."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.core.topics import TopicInfo
from coordinator.sidecar import rewrite
from protocol import apis
from protocol.framing import FrameTooLarge, InvalidFrameSize
from tests.support.sidecar_util import decode, kio

LOCAL = {1: ("proxy", 7001), 2: ("proxy", 7002)}


def local(node_id: int) -> tuple[str, int] | None:
    return LOCAL.get(node_id)


def frame_of(parts: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in parts)


class Collect:
    """A FrameStream's receiver: whole frames, and streamed ones reassembled from their pieces."""

    def __init__(self, stream_when: list[bool], peek: int) -> None:
        self.frames: list[bytes] = []
        self.streamed: list[bytes] = []
        self.pieces: list[bytes] | None = None
        self.stream_when = stream_when
        self.peek = peek

    def on_frame(self, frame: bytes) -> None:
        assert self.pieces is None
        self.frames.append(frame)

    def on_start(self, data: bytes, pos: int, total: int):
        assert len(data) - pos >= min(total, self.peek)  # the promised peek is there
        assert len(data) - pos < total  # (a whole frame goes to on_frame)
        if self.stream_when and self.stream_when.pop():
            self.pieces = []
            return self
        return None

    def write(self, piece: bytes) -> None:
        assert self.pieces is not None
        self.pieces.append(piece)

    def end(self) -> None:
        assert self.pieces is not None
        frame = b"".join(self.pieces)
        self.frames.append(frame)
        self.streamed.append(frame)
        self.pieces = None


@given(st.lists(st.binary(min_size=4, max_size=40), max_size=8), st.data())
def test_stream_returns_whole_frames_in_order_whatever_the_chunking(parts, data):
    stream_bytes = frame_of(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream_bytes)), max_size=6)))
    peek = data.draw(st.integers(4, 20))
    collect = Collect(data.draw(st.lists(st.booleans(), max_size=8)), peek)
    stream = rewrite.FrameStream(collect.on_frame, collect.on_start, 1000, 4, peek)
    start = 0
    for cut in [*cuts, len(stream_bytes)]:
        stream.feed(stream_bytes[start:cut])
        start = cut
    assert collect.frames == [struct.pack(">i", len(p)) + p for p in parts]
    assert stream.buffered_bytes == 0 and collect.pieces is None


def test_stream_refuses_bad_sizes_before_buffering_the_frame():
    def never(*_):
        raise AssertionError("no frame expected")

    with pytest.raises(FrameTooLarge):
        rewrite.FrameStream(never, never, 100).feed(struct.pack(">i", 101))
    with pytest.raises(InvalidFrameSize):
        rewrite.FrameStream(never, never, 100, 10).feed(struct.pack(">i", 9) + b"x" * 9)


def test_one_frame_per_read_is_not_copied():
    data = frame_of([b"abcdefgh"])
    got: list[bytes] = []
    rewrite.FrameStream(got.append, lambda *_: None, 100).feed(data)
    assert got[0] is data


@pytest.mark.parametrize("version", range(3, 10))
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
def test_produce_acks_is_read_in_every_version(version, acks, transactional_id):
    cls = kio(0, version, "ProduceRequest", transactional_id=transactional_id, acks=acks,
              timeout=datetime.timedelta(seconds=1), topic_data=())
    frame = rewrite.encode_request(cls, 5, "client-id-with-some-length")
    assert rewrite.produce_acks(frame, version) == acks


def metadata_frame(version: int, correlation_id: int = 42) -> bytes:
    module = f"kio.schema.metadata.v{version}.response"
    import importlib

    m = importlib.import_module(module)
    from coordinator.broker.answers import make

    brokers = tuple(make(m.MetadataResponseBroker, node_id=n, host=f"up{n}", port=9092 + n,
                         rack=f"rack{n}") for n in (1, 2, 3))
    partitions = tuple(make(m.MetadataResponsePartition, error_code=ErrorCode.none,
                            partition_index=p, leader_id=1 + p % 2, leader_epoch=0,
                            replica_nodes=(1, 2), isr_nodes=(1, 2), offline_replicas=())
                       for p in (1, 0, 2))
    topics = (
        make(m.MetadataResponseTopic, error_code=ErrorCode.none, name="orders",
             topic_id=uuid.UUID(int=7), is_internal=False, partitions=partitions,
             topic_authorized_operations=-(2**31)),
        make(m.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_or_partition,
             name="nope", topic_id=None, is_internal=False, partitions=(),
             topic_authorized_operations=-(2**31)),
    )
    response = make(m.MetadataResponse, throttle_time=datetime.timedelta(0), brokers=brokers,
                    cluster_id="c", controller_id=1, topics=topics,
                    cluster_authorized_operations=-(2**31))
    return rewrite.encode_response(correlation_id, rewrite.METADATA, version, response)


@pytest.mark.parametrize("version", range(apis.APIS[3].max_version + 1))
def test_metadata_names_our_listeners_and_drops_brokers_we_cannot_serve(version):
    data, upstream = rewrite.rewrite_metadata(version, metadata_frame(version), local)
    assert rewrite.response_correlation_id(data) == 42
    response = decode(3, version, data)
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [
        (1, "proxy", 7001), (2, "proxy", 7002)]  # broker 3 has no listener: left out
    assert response.topics == upstream.topics  # nothing else changes
    assert [b.host for b in upstream.brokers] == ["up1", "up2", "up3"]


@pytest.mark.parametrize("version", [9, 12])
def test_topic_infos_from_metadata(version):
    _, upstream = rewrite.rewrite_metadata(version, metadata_frame(version), local)
    infos, missing, leaders = rewrite.topic_infos(upstream)
    racks = (("rack1", "rack2"),) * 3
    expected = [TopicInfo("orders", uuid.UUID(int=7), 3, racks)] if version >= 10 else []
    assert infos == expected
    assert missing == ["nope"]
    assert leaders == {("orders", 0): 1, ("orders", 1): 2, ("orders", 2): 1}


@pytest.mark.parametrize("version", range(7))
@pytest.mark.parametrize("node_id", [1, 3])
def test_forwarded_find_coordinator_points_at_our_listener(version, node_id):
    import importlib

    from coordinator.broker.answers import make

    m = importlib.import_module(f"kio.schema.find_coordinator.v{version}.response")
    fields = {"node_id": node_id, "host": "up", "port": 9092, "error_code": ErrorCode.none,
              "error_message": None}
    if version < 4:
        response = make(m.FindCoordinatorResponse, throttle_time=datetime.timedelta(0), **fields)
    else:
        response = m.FindCoordinatorResponse(
            throttle_time=datetime.timedelta(0),
            coordinators=(make(m.Coordinator, key="tx", **fields),))
    frame = rewrite.encode_response(9, 10, version, response)
    out = decode(10, version, rewrite.rewrite_find_coordinator(version, frame, local))
    entry = out if version < 4 else out.coordinators[0]
    if node_id == 1:
        assert (entry.error_code, entry.host, entry.port) == (ErrorCode.none, "proxy", 7001)
    else:  # a node we do not front: retriable, and no upstream address leaks
        assert entry.error_code == ErrorCode.coordinator_not_available
        assert (entry.host, entry.port) == ("", -1)


@pytest.mark.parametrize("version", range(7))
def test_group_find_coordinator_answer(version):
    request = (kio(10, version, "FindCoordinatorRequest", key="g") if version < 4 else
               kio(10, version, "FindCoordinatorRequest", key_type=0, coordinator_keys=("a", "b")))
    here = rewrite.BrokerAddress(1, "proxy", 7001)
    out = decode(10, version, rewrite.find_coordinator_frame(3, version, request, lambda _: here))
    entries = [out] if version < 4 else list(out.coordinators)
    assert [(e.node_id, e.host, e.port, e.error_code) for e in entries] == [
        (1, "proxy", 7001, ErrorCode.none)] * len(entries)
    out = decode(10, version, rewrite.find_coordinator_frame(3, version, request, lambda _: None))
    entry = out if version < 4 else out.coordinators[0]
    assert entry.error_code == ErrorCode.coordinator_not_available


@pytest.mark.parametrize("version", [4, 6])
def test_group_find_coordinator_names_each_key_its_own_node(version):
    """`serve --workers N` (coordinator.sidecar.worker_nodes): each group its owner's node."""
    request = kio(10, version, "FindCoordinatorRequest", key_type=0, coordinator_keys=("a", "b"))
    nodes = {"a": rewrite.BrokerAddress(7, "h", 7007), "b": rewrite.BrokerAddress(8, "h", 7008)}
    out = decode(10, version, rewrite.find_coordinator_frame(3, version, request, nodes.get))
    assert [(e.key, e.node_id, e.port) for e in out.coordinators] == [
        ("a", 7, 7007), ("b", 8, 7008)]


@pytest.mark.parametrize("version", [0, 1, 12])
def test_metadata_lists_the_extra_nodes(version):
    """The workers' coordinator nodes are listed besides the brokers, shaped like them."""
    extra = [rewrite.BrokerAddress(1_000_000_000, "proxy", 8000)]
    data, _ = rewrite.rewrite_metadata(version, metadata_frame(version), local, extra)
    out = decode(3, version, data)
    listed = [(b.node_id, b.host, b.port) for b in out.brokers]
    assert listed[-1] == (1_000_000_000, "proxy", 8000) and len(listed) >= 2


def test_api_versions_intersection():
    upstream = {0: (0, 11), 1: (0, 17), 3: (0, 13), 10: (0, 6), 11: (0, 9), 18: (0, 4),
                28: (0, 4), 68: (0, 0), 76: (0, 1), 78: (0, 1), 88: (0, 1), 60: (0, 1),
                19: (0, 7), 999: (0, 3)}
    ranges = {k: (lo, hi) for k, lo, hi in rewrite.api_version_ranges(upstream)}
    assert ranges[0] == (0, 9)  # Produce below KIP-951's NodeEndpoints
    assert ranges[1] == (apis.APIS[1].min_version, apis.APIS[1].max_version)  # Fetch: <= 12
    assert ranges[3] == (0, apis.APIS[3].max_version)  # Metadata: what we can rewrite
    assert ranges[60] == (0, 1)
    assert ranges[19] == (0, 7) and ranges[999] == (0, 3)  # forwarded as the upstream has them
    assert 88 not in {k for k, _, _ in rewrite.api_version_ranges({88: (0, 0)})}  # withheld
    assert ranges[90] == (0, 1) and ranges[92] == (0, 0)  # share offsets admin: ours
    assert ranges[76] == (1, 1) and ranges[77] == (1, 1)  # share groups: ours (KIP-932)
    assert ranges[78] == (1, 2) and ranges[79] == (1, 2)  # ShareFetch/-Acknowledge: ours too
    # KIP-848's 68/69: ours (issue 23), whether the upstream offers them (68) or not (69).
    assert ranges[68] == (0, 1) and ranges[69] == (0, 1)
    assert ranges[28] == (0, 4)  # TxnOffsetCommit: ours (issue 29), within the upstream's range
    capped = {**upstream, 28: (0, 5)}
    assert {k: (lo, hi) for k, lo, hi in rewrite.api_version_ranges(capped)}[28] == (0, 4)
    assert 28 not in {k for k, _, _ in rewrite.api_version_ranges({18: (0, 4)})}  # no txns
    for key in apis.GROUP_APIS:  # answered by groupcoord: its own ranges, even if upstream lacks
        assert ranges[key] == (apis.APIS[key].min_version, apis.APIS[key].max_version)
    assert ranges[18] == (0, 4)


@pytest.mark.parametrize("version", range(5))
def test_api_versions_frame(version):
    ranges = ((0, 0, 9), (18, 0, 4))
    request = (kio(18, version, "ApiVersionsRequest", client_software_name="x",
                   client_software_version="1") if version >= 3 else
               kio(18, version, "ApiVersionsRequest"))
    out = decode(18, version, rewrite.api_versions_frame(1, version, request, ranges))
    assert out.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in out.api_keys] == list(ranges)
    if version >= 3:
        bad = kio(18, version, "ApiVersionsRequest", client_software_name="-bad",
                  client_software_version="1")
        out = decode(18, version, rewrite.api_versions_frame(1, version, bad, ranges))
        assert out.error_code == ErrorCode.invalid_request and out.api_keys == ()
