"""Where a group is served in a sidecar fleet: the one question routing asks of ownership.

The fleet (coordinator.sidecar.fleet) decides which member owns each state partition; the group
API router (coordinator.sidecar.forward) only asks `locate(group_id)` and, for ListGroups, which
peers exist. Kept apart so the router can be tested with a table instead of a fleet.

Invariants:
- LOCAL: this member owns the group's state partition and has loaded it: answer here.
- LOADING: this member owns it and is reading it: COORDINATOR_LOAD_IN_PROGRESS (Kafka's answer
  while a coordinator loads a partition), clients retry.
- REMOTE: another member owns it; `address` is that member's fleet listener: forward there.
- UNKNOWN: nobody is known to own it now (the fleet is rebalancing, or it was fenced):
  NOT_COORDINATOR, on which clients look the coordinator up again and retry.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


class Placement(enum.Enum):
    LOCAL = "local"
    LOADING = "loading"
    REMOTE = "remote"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Where:
    placement: Placement
    address: tuple[str, int] | None = None  # the owner's fleet listener, for REMOTE


LOCAL = Where(Placement.LOCAL)
LOADING = Where(Placement.LOADING)
UNKNOWN = Where(Placement.UNKNOWN)


class Locator(Protocol):
    def locate(self, group_id: str) -> Where:
        """Where `group_id`'s requests are answered now."""
        ...

    def peers(self) -> list[tuple[str, int]]:
        """The other fleet members' listeners (ListGroups asks each of them)."""
        ...


# -- the fleet's state partitions over its members (the fleet group's assignor) ----------------


def assign_partitions(
    partitions: list[int], members: Mapping[str, str], previous: Mapping[int, str]
) -> dict[str, list[int]]:
    """Sticky and balanced: each member keeps up to ceil(n/m) of its previous partitions; the
    rest go to the members with the fewest, in (count, member) order. `members`: member id ->
    stable id (the process's uuid, which `previous` maps partitions to)."""
    if not members:
        return {}
    cap = math.ceil(len(partitions) / len(members))
    by_stable = {stable: member for member, stable in members.items()}
    out: dict[str, list[int]] = {m: [] for m in members}
    free: list[int] = []
    for p in sorted(partitions):
        member = by_stable.get(previous[p]) if p in previous else None
        if member is not None and len(out[member]) < cap:
            out[member].append(p)
        else:
            free.append(p)
    for p in free:
        member = min(out, key=lambda m: (len(out[m]), members[m]))
        out[member].append(p)
    return out
