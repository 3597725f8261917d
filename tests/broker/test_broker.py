"""The one-broker view: Metadata, FindCoordinator, ListOffsets and Fetch for every advertised
version, checked by encoding each response and reading it back with kio."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from coordinator.broker import answers as broker
from coordinator.broker.answers import Advertised, make
from coordinator.core.topics import TopicCatalog, TopicInfo
from protocol import apis
from protocol.codec import RequestHeader, encode_response

CATALOG = TopicCatalog((TopicInfo("orders", uuid.UUID(int=7), 3),))
ADVERTISED = Advertised("127.0.0.1", 9092)


def versions(api_key: int) -> range:
    spec = apis.APIS[api_key]
    return range(spec.min_version, spec.max_version + 1)


def round_trip(api_key: int, version: int, response: Any) -> Any:
    """Encode as the server does, then decode the body with kio's reader."""
    header = RequestHeader(api_key, version, 42, "test")
    data = encode_response(header, response)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert int.from_bytes(data[4:8], "big") == 42
    flexible = apis.is_flexible(api_key, version) and api_key != apis.API_VERSIONS
    body_at = 8 + (1 if flexible else 0)  # response header v1 ends with an empty tag section
    decoded, _ = entity_reader(type(response))(data, body_at)
    return decoded


def request(api_key: int, version: int, **fields: Any) -> Any:
    return make(apis.request_class(api_key, version), **fields)


def req_module(api_key: int, version: int) -> Any:
    return apis.request_module(api_key, version)


@pytest.mark.parametrize("version", versions(apis.METADATA))
def test_metadata_lists_this_server_and_every_catalog_partition(version: int) -> None:
    all_topics = [] if version == 0 else None
    req = request(
        apis.METADATA,
        version,
        topics=all_topics,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    resp = round_trip(
        apis.METADATA, version, broker.metadata_response(version, req, CATALOG, ADVERTISED)
    )
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(0, "127.0.0.1", 9092)]
    (topic,) = resp.topics
    assert topic.name == "orders"
    assert topic.error_code == ErrorCode.none
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert {p.leader_id for p in topic.partitions} == {0}
    if version >= 10:
        assert topic.topic_id == uuid.UUID(int=7)


