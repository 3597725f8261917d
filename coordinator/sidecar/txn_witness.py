"""What the upstream says about pending transactional offsets (coordinator.sidecar.txn, whose
docstring has the settlement design): the shadow group's committed offsets, and where the
upstream offers it, the transaction's own state.

- The shadow group `__groupcoord_txn.<group>` (OffsetFetch, require_stable off, the partitions
  named): what every upstream says reliably. An offset it shows was committed; one it does not
  show may be aborted, or committed with its markers not yet written, or still open: on its own
  it never justifies an abort.
- DescribeTransactions (API 65, KIP-664; Apache Kafka 3.0+): the state of a transactional id at
  its transaction coordinator. Once it shows the transaction that staged an offset over with its
  markers written (core.txn_offsets.ended_by_state), the shadow group read *after* it tells the
  outcome exactly, so an abort no EndTxn told (a client that died mid-transaction, aborted by
  the upstream's transaction timeout) is settled within seconds instead of the 15-minute bound,
  and an offset whose transaction is still open past that bound (an upstream whose
  transaction.max.timeout.ms is longer) is kept. tansu 0.6.0 does not offer the API: there
  (`supported` False) the witness settles only commits, and aborts come from EndTxn, fencing
  and the bound, as before.

Invariants:
- Nothing here writes: it reads the upstream and returns what it read; None or "unknown" when
  it could not (an unreachable coordinator, a retriable error), never a guess.
- The coordinators are found with FindCoordinator (key type 0 for groups, 1 for transactional
  ids) and cached until an answer says they moved.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from coordinator.core.txn_offsets import Entry, ended_by_state
from coordinator.sidecar import rewrite
from coordinator.sidecar.rewrite import RewriteError
from coordinator.sidecar.upstream import Broker, UpstreamUnavailable

if TYPE_CHECKING:
    from coordinator.sidecar.upstream import Upstreams

log = logging.getLogger("groupcoord.sidecar.txn")

OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
DESCRIBE_TRANSACTIONS: Final = 65
GROUP: Final = 0  # FindCoordinator key types
TRANSACTION: Final = 1


class HasUpstreams(Protocol):
    upstreams: Upstreams


class Coordinators:
    """The upstream's coordinator for a group or a transactional id (FindCoordinator v1,
    cached)."""

    def __init__(self, sidecar: HasUpstreams) -> None:
        self._sidecar = sidecar
        self._found: dict[tuple[int, str], Broker] = {}

    async def find(self, key: str, key_type: int = GROUP) -> Broker:
        broker = self._found.get((key_type, key))
        if broker is not None:
            return broker
        upstreams = self._sidecar.upstreams
        cls: Any = rewrite.request_class(FIND_COORDINATOR, 1)
        any_broker, frame = await upstreams.request_any(cls(key=key, key_type=key_type))
        response = rewrite.decode_response(FIND_COORDINATOR, 1, frame)
        broker = upstreams.brokers.get(int(response.node_id), any_broker)
        if response.error_code == ErrorCode.none:
            self._found[key_type, key] = broker
        return broker

    def forget(self, key: str, key_type: int = GROUP) -> None:
        self._found.pop((key_type, key), None)


async def shadow_offsets(
    coordinators: Coordinators, shadow: str, entries: Iterable[Entry]
) -> dict[tuple[str, int], int] | None:
    """The shadow group's committed offsets upstream for the partitions of `entries`; None when
    they cannot be read. The partitions are named: tansu 0.6.0 answers an OffsetFetch for all
    topics (null) with a truncated frame."""
    cls: Any = rewrite.request_class(OFFSET_FETCH, 7)
    topic_cls = rewrite._nested(cls, "OffsetFetchRequestTopic")
    wanted: dict[str, set[int]] = {}
    for key, _ in entries:
        wanted.setdefault(key.topic, set()).add(key.partition)
    topics = tuple(topic_cls(name=t, partition_indexes=tuple(sorted(p)))
                   for t, p in sorted(wanted.items()))  # fmt: skip
    request = cls(group_id=shadow, topics=topics, require_stable=False)
    try:
        broker = await coordinators.find(shadow)
        frame = await broker.request(request)
        response = rewrite.decode_response(OFFSET_FETCH, 7, frame)
    except (UpstreamUnavailable, RewriteError) as exc:
        log.debug("cannot read the shadow offsets of %s: %s", shadow, exc)
        return None
    if response.error_code != ErrorCode.none:
        coordinators.forget(shadow)
        return None
    return {
        (t.name, int(p.partition_index)): int(p.committed_offset)
        for t in response.topics for p in t.partitions if p.error_code == ErrorCode.none
    }  # fmt: skip


class Transactions:
    """DescribeTransactions where the upstream offers it (module docstring)."""

    def __init__(self, coordinators: Coordinators) -> None:
        self._coordinators = coordinators
        self._supported: dict[int, bool] = {}  # id(broker) -> offers API 65

    async def supported(self, broker: Broker) -> bool:
        known = self._supported.get(id(broker))
        if known is None:
            versions = broker.api_versions
            if versions is None:  # no client asked it yet: ask it ourselves
                frame = await broker.request(ApiVersionsRequest())
                versions = broker.api_versions = rewrite.parse_api_versions(frame, 0)
            known = self._supported[id(broker)] = DESCRIBE_TRANSACTIONS in versions
        return known

    async def ended(
        self, pending: dict[str, list[Entry]]
    ) -> tuple[dict[str, list[Entry]], dict[str, list[Entry]]]:
        """(over, unknown): `pending`'s entries whose transaction DescribeTransactions shows over
        with its markers written, and those whose state could not be learned (the upstream
        does not offer it, or did not answer). The rest are still open."""
        over: dict[str, list[Entry]] = {}
        unknown: dict[str, list[Entry]] = {}
        by_txn: dict[str, list[tuple[str, Entry]]] = {}
        for group_id, entries in pending.items():
            for entry in entries:
                by_txn.setdefault(entry[1].transactional_id, []).append((group_id, entry))
        for txn_id, tagged in sorted(by_txn.items()):
            state = await self._describe(txn_id)
            done = ended_by_state([e for _, e in tagged], *state) if state is not None else []
            for group_id, entry in tagged:
                if state is None:
                    unknown.setdefault(group_id, []).append(entry)
                elif entry in done:
                    over.setdefault(group_id, []).append(entry)
        return over, unknown

    async def _describe(self, txn_id: str) -> tuple[str | None, int, int] | None:
        """(state, producer id, epoch) of `txn_id` (state None: the id is unknown upstream);
        None when it could not be learned."""
        try:
            broker = await self._coordinators.find(txn_id, TRANSACTION)
            if not await self.supported(broker):
                return None
            cls: Any = rewrite.request_class(DESCRIBE_TRANSACTIONS, 0)
            frame = await broker.request(cls(transactional_ids=(txn_id,)))
            response = rewrite.decode_response(DESCRIBE_TRANSACTIONS, 0, frame)
        except (UpstreamUnavailable, RewriteError) as exc:
            log.debug("cannot describe transaction %r: %s", txn_id, exc)
            return None
        state = response.transaction_states[0]
        if state.error_code == ErrorCode.transactional_id_not_found:
            return None, -1, -1
        if state.error_code != ErrorCode.none:  # loading, moved, not authorized: ask again later
            self._coordinators.forget(txn_id, TRANSACTION)
            return None
        return str(state.transaction_state), int(state.producer_id), int(state.producer_epoch)
