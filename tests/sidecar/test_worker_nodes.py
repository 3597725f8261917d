"""coordinator.sidecar.worker_nodes: which node FindCoordinator names for a group (pure part).

The whole path, with real clients and `serve --workers 2`, is in tests/sidecar/test_fleet_workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from coordinator.sidecar.rewrite import BrokerAddress
from coordinator.sidecar.state_topic import partition_for
from coordinator.sidecar.worker_nodes import NODE_BASE, WorkerNodes


@dataclass
class Part:
    status: str = "unassigned"
    owner: str | None = None


@dataclass
class Fleet:
    parts: list[Part] = field(default_factory=lambda: [Part() for _ in range(50)])
    worker_of: dict[str, int] = field(default_factory=dict)
    address: str = "127.0.0.1:9000"  # this member's fleet address


NODES = WorkerNodes(0, (7000, 7001), "127.0.0.1")
GROUP = "g"


@pytest.mark.parametrize(("status", "owner", "workers", "named"), [
    ("remote", "127.0.0.1:9100", {"127.0.0.1:9100": 1}, 1),  # another worker owns it: its node
    ("serving", None, {}, 0),  # this worker owns it
    ("loading", None, {}, 0),
    ("unassigned", None, {}, None),  # between owners: COORDINATOR_NOT_AVAILABLE, asked again
    ("fenced", None, {}, None),
    ("remote", "10.0.0.9:9094", {}, 0),  # a member that is not a worker of this host
    ("remote", "10.0.0.9:9094", {"10.0.0.9:9094": 1}, 0),  # another host's worker 1: not ours
    ("remote", "127.0.0.1:9100", {"127.0.0.1:9100": 5}, 0),  # an index we have no port for
])
def test_the_owner_node(status: str, owner: str | None, workers: dict[str, int],
                        named: int | None) -> None:
    fleet = Fleet(worker_of=workers)
    fleet.parts[partition_for(GROUP, 50)] = Part(status, owner)
    expected = None if named is None else BrokerAddress(NODE_BASE + named, "127.0.0.1",
                                                        7000 + named)
    assert NODES.owner(GROUP, fleet) == expected


def test_without_a_fleet_view_and_every_node() -> None:
    assert NODES.owner(GROUP, None) == NODES.node(0)
    assert [n.node_id for n in NODES.nodes()] == [NODE_BASE, NODE_BASE + 1]