@pytest.mark.parametrize("version", versions(apis.METADATA))
def test_metadata_unknown_topic_is_unknown_topic_or_partition(version: int) -> None:
    mod = req_module(apis.METADATA, version)
    wanted = (make(mod.MetadataRequestTopic, name="missing", topic_id=None),)
    req = request(
        apis.METADATA,
        version,
        topics=wanted,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    resp = round_trip(
        apis.METADATA, version, broker.metadata_response(version, req, CATALOG, ADVERTISED)
    )
    (topic,) = resp.topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert topic.partitions == ()


@pytest.mark.parametrize("version", versions(apis.FIND_COORDINATOR))
def test_find_coordinator_names_this_server_for_groups(version: int) -> None:
    req = request(apis.FIND_COORDINATOR, version, key="g", key_type=0, coordinator_keys=("g", "h"))
    resp = round_trip(
        apis.FIND_COORDINATOR, version, broker.find_coordinator_response(version, req, ADVERTISED)
    )
    if version < 4:
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (
            ErrorCode.none,
            0,
            "127.0.0.1",
            9092,
        )
    else:
        assert [(c.key, c.node_id, c.error_code) for c in resp.coordinators] == [
            ("g", 0, ErrorCode.none),
            ("h", 0, ErrorCode.none),
        ]
    # Kafka 4.4's words for "no error" (tests/conformance compares them): "NONE" in v1-v3.
    if 1 <= version < 4:
        assert resp.error_message == "NONE"
    elif version >= 4:
        assert {c.error_message for c in resp.coordinators} == {""}


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_find_coordinator_refuses_transaction_keys(version: int) -> None:
    req = request(apis.FIND_COORDINATOR, version, key="t", key_type=1, coordinator_keys=("t",))
    resp = broker.find_coordinator_response(version, req, ADVERTISED)
    if version < 4:
        assert resp.error_code == ErrorCode.invalid_request
        assert resp.node_id == -1
    else:
        assert resp.coordinators[0].error_code == ErrorCode.invalid_request


@pytest.mark.parametrize("version", versions(apis.LIST_OFFSETS))
def test_list_offsets_empty_partitions(version: int) -> None:
    mod = req_module(apis.LIST_OFFSETS, version)
    partitions = tuple(
        make(mod.ListOffsetsPartition, partition_index=p, timestamp=ts, max_num_offsets=1)
        for p, ts in ((0, -1), (1, -2), (2, 1_700_000_000_000), (9, -1))
    )
    topic = make(mod.ListOffsetsTopic, name="orders", partitions=partitions)
    req = request(apis.LIST_OFFSETS, version, replica_id=-1, isolation_level=0, topics=(topic,))
    resp = round_trip(
        apis.LIST_OFFSETS, version, broker.list_offsets_response(version, req, CATALOG)
    )
    got = [(p.partition_index, p.error_code, p.offset) for p in resp.topics[0].partitions]
    assert got == [
        (0, ErrorCode.none, 0),
        (1, ErrorCode.none, 0),
        (2, ErrorCode.none, -1),
        (9, ErrorCode.unknown_topic_or_partition, -1),
    ]


@pytest.mark.parametrize("version", versions(apis.FETCH))
def test_fetch_is_empty_at_any_offset_and_waits_max_wait(version: int) -> None:
    mod = req_module(apis.FETCH, version)
    partition = make(mod.FetchPartition, partition=1, fetch_offset=17, partition_max_bytes=1024)
    topic = make(mod.FetchTopic, topic="orders", partitions=(partition,))
    req = request(
        apis.FETCH,
        version,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        topics=(topic,),
        forgotten_topics_data=(),
    )
    response, wait_ms = broker.fetch_response(version, req, CATALOG)
    assert wait_ms == 500
    resp = round_trip(apis.FETCH, version, response)
    (part,) = resp.responses[0].partitions
    assert part.error_code == ErrorCode.none
    assert part.high_watermark == 17  # the consumer stays where it is
    assert not part.records


@pytest.mark.parametrize("version", [4, 12])
def test_fetch_unknown_partition_answers_at_once(version: int) -> None:
    mod = req_module(apis.FETCH, version)
    partition = make(mod.FetchPartition, partition=5, fetch_offset=0, partition_max_bytes=1024)
    topic = make(mod.FetchTopic, topic="orders", partitions=(partition,))
    req = request(
        apis.FETCH,
        version,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        topics=(topic,),
        forgotten_topics_data=(),
    )
    response, wait_ms = broker.fetch_response(version, req, CATALOG)
    assert wait_ms == 0
    assert response.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def produce_request(version: int, acks: int, partitions: tuple[tuple[str, int], ...]) -> Any:
    mod = req_module(apis.PRODUCE, version)
    by_topic: dict[str, list[int]] = {}
    for name, index in partitions:
        by_topic.setdefault(name, []).append(index)
    topics = tuple(
        make(
            mod.TopicProduceData,
            name=name,
            partition_data=tuple(make(mod.PartitionProduceData, index=i, records=b"") for i in ps),
        )
        for name, ps in by_topic.items()
    )
    return request(
        apis.PRODUCE,
        version,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=30),
        topic_data=topics,
    )


@pytest.mark.parametrize("version", versions(apis.PRODUCE))
def test_produce_is_refused_per_partition_with_a_final_error(version: int) -> None:
    req = produce_request(version, -1, (("orders", 0), ("orders", 2), ("orders", 3), ("gone", 0)))
    resp = round_trip(apis.PRODUCE, version, broker.produce_response(version, req, CATALOG))
    got = [
        (t.name, p.index, p.error_code, p.base_offset)
        for t in resp.responses
        for p in t.partition_responses
    ]
    assert got == [
        ("orders", 0, ErrorCode.invalid_request, -1),
        ("orders", 2, ErrorCode.invalid_request, -1),
        ("orders", 3, ErrorCode.unknown_topic_or_partition, -1),  # orders has 3 partitions
        ("gone", 0, ErrorCode.unknown_topic_or_partition, -1),
    ]
    if version >= 8:  # error_message exists from v8 (KIP-467)
        messages = [p.error_message for p in resp.responses[0].partition_responses]
        assert messages == [broker.PRODUCE_REFUSED] * 2 + [None]


@pytest.mark.parametrize("version", [3, 11])
def test_produce_with_acks_0_has_no_answer(version: int) -> None:
    req = produce_request(version, 0, (("orders", 0),))
    assert broker.produce_response(version, req, CATALOG) is None
