"""coordinator.sidecar.worker_nodes, pinned for mutation testing: what a worker of `serve
--workers N` learns of itself (its index, its socket's descriptor, every worker's port).

Pure: the sockets are stand-ins with the two methods read; the real ones, inherited by real
workers, are in tests/sidecar/test_fleet_workers.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coordinator.sidecar import worker_nodes
from coordinator.sidecar.worker_nodes import FD_ENV, PORTS_ENV, WORKER_ENV


@dataclass
class Sock:
    fd: int
    port: int

    def fileno(self) -> int:
        return self.fd

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


@pytest.mark.parametrize(("value", "expected"), [
    ("0", 0), ("3", 3), ("12", 12),
    (None, None), ("", None), ("-1", None), ("x", None), ("1.5", None),
])
def test_a_worker_knows_its_index(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                  expected: int | None) -> None:
    if value is None:
        monkeypatch.delenv(WORKER_ENV, raising=False)
    else:
        monkeypatch.setenv(WORKER_ENV, value)
    assert worker_nodes.index() == expected


def test_each_worker_gets_its_own_socket_and_every_port() -> None:
    socks = [Sock(11, 7000), Sock(12, 7001), Sock(13, 7002)]
    assert worker_nodes.worker_env(socks, 0) == {FD_ENV: "11", PORTS_ENV: "7000,7001,7002"}
    assert worker_nodes.worker_env(socks, 2) == {FD_ENV: "13", PORTS_ENV: "7000,7001,7002"}


@dataclass
class Part:
    status: str
    owner: str | None = None


@dataclass
class Fleet:
    parts: list[Part]
    worker_of: dict[str, int]
    address: str = "127.0.0.1:9000"


@pytest.mark.parametrize(("me", "status", "owner_index", "named"), [
    (1, "remote", 0, 0),  # worker 0 owns it: its node, named by worker 1
    (0, "remote", 1, 1),
    (0, "remote", 2, 0),  # one past the last port: not a worker of ours, named at our own
    (1, "serving", 0, 1),  # ours, whatever owner the part still names
    (1, "loading", 0, 1),
])
def test_the_owner_node_by_worker_index(me: int, status: str, owner_index: int,
                                        named: int) -> None:
    nodes = worker_nodes.WorkerNodes(me, (7000, 7001), "127.0.0.1")
    owner = "127.0.0.1:9100"
    fleet = Fleet([Part(status, owner)], {owner: owner_index})
    assert nodes.owner("g", fleet) == nodes.node(named)
    assert nodes.node(named).port == 7000 + named
