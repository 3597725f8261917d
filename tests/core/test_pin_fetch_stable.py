"""OffsetFetch with require_stable (KIP-447, v7+) while a transactional offset is pending, pinned
where mutation testing found no fast test reaching it (issue 36, `make mutation`:
`handlers/offset_fetch._unstable`): the partition with a pending offset answers
UNSTABLE_OFFSET_COMMIT with -1 / -1 / "", as Kafka does; its other partitions, other groups,
and a fetch without require_stable answer the committed offsets. Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core import txn_offsets as t
from coordinator.core.messages import ErrorCode as E
from tests.support.fakeclock import Harness


def fetched(group: object) -> list[tuple[str, int, int, int, str | None, E]]:
    return [(tp.name, p.partition, p.offset, p.leader_epoch, p.metadata, p.error)
            for tp in group.topics for p in tp.partitions]  # type: ignore[attr-defined]  # fmt: skip


def test_require_stable_answers_unstable_only_for_a_partition_with_a_pending_offset() -> None:
    h = Harness()
    h.commit("g", {("orders", 0): 1, ("orders", 1): 2}, leader_epoch=3, metadata="m")
    h.commit("other", {("orders", 0): 7})
    pending = t.TxnCommitTopic("orders", (t.TxnCommitPartition(0, 5, -1, "tx"),))
    h.core.txn_stage(t.TxnOffsetCommit("tx", "g", 7, 0, -1, "", None, (pending,)), h.now)
    stable = h.fetch("g", {"orders": (0, 1)}, stable=True)
    assert (stable.group_id, stable.error) == ("g", E.none)
    assert fetched(stable) == [
        ("orders", 0, -1, -1, "", E.unstable_offset_commit),
        ("orders", 1, 2, 3, "m", E.none),
    ]
    # Without require_stable: the last committed offset, the pending one never.
    assert fetched(h.fetch("g", {"orders": (0,)})) == [("orders", 0, 1, 3, "m", E.none)]
    # A group with nothing pending answers as it is, even with require_stable.
    assert fetched(h.fetch("other", {"orders": (0,)}, stable=True)) == [
        ("orders", 0, 7, -1, "", E.none)]  # fmt: skip
    # A group that cannot answer (here: loading) keeps its error.
    h.core.loading = True
    assert h.fetch("g", {"orders": (0,)}, stable=True).error is E.coordinator_load_in_progress
