"""The fleet group's assignor and rebalance listener (aiokafka), apart from sidecar.fleet.

The members of a fleet form a consumer group on the upstream subscribed to the state topic; the
leader's assignor (`assignor`) places the state partitions (coordinator.sidecar.placement's
sticky, balanced plan) and hands every member the whole owner map in its assignment's user data:
partition -> (stable id, fleet address), the upstream member id of each address (a survivor
evicts a dead member by it), and, for `serve --workers N`, the worker index of each address
(coordinator.sidecar.worker_nodes names the owning worker's own node in FindCoordinator).

Invariants:
- A member's metadata names its stable id and fleet address, and its worker index when it is a
  worker; a member that names no index (an older version, a pod's single process) is simply not
  in `workers`, and FindCoordinator never names another member for its groups.
- Undecodable user data is an empty map (logged), never an exception inside aiokafka.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from coordinator.sidecar import worker_nodes
from coordinator.sidecar.placement import assign_partitions


class Fleet(Protocol):
    """What the assignor and the listener use of coordinator.sidecar.fleet.Fleet (which imports
    this module)."""

    member_id: str
    address: str
    topic: Any  # state_topic.StateTopic: its name
    parts: list[Any]
    owner_map: OwnerMap
    worker_of: dict[str, int]
    _pending_owners: dict[int, tuple[str, str]]
    _pending_members: dict[str, str]
    _consumer: Any

    def assigned(self, partitions: set[int], owner_map: OwnerMap) -> None: ...


log = logging.getLogger("groupcoord.fleet")


@dataclass(slots=True)
class OwnerMap:
    generation: int = -1
    owners: dict[int, tuple[str, str]] = field(default_factory=dict)  # p -> (member id, addr)


# -- the fleet group's assignor and listener (aiokafka) -------------------------------------------


def assignor(fleet: Fleet) -> type[AbstractPartitionAssignor]:
    """aiokafka's assignors are classes with classmethods: one made per fleet member."""

    class FleetAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
        name = "groupcoord-fleet-v1"
        version = 0

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            mine: dict[str, Any] = {"id": fleet.member_id, "address": fleet.address}
            index = worker_nodes.index()
            if index is not None:  # serve --workers N: FindCoordinator may name this worker
                mine["worker"] = index
            data = json.dumps(mine).encode()
            return ConsumerProtocolMemberMetadata(cls.version, sorted(topics), data)

        @classmethod
        def assign(
            cls, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
        ) -> dict[str, ConsumerProtocolMemberAssignment]:
            info: dict[str, tuple[str, str]] = {}
            workers: dict[str, int] = {}  # fleet address -> worker index, for the workers
            for member_id, meta in members.items():
                try:
                    data = json.loads(meta.user_data or b"{}")
                    info[member_id] = (str(data["id"]), str(data["address"]))
                    if isinstance(data.get("worker"), int):
                        workers[str(data["address"])] = data["worker"]
                except (ValueError, KeyError, AttributeError):
                    info[member_id] = (member_id, "")
            topic = fleet.topic.name
            partitions = sorted(cluster.partitions_for_topic(topic) or range(len(fleet.parts)))
            previous = {p: mid for p, (mid, _) in fleet.owner_map.owners.items()}
            plan = assign_partitions(partitions, {m: i[0] for m, i in info.items()}, previous)
            owners = {p: info[m] for m, ps in plan.items() for p in ps}
            user_data = json.dumps(
                {
                    "owners": {str(p): list(o) for p, o in owners.items()},
                    # Who is who upstream: a survivor removes a dead member by its member id.
                    "members": {address: m for m, (_, address) in info.items()},
                    "workers": workers,
                }
            )
            return {
                m: ConsumerProtocolMemberAssignment(
                    cls.version, [(topic, sorted(ps))], user_data.encode()
                )
                for m, ps in plan.items()
            }

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            try:
                data = json.loads(assignment.user_data or b"{}")
                owners = data.get("owners", {})
                fleet._pending_owners = {int(p): (o[0], o[1]) for p, o in owners.items()}
                members = data.get("members", {})
                fleet._pending_members = {str(a): str(m) for a, m in members.items()}
                workers = data.get("workers", {})
                fleet.worker_of = {str(a): int(i) for a, i in workers.items()}
            except (ValueError, TypeError, IndexError, AttributeError):
                log.warning("undecodable fleet assignment user data")
                fleet._pending_owners, fleet._pending_members, fleet.worker_of = {}, {}, {}

    return FleetAssignor


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    async def on_partitions_revoked(self, revoked: Any) -> None:
        # Keep serving until the new assignment: partitions that stay are never interrupted,
        # and a partition that moves is fenced by its new owner's claim (module docstring).
        return None

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        fleet = self.fleet
        consumer = fleet._consumer
        if consumer is not None:
            consumer.pause(*assigned)  # membership only: never fetch the state topic here
        # aiokafka keeps the generation on its private coordinator; it is the claim epoch.
        coordinator = getattr(consumer, "_coordinator", None)
        generation = int(getattr(coordinator, "generation", -1))
        fleet.assigned(
            {tp.partition for tp in assigned}, OwnerMap(generation, dict(fleet._pending_owners))
        )


def listener(fleet: Fleet) -> ConsumerRebalanceListener:
    return _Listener(fleet)
