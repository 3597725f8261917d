"""Issue 24, item 5: metrics that cover the work.

- Every API groupcoord answers has its `groupcoord_requests_total` series from the start, and a
  real client's Fetch against a standalone groupcoord is counted there.
- Sidecar mode, in front of a real tansu and of Kafka 4.4: upstream reachability (overall and per
  broker), forwarded requests and bytes by API, upstream latency, after real clients produced and
  consumed through it; what the sidecar answers itself (ApiVersions, FindCoordinator, the group
  APIs) stays in `groupcoord_requests_total`, what it forwards does not.
- History drops are a counter (`groupcoord_history_dropped_events_total`), and a running server
  exports the history's counters.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import GroupCreated
from coordinator.core.topics import TopicCatalog
from coordinator.serve import metrics
from coordinator.serve.history import HistoryRecorder, HistorySettings
from coordinator.serve.server import Server, ServerOptions
from protocol import apis
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support.sidecar_util import Stack, Upstream, create_topic, produce, stack, upstream

__all__ = ["stack", "upstream"]  # the fixtures


def value(text: str, name: str, **labels: str) -> float | None:
    """A sample of a /metrics text; None when it is not there."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def new_server() -> Server:
    ids = itertools.count()
    options = ServerOptions(port=0, coordinator=CoordinatorConfig(initial_rebalance_delay_ms=0))
    return Server(options, TopicCatalog(()), lambda p: f"{p}-{next(ids)}")


# -- every answered API has its series -----------------------------------------------------------


def test_every_api_has_its_series_before_its_first_request() -> None:
    m = metrics.Metrics(new_server())
    for api_key in apis.APIS:
        labels = {"api": metrics.api_name(api_key), "error": "NONE"}
        assert m.registry.get_sample_value("groupcoord_requests_total", labels) == 0, labels
        count = m.registry.get_sample_value(
            "groupcoord_request_duration_seconds_count", {"api": labels["api"]}
        )
        assert count == 0, labels
    # A sidecar forwards these: their series go (counted as groupcoord_upstream_* instead).
    m.stats.not_answered_here([apis.FETCH, apis.PRODUCE])

    def requests(api: str) -> float | None:
        return m.registry.get_sample_value(
            "groupcoord_requests_total", {"api": api, "error": "NONE"}
        )

    assert requests("Fetch") is None and requests("Produce") is None
    assert requests("JoinGroup") == 0


def test_api_names_cover_every_kafka_api() -> None:
    assert metrics.api_name(apis.LIST_OFFSETS) == "ListOffsets"
    assert metrics.api_name(22) == "InitProducerId"  # not served here, still named
    assert metrics.api_name(32000) == "32000"


@pytest.mark.clients
def test_a_real_clients_fetches_are_counted_and_history_counters_exported(
    tmp_path: Path,
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    proc = ops_util.start(tmp_path, tmp_path / "data", {"t": 1}, metrics=True)
    try:
        before = value(proc.metrics_text(), "groupcoord_requests_total", api="Fetch", error="NONE")
        assert before == 0
        consumer = KafkaConsumer(bootstrap_servers=proc.bootstrap, enable_auto_commit=False,
                                 fetch_max_wait_ms=50)  # fmt: skip
        try:
            consumer.assign([TopicPartition("t", 0)])
            consumer.seek(TopicPartition("t", 0), 0)

            def fetches() -> float:
                consumer.poll(timeout_ms=100)
                text = proc.metrics_text()
                return value(text, "groupcoord_requests_total", api="Fetch", error="NONE") or 0

            rc.wait_until_sync(lambda: fetches() >= 3, 20, "three Fetch requests counted")
        finally:
            consumer.close()
        text = proc.metrics_text()
        assert value(text, "groupcoord_history_dropped_events_total") == 0
        assert value(text, "groupcoord_history_write_errors_total") == 0
        assert value(text, "groupcoord_history_written_entries_total") is not None
    finally:
        proc.kill()


def test_history_drops_are_counted(tmp_path: Path) -> None:
    m = metrics.Metrics(new_server())
    recorder = HistoryRecorder(tmp_path / "history", HistorySettings(max_queued_events=2))
    m.history = recorder
    for n in range(5):  # not started: nothing drains the queue
        recorder.record(GroupCreated(f"g{n}"))
    assert m.registry.get_sample_value("groupcoord_history_dropped_events_total") == 3
    assert m.registry.get_sample_value("groupcoord_history_lost_entries_total") == 0


# -- sidecar mode --------------------------------------------------------------------------------

VALUE_BYTES = 1000
MESSAGES = 200


async def consume_all(bootstrap: str, topic: str, count: int) -> int:
    """Read `count` messages through the sidecar with aiokafka; returns the value bytes read."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="reader",
                                auto_offset_reset="earliest")  # fmt: skip
    await consumer.start()
    read = 0
    got = 0
    try:
        async with asyncio.timeout(30):
            while got < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += len(records)
                    read += sum(len(r.value or b"") for r in records)
    finally:
        await consumer.stop()
    return read


@pytest.mark.clients
async def test_sidecar_exports_upstream_health_traffic_and_latency(
    stack: Stack, upstream: Upstream
) -> None:
    sidecar = stack.sidecar(upstream.bootstrap)
    broker = {"broker": upstream.bootstrap}  # one node: the bootstrap is the broker

    def up() -> tuple[float | None, float | None]:
        text = sidecar.metrics()
        return value(text, "groupcoord_upstream_up"), value(
            text, "groupcoord_upstream_broker_up", **broker
        )

    await rc.wait_until(lambda: up() == (1, 1), 15, "the upstream reported up")
    topic = upstream.name("m")
    await create_topic(sidecar.bootstrap, topic, 1)
    keys = [f"{n:04d}".ljust(VALUE_BYTES, "v") for n in range(MESSAGES)]  # value = key
    await produce(sidecar.bootstrap, topic, keys)
    read = await consume_all(sidecar.bootstrap, topic, MESSAGES)
    assert read == MESSAGES * VALUE_BYTES

    text = sidecar.metrics()

    def traffic(name: str, api: str) -> float:
        return value(text, f"groupcoord_upstream_{name}", api=api) or 0

    assert traffic("requests_total", "Produce") >= 1
    assert traffic("request_bytes_total", "Produce") >= 2 * MESSAGES * VALUE_BYTES  # key + value
    assert traffic("requests_total", "Fetch") >= 1
    assert traffic("response_bytes_total", "Fetch") >= MESSAGES * VALUE_BYTES
    assert traffic("requests_total", "Metadata") >= 1
    assert traffic("requests_total", "CreateTopics") == 1
    # Every forwarded Produce (acks=all) was answered, and timed.
    assert traffic("request_duration_seconds_count", "Produce") == traffic(
        "requests_total", "Produce"
    )
    assert traffic("request_duration_seconds_sum", "Produce") > 0
    # Answered here: counted as requests; forwarded: not.
    for api in ("ApiVersions", "FindCoordinator", "JoinGroup", "SyncGroup", "OffsetFetch"):
        assert (value(text, "groupcoord_requests_total", api=api, error="NONE") or 0) >= 1, api
    for api in ("Fetch", "Produce", "Metadata", "ListOffsets"):
        assert value(text, "groupcoord_requests_total", api=api, error="NONE") is None, api

    if upstream.tansu is None:
        return  # the shared Kafka stays up: the outage is shown on tansu, killed
    upstream.tansu.kill()
    await rc.wait_until(lambda: up() == (0, 0), 15, "the upstream reported down")
