"""Topic admin APIs (broker.topic_admin) for every advertised version, the refresh signal
(coordinator.broker.refresh_signal), and the broker answers it changes. Responses are encoded as the
server sends them and read back with kio; requests are kio entities of each version."""

from __future__ import annotations

import datetime
import itertools
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.broker import answers as broker
from coordinator.broker import topic_admin
from coordinator.broker.answers import make
from coordinator.broker.refresh_signal import MAX_GONE, RefreshSignal
from coordinator.core.topics import TopicCatalog, TopicInfo, topic_name_error
from protocol import apis
from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from tests.broker.test_broker import req_module, request, round_trip, versions

E = ErrorCode
TIMEOUT = datetime.timedelta(seconds=30)


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def catalog() -> TopicCatalog:
    return TopicCatalog([TopicInfo("orders", uuid.UUID(int=100), 4)])


def creatable(
    version: int, name: str, partitions: int = 3, factor: int = -1, assignments: Any = ()
) -> Any:
    mod = req_module(CREATE_TOPICS, version)
    return make(
        mod.CreatableTopic,
        name=name,
        num_partitions=partitions,
        replication_factor=factor,
        assignments=tuple(
            make(mod.CreatableReplicaAssignment, partition_index=i, broker_ids=tuple(b))
            for i, b in assignments
        ),
        configs=(make(mod.CreatableTopicConfig, name="retention.ms", value="1000"),),
    )


def create(
    version: int, cat: TopicCatalog, *topics: Any, validate_only: bool = False
) -> tuple[Any, list]:
    req = request(
        CREATE_TOPICS, version, topics=topics, timeout=TIMEOUT, validate_only=validate_only
    )
    outcome = topic_admin.handle(CREATE_TOPICS, version, req, cat, ids())
    return round_trip(CREATE_TOPICS, version, outcome.build()), outcome.changes


@pytest.mark.parametrize("version", versions(CREATE_TOPICS))
def test_create_topics(version: int) -> None:
    cat = catalog()
    response, changes = create(
        version,
        cat,
        creatable(version, "new", 6),
        creatable(version, "dflt", -1, -1),
        creatable(version, "orders"),
        creatable(version, "bad/name"),
        creatable(version, "zero", 0),
        creatable(version, "rf3", 2, 3),
        creatable(version, "manual", -1, -1, [(0, [0]), (1, [0])]),
        creatable(version, "badbroker", -1, -1, [(0, [1])]),
        creatable(version, "both", 2, -1, [(0, [0])]),
        creatable(version, "twice"),
        creatable(version, "twice"),
    )
    errors = {t.name: t.error_code for t in response.topics}
    assert errors == {
        "new": E.none,
        "dflt": E.none,
        "orders": E.topic_already_exists,
        "bad/name": E.invalid_topic_exception,
        "zero": E.invalid_partitions,
        "rf3": E.invalid_replication_factor,
        "manual": E.none,
        "badbroker": E.invalid_replica_assignment,
        "both": E.invalid_request,
        "twice": E.invalid_request,
    }
    assert [(n, i.partitions) for n, i in changes if i is not None] == [
        ("new", 6),
        ("dflt", 1),
        ("manual", 2),
    ]
    new = next(t for t in response.topics if t.name == "new")
    if version >= 5:
        assert (new.num_partitions, new.replication_factor) == (6, 1)
    if version >= 7:
        assert new.topic_id == changes[0][1].topic_id
    assert response.topics[2].error_message == "Topic 'orders' already exists."


@pytest.mark.parametrize("version", versions(CREATE_TOPICS))
def test_create_topics_validate_only_changes_nothing(version: int) -> None:
    response, changes = create(version, catalog(), creatable(version, "new", 6), validate_only=True)
    assert response.topics[0].error_code == E.none and not changes


