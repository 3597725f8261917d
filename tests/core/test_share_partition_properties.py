"""Random sequences of fetches, acknowledgements, member exits, lock expiries and log-start moves
on one share partition; after every step: no offset held by two members, an acknowledged offset
is never delivered again, no delivery past the limit, the SPSO never goes back, and the newest
snapshot plus the updates written since rebuild exactly the persisted state."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.core.messages import ErrorCode
from coordinator.core.share.partition import (
    AcknowledgeType,
    AcquireMode,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    ShareSnapshot,
    ShareUpdate,
)

MEMBERS = ("m1", "m2", "m3")
CONFIG = SharePartitionConfig(
    record_lock_duration_ms=1000, delivery_count_limit=3, max_record_locks=12
)
BATCH = 4  # the upstream log is written in batches of 4 offsets


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.p = SharePartition(CONFIG)
        self.now = 0
        self.held: dict[int, str] = {}  # offset -> member, as the answers said
        self.done: set[int] = set()  # offsets accepted or rejected
        self.log_start = 0
        self.last_start = 0
        self.base: ShareSnapshot = self.p.take_snapshot()
        self.updates: list[ShareUpdate] = []

    def _keep(self, update: ShareUpdate | None) -> None:
        if update is not None:
            self.updates.append(update)

    def _forget_released(self) -> None:
        for offset, member in list(self.held.items()):
            rec = self.p.record(offset)
            if rec is None or rec[0] is not RecordState.ACQUIRED or rec[2] != member:
                del self.held[offset]

    @rule(
        member=st.sampled_from(MEMBERS),
        batches=st.integers(1, 3),
        max_records=st.integers(1, 10),
        record_limit=st.booleans(),
        abort=st.booleans(),
    )
    def fetch(
        self, member: str, batches: int, max_records: int, record_limit: bool, abort: bool
    ) -> None:
        if not self.p.can_acquire():
            return
        offset = max(self.p.next_fetch_offset(), self.log_start)
        base = offset - offset % BATCH
        fetched = [(b, b + BATCH - 1) for b in range(base, base + batches * BATCH, BATCH)]
        fetched[0] = (max(fetched[0][0], self.log_start), fetched[0][1])
        aborted = [(base + 1, base + 1)] if abort else []
        mode = AcquireMode.RECORD_LIMIT if record_limit else AcquireMode.BATCH_OPTIMIZED
        got = self.p.acquire(
            member,
            fetched,
            self.now,
            max_records=max_records,
            batch_size=BATCH,
            mode=mode,
            fetch_offset=offset,
            aborted=aborted,
        )
        self._keep(got.update)
        self._forget_released()
        for r in got.records:
            assert 1 <= r.delivery_count <= CONFIG.delivery_count_limit
            for o in range(r.first_offset, r.last_offset + 1):
                assert o not in self.held, (
                    f"offset {o} held by {self.held.get(o)} given to {member}"
                )
                assert o not in self.done, f"offset {o} was acknowledged, delivered again"
                assert o >= self.p.start_offset
                self.held[o] = member
        assert self.p.in_flight_count() <= CONFIG.max_record_locks + 3 * BATCH

    @rule(
        member=st.sampled_from(MEMBERS),
        ack=st.sampled_from(list(AcknowledgeType)),
        take=st.integers(1, 6),
    )
    def acknowledge(self, member: str, ack: AcknowledgeType, take: int) -> None:
        mine = sorted(o for o, m in self.held.items() if m == member)[:take]
        if not mine:
            return
        out = self.p.acknowledge(member, [(o, o, [ack]) for o in mine], self.now)
        assert out.error == ErrorCode.none, out
        self._keep(out.update)
        if ack in (AcknowledgeType.ACCEPT, AcknowledgeType.REJECT, AcknowledgeType.GAP):
            self.done.update(mine)
        self._forget_released()

    @rule(member=st.sampled_from(MEMBERS), other=st.sampled_from(MEMBERS))
    def acknowledge_someone_elses(self, member: str, other: str) -> None:
        start = self.p.start_offset  # below it an acknowledgement is ignored, as in Kafka
        theirs = sorted(o for o, m in self.held.items() if m == other and o >= start)
        if not theirs or member == other:
            return
        before = self.p.snapshot()
        out = self.p.acknowledge(member, [(theirs[0], theirs[0], [1])], self.now)
        assert out.error == ErrorCode.invalid_record_state and out.update is None
        assert self.p.snapshot() == before

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        self._keep(self.p.release_member(member))
        self._forget_released()
        assert member not in self.held.values()

    @rule(ms=st.integers(1, 1500))
    def tick(self, ms: int) -> None:
        self.now += ms
        deadline = self.p.next_deadline()
        self._keep(self.p.expire(self.now))
        self._forget_released()
        if deadline is not None and deadline > self.now:
            assert self.p.next_deadline() == deadline

    @rule(by=st.integers(1, 5))
    def log_start_moves(self, by: int) -> None:
        self.log_start = max(self.log_start, self.p.start_offset) + by
        self._keep(self.p.advance_start_offset(self.log_start))

    @rule()
    def snapshot(self) -> None:
        self.base = self.p.take_snapshot()
        self.updates = []

    @invariant()
    def start_offset_never_goes_back(self) -> None:
        assert self.p.start_offset >= self.last_start
        self.last_start = self.p.start_offset

    @invariant()
    def nothing_expired_is_still_held(self) -> None:
        deadline = self.p.next_deadline()
        assert (deadline is None) == (
            not self.p.acquired_by("m1") + self.p.acquired_by("m2") + self.p.acquired_by("m3")
        )
        assert deadline is None or deadline > self.now

    @invariant()
    def snapshot_and_updates_rebuild_the_persisted_state(self) -> None:
        rebuilt = SharePartition.from_snapshot(self.base, CONFIG)
        for update in self.updates:
            assert rebuilt.apply_update(update)
        assert rebuilt.snapshot() == self.p.snapshot()
        again = SharePartition.from_snapshot(self.p.snapshot(), CONFIG)
        assert again.snapshot() == self.p.snapshot()


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
