"""One in-flight record of a share partition (coordinator.core.share.partition keeps one per offset
in [SPSO, SPEO]) and the runs of them that are persisted (StateBatch). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.core.share.persisted import RecordState, StateBatch
from coordinator.core.share.values import AcknowledgeType

# The members as module constants: the per-offset loops compare with `is` and no attribute look-up.
AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ACKNOWLEDGED = RecordState.ACKNOWLEDGED
ARCHIVED = RecordState.ARCHIVED
ACCEPT = AcknowledgeType.ACCEPT
RENEW = AcknowledgeType.RENEW


class Rec:
    """One offset in flight: its state, delivery count and, while ACQUIRED, its lock."""

    __slots__ = ("delivery_count", "expiry_ms", "lock", "member_id", "state")

    def __init__(
        self,
        state: RecordState,
        delivery_count: int,
        member_id: str = "",
        lock: int = 0,
        expiry_ms: int = 0,
    ) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock = lock  # the acquisition lock's token while ACQUIRED
        self.expiry_ms = expiry_ms


def state_batches(
    items: Iterable[tuple[int, Rec]], *, keep_undelivered: bool = False
) -> list[StateBatch]:
    out: list[StateBatch] = []
    for offset, rec in items:
        state, count = rec.state, rec.delivery_count
        if state is RecordState.ACQUIRED:
            state, count = RecordState.AVAILABLE, count - 1
        if state is RecordState.AVAILABLE and count == 0 and not keep_undelivered:
            continue
        last = out[-1] if out else None
        if (
            last
            and last.last_offset == offset - 1
            and (last.delivery_state, last.delivery_count) == (state, count)
        ):
            out[-1] = StateBatch(last.first_offset, offset, state, count)
        else:
            out.append(StateBatch(offset, offset, state, count))
    return out
