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