@pytest.mark.parametrize("version", versions(CREATE_PARTITIONS))
def test_create_partitions(version: int) -> None:
    cat = catalog()
    cat.put(TopicInfo("racked", uuid.UUID(int=5), 2, (("a",), ("b",))))
    mod = req_module(CREATE_PARTITIONS, version)

    def topic(name: str, count: int, assignments: Any = None) -> Any:
        return make(
            mod.CreatePartitionsTopic,
            name=name,
            count=count,
            assignments=None
            if assignments is None
            else tuple(
                make(mod.CreatePartitionsAssignment, broker_ids=tuple(b)) for b in assignments
            ),
        )

    req = request(
        CREATE_PARTITIONS,
        version,
        topics=(
            topic("orders", 8),
            topic("racked", 3, [[0]]),
            topic("missing", 3),
            topic("same", 1),
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )
    cat.put(TopicInfo("same", uuid.UUID(int=6), 1))
    outcome = topic_admin.handle(CREATE_PARTITIONS, version, req, cat)
    response = round_trip(CREATE_PARTITIONS, version, outcome.build())
    assert {r.name: r.error_code for r in response.results} == {
        "orders": E.none,
        "racked": E.none,
        "missing": E.unknown_topic_or_partition,
        "same": E.invalid_partitions,
    }
    assert outcome.changes == [
        ("orders", TopicInfo("orders", uuid.UUID(int=100), 8)),
        ("racked", TopicInfo("racked", uuid.UUID(int=5), 3, (("a",), ("b",), ()))),
    ]
    fewer = request(
        CREATE_PARTITIONS,
        version,
        topics=(topic("orders", 2), topic("orders", 9)),
        timeout=TIMEOUT,
        validate_only=False,
    )
    response = round_trip(
        CREATE_PARTITIONS,
        version,
        topic_admin.handle(CREATE_PARTITIONS, version, fewer, cat).build(),
    )
    assert [r.error_code for r in response.results] == [E.invalid_request, E.invalid_request]
    lower = request(
        CREATE_PARTITIONS,
        version,
        topics=(topic("orders", 2),),
        timeout=TIMEOUT,
        validate_only=False,
    )
    response = round_trip(
        CREATE_PARTITIONS,
        version,
        topic_admin.handle(CREATE_PARTITIONS, version, lower, cat).build(),
    )
    assert (
        response.results[0].error_message
        == "Topic currently has 4 partitions, which is higher than the requested 2."
    )


@pytest.mark.parametrize("version", versions(DELETE_TOPICS))
def test_delete_topics(version: int) -> None:
    cat = catalog()
    cat.put(TopicInfo("other", uuid.UUID(int=200), 1))
    if version >= 6:
        mod = req_module(DELETE_TOPICS, version)
        topics = (
            make(mod.DeleteTopicState, name="orders", topic_id=None),
            make(mod.DeleteTopicState, name=None, topic_id=uuid.UUID(int=200)),
            make(mod.DeleteTopicState, name=None, topic_id=uuid.UUID(int=404)),
            make(mod.DeleteTopicState, name="missing", topic_id=None),
        )
        req = request(DELETE_TOPICS, version, topics=topics, timeout=TIMEOUT)
    else:
        req = request(
            DELETE_TOPICS, version, topic_names=("orders", "other", "missing"), timeout=TIMEOUT
        )
    outcome = topic_admin.handle(DELETE_TOPICS, version, req, cat)
    response = round_trip(DELETE_TOPICS, version, outcome.build())
    assert outcome.changes == [("orders", None), ("other", None)]
    codes = [r.error_code for r in response.responses]
    if version >= 6:
        assert codes == [E.none, E.none, E.unknown_topic_id, E.unknown_topic_or_partition]
        assert response.responses[1].name == "other"
    else:
        assert codes == [E.none, E.none, E.unknown_topic_or_partition]


@pytest.mark.parametrize("api_key", sorted(topic_admin.TOPIC_ADMIN_APIS))
def test_failed_write_answers_every_topic_not_controller(api_key: int) -> None:
    version = apis.APIS[api_key].max_version
    cat = catalog()
    if api_key == CREATE_TOPICS:
        req = request(
            api_key,
            version,
            topics=(creatable(version, "x"),),
            timeout=TIMEOUT,
            validate_only=False,
        )
        field = "topics"
    elif api_key == DELETE_TOPICS:
        mod = req_module(api_key, version)
        req = request(
            api_key,
            version,
            topics=(make(mod.DeleteTopicState, name="orders", topic_id=None),),
            timeout=TIMEOUT,
        )
        field = "responses"
    else:
        mod = req_module(api_key, version)
        t = make(mod.CreatePartitionsTopic, name="orders", count=5, assignments=None)
        req = request(api_key, version, topics=(t,), timeout=TIMEOUT, validate_only=False)
        field = "results"
    outcome = topic_admin.handle(api_key, version, req, cat)
    response = round_trip(api_key, version, outcome.failed(E.not_controller))
    assert [r.error_code for r in getattr(response, field)] == [E.not_controller]


@given(st.text(max_size=260))
def test_topic_names_follow_kafka(name: str) -> None:
    legal = (
        0 < len(name) <= 249
        and name not in (".", "..")
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )
    assert (topic_name_error(name) is None) == legal


# -- the refresh signal ----------------------------------------------------------------------------


def test_refresh_signal_until_the_client_reads_metadata() -> None:
    signal = RefreshSignal(window_ms=10_000)
    assert not signal and signal.stale_topics(1, ("/h", "c"), 0) == frozenset()
    signal.topic_changed("orders", 1_000)
    assert signal.stale_topics(1, ("/h", "c"), 1_001) == {"orders"}
    signal.metadata_read(1, ("/h", "c"), ["payments"], 1_002)  # not the changed topic
    assert signal.stale_topics(1, ("/h", "c"), 1_003) == {"orders"}
    signal.metadata_read(1, ("/h", "c"), ["orders"], 1_004)
    assert signal.stale_topics(1, ("/h", "c"), 1_005) == frozenset()
    # Another connection of the same client (librdkafka's bootstrap connection asked).
    assert signal.stale_topics(2, ("/h", "c"), 1_005) == frozenset()
    # Another client has not asked yet.
    assert signal.stale_topics(3, ("/h", "other"), 1_005) == {"orders"}
    signal.metadata_read(3, ("/h", "other"), None, 1_006)  # all topics
    assert signal.stale_topics(3, ("/h", "other"), 1_007) == frozenset()
    # A new change re-arms it for everyone; the window bounds it.
    signal.topic_changed("orders", 2_000)
    assert signal.stale_topics(1, ("/h", "c"), 2_001) == {"orders"}
    assert signal.stale_topics(1, ("/h", "c"), 12_000) == frozenset() and not signal


def test_a_deleted_topic_is_gone_for_every_client_until_it_comes_back_or_ages_out() -> None:
    signal = RefreshSignal(window_ms=10_000, gone_ms=60_000)
    signal.topic_deleted("orders", 1_000)
    assert signal and signal.gone("orders") and signal.why("orders") == "topic_gone"
    signal.metadata_read(1, ("/h", "c"), None, 1_001)  # reading metadata does not un-delete it
    assert signal.stale_topics(1, ("/h", "c"), 1_002) == {"orders"}
    assert signal.stale_topics(2, ("/h", "other"), 60_999) == {"orders"}
    assert signal.stale_topics(2, ("/h", "other"), 61_000) == frozenset() and not signal
    signal.topic_deleted("orders", 70_000)
    signal.topic_created("orders")  # it came back: nothing to signal for a first appearance
    assert not signal and not signal.gone("orders")
    signal.topic_deleted("orders", 80_000)
    signal.topic_changed("orders", 80_001)  # re-created: stale for whoever has not re-read it
    assert signal.why("orders") == "stale_metadata"
    assert signal.stale_topics(1, ("/h", "c"), 80_002) == {"orders"}


def test_gone_topics_are_bounded() -> None:
    signal = RefreshSignal()
    for i in range(MAX_GONE + 5):
        signal.topic_deleted(f"t{i}", i)
    assert not signal.gone("t4") and signal.gone("t5") and signal.gone(f"t{MAX_GONE + 4}")
    assert len(signal.stale_topics(1, ("/h", "c"), MAX_GONE + 5)) == MAX_GONE


def test_fetch_and_list_offsets_answer_not_leader_for_stale_topics() -> None:
    cat = TopicCatalog(
        [TopicInfo("orders", uuid.UUID(int=7), 3), TopicInfo("other", uuid.UUID(int=8), 1)]
    )
    version = 12
    mod = req_module(apis.FETCH, version)
    topics = tuple(
        make(
            mod.FetchTopic,
            topic=name,
            partitions=(
                make(
                    mod.FetchPartition,
                    partition=0,
                    current_leader_epoch=-1,
                    fetch_offset=5,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=1024,
                ),
            ),
        )
        for name in ("orders", "other")
    )
    req = request(
        apis.FETCH,
        version,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )
    response, wait_ms = broker.fetch_response(version, req, cat, frozenset({"orders"}))
    decoded = round_trip(apis.FETCH, version, response)
    codes = {t.topic: t.partitions[0].error_code for t in decoded.responses}
    assert codes == {"orders": E.not_leader_or_follower, "other": E.none}
    assert wait_ms == 0  # answered at once, as Kafka does on a partition error
    _, wait_ms = broker.fetch_response(version, req, cat)
    assert wait_ms == 500
    lo_mod = req_module(apis.LIST_OFFSETS, 7)
    lo = request(
        apis.LIST_OFFSETS,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=(
            make(
                lo_mod.ListOffsetsTopic,
                name="orders",
                partitions=(
                    make(
                        lo_mod.ListOffsetsPartition,
                        partition_index=1,
                        current_leader_epoch=-1,
                        timestamp=-1,
                    ),
                ),
            ),
        ),
    )
    decoded = round_trip(
        apis.LIST_OFFSETS, 7, broker.list_offsets_response(7, lo, cat, frozenset({"orders"}))
    )
    assert decoded.topics[0].partitions[0].error_code == E.not_leader_or_follower
