"""The coordinator core: every classic group and its offsets, pure and synchronous.

Contract (the runtime depends on exactly this):
- `handle(reply_to, command, now_ms) -> Effects`: apply one request. `reply_to` is an opaque int
  the runtime uses to route the answer. The answer may be in the returned Effects or, for a parked
  JoinGroup/SyncGroup, in the Effects of a later call (handle or expire).
- `expire(now_ms) -> Effects`: fire every timer whose deadline is <= now_ms.
- `next_deadline_ms() -> int | None`: the earliest pending timer, for the runtime's single timer.
- `replay(record)` / `finish_loading(now_ms)`: rebuild durable state at start-up.
- Effects.replies are released by the runtime only after Effects.records (and every record
  appended before them) are durable.

Time is `now_ms`, a monotonic int. Wall-clock timestamps (record fields) are now_ms + epoch_offset_ms.
No asyncio, no sockets, no clock reads, no randomness except through the injected member-id factory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.events import Event
from coordinator.messages import Result
from coordinator.records import Record


@dataclass(slots=True)
class Effects:
    replies: list[tuple[int, Result]] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Kafka's defaults (reference §14)."""

    session_timeout_min_ms: int = 6_000
    session_timeout_max_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_group_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = 300_000  # Kafka's constant, not configurable there
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096


MemberIdFactory = Callable[[str], str]
"""prefix (client id or group instance id) -> "<prefix>-<uuid4>"."""
