"""A fleet's transaction outcome notices (issue 29): the member an EndTxn (or a fencing
InitProducerId) passed through tells the owners of the groups whose offsets that transaction
carried. Pure: what a member remembers, and the notice as a Kafka request; the shell that sends
and answers it is coordinator.sidecar.txn.

Kafka's transaction coordinator tells the group coordinator the same thing with WriteTxnMarkers
(the markers it writes into `__consumer_offsets`, which the group coordinator reads back). A
notice is that request, member to member over the fleet listener, with the group ids where
Kafka names `__consumer_offsets` partitions: each marker is one (producer id, epoch, outcome)
and each of its "topics" one group (partition 0). The answer says, per group, whether the owner
took it (NONE) or must be asked again (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
`coordinator_epoch` carries where the outcome comes from: OUTCOME_TOLD, the marker's
`transaction_result` (an EndTxn answer); OUTCOME_FROM_SHADOW, the transaction is over but how is
unknown (a fencing InitProducerId): the owner reads the shadow group, as for a fencing it sees.

Which groups: a member remembers, per (producer id, epoch), the groups named by the
AddOffsetsToTxn requests it forwarded (`AddedOffsets`): a client sends AddOffsetsToTxn and
EndTxn to its transaction coordinator, so through the same member. Forgotten when the
transaction ends (EndTxn answered, a newer epoch handed out) or after ABORT_AFTER_MS.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from coordinator.sidecar import rewrite

WRITE_TXN_MARKERS: Final = 27
NOTICE_VERSION: Final = 1
OUTCOME_TOLD: Final = 0
OUTCOME_FROM_SHADOW: Final = -1


@dataclass(frozen=True, slots=True)
class Notice:
    producer_id: int
    producer_epoch: int
    committed: bool | None  # None: over, the outcome to be read from the shadow group


@dataclass(slots=True)
class _Added:
    transactional_id: str
    since_ms: float
    groups: set[str] = field(default_factory=set)


class AddedOffsets:
    """(producer id, epoch) -> the groups whose offsets its current transaction carries, as seen
    in the AddOffsetsToTxn requests this member forwarded."""

    __slots__ = ("_txns",)

    def __init__(self) -> None:
        self._txns: dict[tuple[int, int], _Added] = {}

    def add(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
            now_ms: float) -> None:  # fmt: skip
        added = self._txns.get((producer_id, epoch))
        if added is None:
            added = self._txns[producer_id, epoch] = _Added(transactional_id, now_ms)
        added.groups.add(group_id)

    def ended(self, producer_id: int, epoch: int) -> set[str]:
        """The groups of the transaction an EndTxn of (producer id, epoch) ended; forgotten."""
        added = self._txns.pop((producer_id, epoch), None)
        return set() if added is None else added.groups

    def fenced(self, transactional_id: str, producer_id: int, epoch: int
               ) -> list[tuple[Notice, set[str]]]:  # fmt: skip
        """The transactions of `transactional_id` that an InitProducerId answered with
        (producer id, epoch) proves over (older ids or epochs); forgotten."""
        over = [
            key for key, added in self._txns.items()
            if added.transactional_id == transactional_id
            and (key[0] != producer_id or key[1] < epoch)
        ]  # fmt: skip
        return [(Notice(pid, ep, None), self._txns.pop((pid, ep)).groups) for pid, ep in over]

    def prune(self, older_than_ms: float) -> None:
        for key in [k for k, a in self._txns.items() if a.since_ms < older_than_ms]:
            del self._txns[key]

    def __len__(self) -> int:
        return len(self._txns)


def _module(kind: str) -> Any:
    return importlib.import_module(f"kio.schema.write_txn_markers.v{NOTICE_VERSION}.{kind}")


def notice_request(notice: Notice, groups: list[str]) -> Any:
    """The WriteTxnMarkers request telling the owner of `groups` about `notice`."""
    m = _module("request")
    epoch = OUTCOME_TOLD if notice.committed is not None else OUTCOME_FROM_SHADOW
    marker = m.WritableTxnMarker(
        producer_id=notice.producer_id,
        producer_epoch=notice.producer_epoch,
        transaction_result=bool(notice.committed),
        topics=tuple(m.WritableTxnMarkerTopic(name=g, partition_indexes=(0,)) for g in groups),
        coordinator_epoch=epoch,
    )
    return m.WriteTxnMarkersRequest(markers=(marker,))


def read_notices(request: Any) -> list[tuple[Notice, list[str]]]:
    return [
        (
            Notice(int(m.producer_id), int(m.producer_epoch),
                   bool(m.transaction_result) if m.coordinator_epoch != OUTCOME_FROM_SHADOW
                   else None),
            [t.name for t in m.topics],
        )
        for m in request.markers
    ]  # fmt: skip


def notice_response(correlation_id: int, version: int,
                    answers: list[tuple[Notice, dict[str, ErrorCode]]]) -> bytes:  # fmt: skip
    """The owner's answer: per notice, per group, whether it took it."""
    m = importlib.import_module(f"kio.schema.write_txn_markers.v{version}.response")
    entity = m.WriteTxnMarkersResponse(markers=tuple(
        m.WritableTxnMarkerResult(producer_id=n.producer_id, topics=tuple(
            m.WritableTxnMarkerTopicResult(name=g, partitions=(
                m.WritableTxnMarkerPartitionResult(partition_index=0, error_code=e),))
            for g, e in errors.items()
        ))
        for n, errors in answers
    ))  # fmt: skip
    return rewrite.encode_response(correlation_id, WRITE_TXN_MARKERS, version, entity)


def unacknowledged(frame: bytes, groups: list[str]) -> set[str]:
    """The groups of a notice's answer `frame` whose owner did not take it (all of them when the
    answer cannot be read)."""
    try:
        response = rewrite.decode_response(WRITE_TXN_MARKERS, NOTICE_VERSION, frame)
    except rewrite.RewriteError:
        return set(groups)
    taken = {
        t.name for m in response.markers for t in m.topics
        if t.partitions and all(p.error_code == ErrorCode.none for p in t.partitions)
    }  # fmt: skip
    return set(groups) - taken
