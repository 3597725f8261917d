"""`serve --workers N`: each worker a coordinator node of its own, named by FindCoordinator.

Kafka's clients send a group's requests to that group's coordinator, the broker FindCoordinator
names, over a connection of their own. The N workers (coordinator.sidecar.workers) share the
client and broker ports, so a request reaching the worker that does not own its group's state
partition is forwarded to the owner (about (N-1)/N of them). Here each worker also listens on a
port of its own under a node id of its own, and FindCoordinator for a group names the node of
the worker that owns the group's state partition: the client's group requests then go straight
to the owner, on the same host.

- The parent binds one listening socket per worker before starting them (`bind_sockets`) and
  keeps it for its whole life: worker i inherits socket i (`FD_ENV`) and every worker learns the
  ports of all (`PORTS_ENV`). A worker started again after a crash listens on the same port, and
  connections made while it was down wait in the socket's backlog instead of being refused.
- Worker i is node `NODE_BASE + i`: far from real broker ids, and far from the int32 maximum
  (the Java client keeps its coordinator connection under id `Integer.MAX_VALUE - node`, which
  must not be a broker's). Metadata and DescribeCluster answers list every worker's node besides
  the upstream brokers (`extra_brokers`): the Java admin client and librdkafka look a coordinator
  up among the brokers they know. No partition is led by these nodes, so a client sends them
  only group requests and what any broker answers (Metadata, ApiVersions): a worker's node
  listener is a bootstrap listener, forwarding those upstream.
- Which worker owns a group: the fleet's view (`parts`), and the worker index of each member's
  fleet address from the fleet group's assignment (coordinator.sidecar.fleet_assignor).

Invariants:
- Correct before fast: a request reaching a worker that does not own its group (a stale answer:
  the owner died, the fleet rebalanced) is forwarded to the owner as before, or answered
  COORDINATOR_LOAD_IN_PROGRESS while the group is between owners (coordinator.sidecar.forward);
  never NOT_COORDINATOR for a group that has an owner, which librdkafka fails a synchronous
  commit on.
- A group between owners (its state partition unassigned while the fleet forms or after a
  member died, or fenced) gets COORDINATOR_NOT_AVAILABLE, as from a Kafka broker whose
  coordinator partition has no leader yet: clients ask again after their backoff, and find the
  owner once the fleet has placed it, instead of keeping whichever worker answered first.
  (Group requests that reach a worker meanwhile still get COORDINATOR_LOAD_IN_PROGRESS.)
- A group owned by a member that is not a worker of this host (a member in another pod, which a
  pod's clients may not reach), or by a worker whose index is unknown, is named at the
  answering worker's own node, which forwards.
- Only workers of one host: a fleet of pods keeps naming the broker listener (docs/sidecar.md).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from coordinator.sidecar.rewrite import BrokerAddress
from coordinator.sidecar.state_topic import partition_for

WORKER_ENV: Final = "GROUPCOORD_WORKER_INDEX"
FD_ENV: Final = "GROUPCOORD_WORKER_NODE_FD"  # this worker's inherited listening socket
PORTS_ENV: Final = "GROUPCOORD_WORKER_NODE_PORTS"  # every worker's port, by index
NODE_BASE: Final = 1_000_000_000


def index() -> int | None:
    """This process's index among `serve --workers N`'s workers, or None (not a worker)."""
    value = os.environ.get(WORKER_ENV)
    return int(value) if value is not None and value.isdigit() else None


# Not under mutation testing: the parent's sockets, held by tests/sidecar/test_fleet_workers.py
# (`serve --workers 2` with real clients, whose group requests reach the owner's node).
# pragma: no mutate start
def bind_sockets(host: str, n: int) -> list[socket.socket]:
    """The parent's: one listening socket per worker, on an ephemeral port of `host` (the
    client listener's host), inheritable by the worker it is passed to."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.create_server((host, 0), backlog=1024)
            socks.append(sock)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


# pragma: no mutate end
def worker_env(socks: Sequence[socket.socket], i: int) -> dict[str, str]:
    """What worker i is told: its socket's descriptor and the ports of all."""
    ports = ",".join(str(s.getsockname()[1]) for s in socks)
    return {FD_ENV: str(socks[i].fileno()), PORTS_ENV: ports}


class Owners(Protocol):
    """What naming the owner needs of coordinator.sidecar.fleet.Fleet."""

    @property
    def parts(self) -> Sequence[Any]: ...  # fleet.Part: status, owner (a fleet address)

    @property
    def worker_of(self) -> dict[str, int]: ...  # fleet address -> worker index

    @property
    def address(self) -> str: ...  # this member's own fleet address, host:port


@dataclass(frozen=True, slots=True)
class WorkerNodes:
    """This worker's view of the N workers' coordinator nodes."""

    index: int
    ports: tuple[int, ...]
    host: str  # the advertised host (the broker listeners')

    def node(self, i: int) -> BrokerAddress:
        return BrokerAddress(NODE_BASE + i, self.host, self.ports[i])

    def nodes(self) -> list[BrokerAddress]:
        return [self.node(i) for i in range(len(self.ports))]

    def owner(self, group_id: str, owners: Owners | None) -> BrokerAddress | None:
        """The node of the worker owning `group_id`'s state partition; None while it has no
        owner; this worker's own when the owner is not one of this host's workers."""
        if owners is not None:
            parts = owners.parts
            part = parts[partition_for(group_id, len(parts))]
            if part.status in ("unassigned", "fenced"):
                return None
            if (
                part.status == "remote"
                and part.owner
                and _host(part.owner) == _host(owners.address)
            ):
                # Only a worker of this host: the fleet may hold several hosts' workers, each
                # with its own indexes, and another host's index names one of ours.
                i = owners.worker_of.get(part.owner)
                if i is not None and 0 <= i < len(self.ports):
                    return self.node(i)
        return self.node(self.index)


def _host(address: str) -> str:
    """The host of a fleet address, host:port (an IPv6 host in brackets)."""
    return address.rpartition(":")[0]


# Not under mutation testing to the end of the module: the inherited socket, held by
# tests/sidecar/test_fleet_workers.py (a worker that did not get its socket and ports would not
# be named by FindCoordinator, and its clients' requests would not reach it).
# pragma: no mutate block
def from_env(host: str) -> tuple[WorkerNodes, socket.socket] | None:
    """In a worker started by `serve --workers N`: its nodes and its inherited listening socket;
    None in any other process (or a parent too old to pass them)."""
    i = index()
    fd, ports = os.environ.get(FD_ENV), os.environ.get(PORTS_ENV)
    if i is None or not fd or not ports:
        return None
    sock = socket.socket(fileno=int(fd))
    sock.setblocking(False)
    return WorkerNodes(i, tuple(int(p) for p in ports.split(",")), host), sock
