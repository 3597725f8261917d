"""A sidecar fleet's metrics, read from the fleet document at scrape time: partitions by status,
load times of the served partitions, the fleet group's generation and rebalances, and the
compaction-hole repairs as a counter that never goes down when a partition's writer changes.
The fleet is a fixed document set as `Server.fleet_status`; no upstream runs."""

from __future__ import annotations

import itertools
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.topics import TopicCatalog
from coordinator.serve import metrics
from coordinator.serve import status as status_page
from coordinator.serve.server import Server, ServerOptions
from tests.serve.test_http_fleet import fleet_document

LATER = 1_800_000_000.0  # a later loaded_at: a new writer for the partition


def new_server() -> Server:
    ids = itertools.count()
    options = ServerOptions(port=0, coordinator=CoordinatorConfig(initial_rebalance_delay_ms=0))
    return Server(options, TopicCatalog(()), lambda p: f"{p}-{next(ids)}")


def sample(m: metrics.Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def fleet_samples(m: metrics.Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            if s.name.startswith("groupcoord_fleet_"):
                out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_the_statuses_are_the_pages() -> None:
    assert metrics.FLEET_STATUSES == status_page.FLEET_STATUSES


def test_no_fleet_series_outside_a_fleet() -> None:
    m = metrics.install(new_server())
    assert fleet_samples(m) == {}


def test_fleet_series_are_read_at_scrape_time() -> None:
    server = new_server()
    m = metrics.install(server)
    document = fleet_document()
    server.fleet_status = lambda: document
    for status, n in {
        "serving": 2,
        "loading": 1,
        "remote": 2,
        "fenced": 1,
        "unassigned": 0,
    }.items():
        assert sample(m, "groupcoord_fleet_partitions", status=status) == n
    # Only the partitions served here: 4 is remote, its old load time is not exported.
    assert fleet_samples(m)["groupcoord_fleet_partition_load_seconds"] == [
        ({"partition": "0"}, 0.125),
        ({"partition": "1"}, 0.5),
    ]
    assert sample(m, "groupcoord_fleet_generation") == 7
    assert sample(m, "groupcoord_fleet_rebalances_total") == 3
    assert sample(m, "groupcoord_fleet_members") == 2
    assert sample(m, "groupcoord_fleet_repaired_keys_total") == 2

    # The next assignment: partition 0 moved away, 3 arrived and loaded.
    document["generation"] = 8
    document["rebalances"] = 4
    document["partitions"][0].update(status="remote", owner="10.0.0.8:9094", epoch=None)
    document["partitions"][3].update(
        status="serving", owner="10.0.0.7:9094", epoch=8, load_seconds=1.5, loaded_at=2e9
    )
    assert sample(m, "groupcoord_fleet_generation") == 8
    assert sample(m, "groupcoord_fleet_rebalances_total") == 4
    assert sample(m, "groupcoord_fleet_partitions", status="serving") == 2
    assert sample(m, "groupcoord_fleet_partition_load_seconds", partition="0") is None
    assert sample(m, "groupcoord_fleet_partition_load_seconds", partition="3") == 1.5


def test_repaired_keys_total_never_goes_down_when_writers_change() -> None:
    server = new_server()
    m = metrics.install(server)
    document = fleet_document()
    part = document["partitions"][1]  # serving, 2 keys repaired by its writer
    server.fleet_status = lambda: document

    def total() -> float | None:
        return sample(m, "groupcoord_fleet_repaired_keys_total")

    assert total() == 2
    assert total() == 2  # a scrape counts nothing twice
    part["repaired_keys"] = 5  # the same writer repaired 3 more
    assert total() == 5
    part.update(status="remote", repaired_keys=0)  # moved away: its writer is gone
    assert total() == 5
    part.update(status="serving", repaired_keys=1, loaded_at=LATER)  # back, a new writer
    assert total() == 6
    part.update(repaired_keys=1, loaded_at=LATER + 60)  # reloaded again between two scrapes
    assert total() == 7
    other = document["partitions"][0]
    other["repaired_keys"] = 4
    assert total() == 11


def test_partition_labels_are_bounded_by_the_partition_count() -> None:
    server = new_server()
    m = metrics.install(server)
    document: dict[str, Any] = fleet_document()
    base = document["partitions"][0]
    document["partitions"] = [dict(base, partition=p) for p in range(50)]
    server.fleet_status = lambda: document
    for _ in range(3):
        loads = fleet_samples(m)["groupcoord_fleet_partition_load_seconds"]
        assert len(loads) == 50
        assert {labels["partition"] for labels, _ in loads} == {str(p) for p in range(50)}
    for name, series in fleet_samples(m).items():
        assert set().union(*(labels for labels, _ in series)) <= {"partition", "status"}, name
