"""What a share partition persists: Kafka's share-coordinator records, as values.

KIP-932 keeps a share partition's state in two record types on `__share_group_state`:
`ShareSnapshot` (a full picture: start offset + state batches) and `ShareUpdate` (a delta: the
batches one acknowledgement or lock expiry changed, and the start offset if it moved). A reader
rebuilds the state from the newest snapshot and the updates written after it with the same
snapshot epoch; `coordinator.core.share.partition` produces both and replays both.

Invariants:
- `StateBatch.delivery_state` is one of the persisted states 0 AVAILABLE, 2 ACKNOWLEDGED,
  4 ARCHIVED; ACQUIRED (1) is never persisted (an acquisition lock does not survive a restart,
  as in Kafka, where `PersisterStateBatch` never carries ACQUIRED).
- Batches are sorted, disjoint, and `first_offset <= last_offset`.
- `ShareUpdate.start_offset` is -1 when the start offset did not move (Kafka's ShareUpdateValue).
- `delivery_complete_count` (KIP-1226, Kafka 4.2+) counts terminal offsets at or above the start
  offset; -1 means unknown.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "NO_START_OFFSET",
    "RecordState",
    "ShareSnapshot",
    "ShareUpdate",
    "StateBatch",
]

NO_START_OFFSET = -1  # ShareUpdateValue.StartOffset when the start offset is unchanged


class RecordState(enum.IntEnum):
    """Kafka's RecordState ids (server/share/fetch/RecordState.java; 3 ARCHIVING is the
    dead-letter-queue state of KIP-1191, which groupcoord does not implement)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one state and one delivery count (ShareSnapshotValue.StateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """A full share-partition state (ShareSnapshotValue without its wall-clock timestamps, which
    the shell adds when it writes the record)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    """A delta to a snapshot (ShareUpdateValue): applies to the snapshot with `snapshot_epoch`."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
