"""Exactly-once through the sidecar: TxnOffsetCommit (KIP-98, KIP-447), settled by the outcome of
the transaction on the upstream (issue 29).

A consume-transform-produce application puts its consumer's offsets into its producer's
transaction: AddOffsetsToTxn (to the transaction coordinator, upstream), TxnOffsetCommit (to the
group coordinator: groupcoord), EndTxn (upstream). The offsets must become the group's committed
offsets if and only if the transaction commits. The transaction coordinator stays the upstream's;
groupcoord builds none.

The mechanism: observed outcome, with the upstream's own group coordinator as the witness.
- TxnOffsetCommit, at the group's owner: checked as OffsetCommit is (generation, member, instance
  id; core.txn_offsets), then sent upstream as a *shadow* TxnOffsetCommit under the client's
  transactional id, producer id and epoch, for the group `__groupcoord_txn.<group>`; and the
  client's AddOffsetsToTxn is rewritten on its way upstream to name that shadow group. So the
  upstream's transaction coordinator puts the shadow offsets into the transaction, refuses a
  zombie (an older epoch) itself, and commits or drops them with the transaction, whatever ends
  it: EndTxn, its timeout, a fencing InitProducerId. Only once the upstream accepted is the
  offset staged here as pending (a TxnOffsetKey record, durable before the answer leaves).
- Settling, from what passes through and from the witness:
  * an EndTxn answered without error, seen by the owner: that (producer id, epoch)'s pending
    offsets are committed or dropped as it said, and the EndTxn answer is held until the records
    are durable, so a client that saw its commit succeed reads its offsets;
  * an InitProducerId answered for a transactional id with pending offsets of an older producer
    id or epoch: that transaction is over (Kafka completes or aborts it before it answers); the
    shadow group says how: an offset the upstream shows committed was committed, the rest dropped;
  * every CHECK_INTERVAL_S, pending offsets older than WITNESS_AFTER_MS are compared with the
    shadow group's committed offsets (OffsetFetch upstream): one it shows is committed (how a
    fleet member settles the transactions whose EndTxn passed through another member, and those
    whose client died while its EndTxn was in flight);
  * the bounded fallback: a pending offset older than ABORT_AFTER_MS (Kafka's
    transaction.max.timeout.ms, 15 minutes: no transaction lives longer upstream) that the
    shadow does not show is dropped.
Why not Kafka's own way (transactional records in the state topic under the client's producer
id, markers written by the upstream): `--state local` has no state topic; the fleet's claims,
lease checks and loading read the state partitions to their end, which an open transaction would
hold back (read_committed stops at the last stable offset) for as long as the transaction lasts;
and it would need the client's sequence numbers on a partition the client never writes. tansu
0.6.0 offers neither DescribeTransactions nor ListTransactions, and its OffsetFetch does not answer
UNSTABLE_OFFSET_COMMIT (a pending offset reads as absent): the shadow group's committed offsets are
what it says reliably, so only commits are witnessed and aborts come from EndTxn, fencing, or the
bound.

Invariants:
- No pending offset becomes committed without a commit seen (an EndTxn(commit) answer, or the
  upstream showing that offset committed in the shadow group). An aborted staging equal to the
  previously committed shadow offset reads as committed, which changes no offset.
- A pending offset exists here only if the upstream holds it in the transaction too.
- Standalone mode has no transactions (no data): TxnOffsetCommit is not offered there at all.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.core.effects import Effects
from coordinator.core.messages import OffsetCommitResult, PartitionError, TopicErrors
from coordinator.core.txn_offsets import (
    Entry,
    TxnCommitPartition,
    TxnCommitTopic,
    TxnOffsetCommit,
    ended_by_end_txn,
    ended_by_fencing,
    witnessed,
)
from coordinator.sidecar import rewrite
from coordinator.sidecar.placement import Placement
from coordinator.sidecar.rewrite import RewriteError
from coordinator.sidecar.slots import Slot, SlotOwner
from coordinator.sidecar.upstream import Broker, UpstreamUnavailable

if TYPE_CHECKING:
    from coordinator.serve.http import Observability
    from coordinator.serve.server import Server
    from coordinator.sidecar.forward import Router
    from coordinator.sidecar.placement import Locator
    from coordinator.sidecar.upstream import Upstreams


class Sidecar(Protocol):
    """What this module needs of coordinator.sidecar.proxy.Sidecar (which imports this one)."""

    server: Server
    locator: Locator | None
    upstreams: Upstreams

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...


log = logging.getLogger("groupcoord.sidecar.txn")

INIT_PRODUCER_ID: Final = 22
ADD_OFFSETS_TO_TXN: Final = 25
END_TXN: Final = 26
TXN_OFFSET_COMMIT: Final = 28
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
# Forwarded upstream, read on their way (AddOffsetsToTxn rewritten): handled as whole frames.
OBSERVED: Final = frozenset({INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN})
SHADOW_PREFIX: Final = "__groupcoord_txn."
CHECK_INTERVAL_S: Final = 0.5
WITNESS_AFTER_MS: Final = 1_000
ABORT_AFTER_MS: Final = 900_000  # Kafka's transaction.max.timeout.ms default
_RETRIABLE_UPSTREAM: Final = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
     ErrorCode.coordinator_load_in_progress}
)  # fmt: skip


def shadow_group(group_id: str) -> str:
    return SHADOW_PREFIX + group_id


# --------------------------------------------------------------------------------------------------
# Pure: requests in, answers out


def decode_request(frame: bytes) -> tuple[int, int, int, Any]:
    """(api_key, version, correlation_id, kio request) of a framed request this module reads.
    Raises RewriteError."""
    _, api_key, version, correlation_id = rewrite.REQUEST_START.unpack_from(frame)
    try:
        cls: Any = rewrite.request_class(api_key, version)
        offset = rewrite.body_offset(frame, cls.__flexible__)
        request, _ = entity_reader(cls)(frame, offset)
    except Exception as exc:
        raise RewriteError(f"api {api_key} v{version} request: {exc}") from exc
    return api_key, version, correlation_id, request


def reencode_request(frame: bytes, version: int, request: Any) -> bytes:
    """`frame` with its body replaced by `request` (its header kept as it came)."""
    start = rewrite.body_offset(frame, type(request).__flexible__)
    buffer = io.BytesIO()
    entity_writer(type(request))(buffer, request)
    body = frame[4:start] + buffer.getvalue()
    return len(body).to_bytes(4, "big") + body


def to_command(request: Any) -> TxnOffsetCommit:
    return TxnOffsetCommit(
        transactional_id=request.transactional_id,
        group_id=request.group_id,
        producer_id=int(request.producer_id),
        producer_epoch=int(request.producer_epoch),
        generation_id=int(getattr(request, "generation_id", -1)),
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        topics=tuple(
            TxnCommitTopic(t.name, tuple(
                TxnCommitPartition(int(p.partition_index), int(p.committed_offset),
                                   int(getattr(p, "committed_leader_epoch", -1)),
                                   p.committed_metadata)
                for p in t.partitions
            ))
            for t in request.topics
        ),
    )  # fmt: skip


def uniform(cmd: TxnOffsetCommit, error: ErrorCode) -> OffsetCommitResult:
    """Every partition of `cmd` answered `error` (TxnOffsetCommit has no top-level error)."""
    return OffsetCommitResult(
        tuple(
            TopicErrors(t.name, tuple(PartitionError(p.partition, error) for p in t.partitions))
            for t in cmd.topics
        )
    )


def response_frame(correlation_id: int, version: int, result: OffsetCommitResult) -> bytes:
    cls: Any = rewrite.response_class(TXN_OFFSET_COMMIT, version)
    topic_cls = rewrite._nested(cls, "TxnOffsetCommitResponseTopic")
    part_cls = rewrite._nested(cls, "TxnOffsetCommitResponsePartition")
    entity = cls(
        throttle_time=rewrite._ZERO_THROTTLE,
        topics=tuple(
            topic_cls(name=t.name, partitions=tuple(
                part_cls(partition_index=p.partition, error_code=p.error) for p in t.partitions
            ))
            for t in result.topics
        ),
    )  # fmt: skip
    return rewrite.encode_response(correlation_id, TXN_OFFSET_COMMIT, version, entity)


def shadow_request(request: Any) -> Any:
    """The client's TxnOffsetCommit as the upstream gets it: the shadow group, no member (the
    upstream's copy of the group has none; groupcoord checked the member already)."""
    fields: dict[str, Any] = {"group_id": shadow_group(request.group_id)}
    if hasattr(request, "generation_id"):
        fields.update(generation_id=-1, member_id="", group_instance_id=None)
    return _replace(request, fields)


def _replace(entity: Any, fields: dict[str, Any]) -> Any:
    import dataclasses

    return dataclasses.replace(entity, **fields)


def accepted_upstream(cmd: TxnOffsetCommit, response: Any) -> tuple[TxnOffsetCommit, dict[
        tuple[str, int], ErrorCode]]:  # fmt: skip
    """`cmd` narrowed to the partitions the upstream accepted, and the others' errors."""
    refused = {
        (t.name, int(p.partition_index)): ErrorCode(p.error_code)
        for t in response.topics for p in t.partitions if p.error_code != ErrorCode.none
    }  # fmt: skip
    topics = tuple(
        TxnCommitTopic(t.name, kept)
        for t in cmd.topics
        if (kept := tuple(p for p in t.partitions if (t.name, p.partition) not in refused))
    )
    return _replace(cmd, {"topics": topics}), refused


def merged(cmd: TxnOffsetCommit, staged: OffsetCommitResult,
           refused: dict[tuple[str, int], ErrorCode]) -> OffsetCommitResult:  # fmt: skip
    """One answer for `cmd`'s partitions, in its order: the upstream's refusals, else ours."""
    ours = {(t.name, p.partition): p.error for t in staged.topics for p in t.partitions}
    return OffsetCommitResult(
        tuple(
            TopicErrors(t.name, tuple(
                PartitionError(p.partition, refused.get((t.name, p.partition))
                               or ours.get((t.name, p.partition), ErrorCode.none))
                for p in t.partitions
            ))
            for t in cmd.topics
        )
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# The shell


class Held(Slot):
    """An upstream answer read before it goes to the client; `then(frame, release)` calls
    `release(data)` when the client may have it (after the records it caused are durable)."""

    __slots__ = ("then",)

    def __init__(self, conn: SlotOwner, then: Callable[[bytes, Callable[[bytes], None]], None]):
        super().__init__(conn)
        self.then = then

    def begin(self) -> Slot | None:
        return None

    def __call__(self, frame: bytes | None) -> None:
        if frame is None:
            self.conn.upstream_failed()
            return
        self.then(frame, lambda data: self.conn.complete(self, data))


class TxnOffsets:
    """One sidecar's transactional offsets: its TxnOffsetCommit answers, the transaction
    answers it observes, and the settling loop (module docstring)."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        self.server = sidecar.server
        self.resolved: Counter[tuple[str, str]] = Counter()  # (outcome, source) -> entries
        self._coordinators: dict[str, Broker] = {}  # shadow group -> its upstream coordinator
        self._checking = False

    def start(self, obs: Observability | None) -> None:
        self.sidecar.spawn(self._loop())
        if obs is None:
            return
        obs.status.add_fields(self.status)
        if obs.metrics is not None:
            obs.metrics.registry.register(TxnCollector(self))

    # -- TxnOffsetCommit -------------------------------------------------------------------------

    def request(
        self,
        conn: Any,
        frame: bytes,
        answer: Callable[[bytes], None],
        router: Callable[[], Router],
    ) -> None:
        """A client's (or, in a fleet, a member's) TxnOffsetCommit: answered here, forwarded to
        the group's owner (through the connection's `router`), or refused with a retriable
        error."""
        try:
            _, version, correlation_id, request = decode_request(frame)
        except RewriteError as exc:
            conn.abort(f"malformed TxnOffsetCommit: {exc}")
            return
        cmd = to_command(request)
        locator = self.sidecar.locator
        if locator is not None:
            where = locator.locate(cmd.group_id)
            placement = where.placement
            if placement is Placement.REMOTE and where.address is not None and not conn.from_peer:

                def relay(data: bytes | None) -> None:
                    error = ErrorCode.not_coordinator
                    if data is None:
                        data = response_frame(correlation_id, version, uniform(cmd, error))
                    answer(data)

                router().forward(where.address, frame, correlation_id, relay)
                return
            if placement is not Placement.LOCAL:
                error = ErrorCode.not_coordinator
                if placement is Placement.LOADING:
                    error = ErrorCode.coordinator_load_in_progress
                answer(response_frame(correlation_id, version, uniform(cmd, error)))
                return
        self.sidecar.spawn(self._commit(request, cmd, version, correlation_id, answer))

    async def _commit(
        self,
        request: Any,
        cmd: TxnOffsetCommit,
        version: int,
        correlation_id: int,
        answer: Callable[[bytes], None],
    ) -> None:
        core = self.server.core
        error = core.txn_check(cmd)
        if error is not None:
            answer(response_frame(correlation_id, version, uniform(cmd, error)))
            return
        try:
            response = await self._shadow_commit(request, version)
        except (UpstreamUnavailable, RewriteError) as exc:
            log.debug("TxnOffsetCommit for %s: upstream unavailable: %s", cmd.group_id, exc)
            error = ErrorCode.coordinator_not_available  # the client finds us again and retries
            answer(response_frame(correlation_id, version, uniform(cmd, error)))
            return
        accepted, refused = accepted_upstream(cmd, response)
        runtime = self.server.runtime
        assert runtime is not None
        fx, staged = core.txn_stage(accepted, runtime.now_ms())
        result = merged(cmd, staged, refused)

        def done() -> None:
            answer(response_frame(correlation_id, version, result))

        def failed(exc: BaseException) -> None:
            error = ErrorCode.not_coordinator  # a failed coordinator write (as OffsetCommit)
            answer(response_frame(correlation_id, version, uniform(cmd, error)))

        runtime.apply_then(fx, done, failed)

    async def _shadow_commit(self, request: Any, version: int) -> Any:
        shadow = shadow_request(request)
        for attempt in range(2):
            broker = await self._coordinator(shadow.group_id)
            frame = await broker.request(shadow)
            response = rewrite.decode_response(TXN_OFFSET_COMMIT, version, frame)
            errors = {p.error_code for t in response.topics for p in t.partitions}
            if attempt == 0 and errors & _RETRIABLE_UPSTREAM:
                self._coordinators.pop(shadow.group_id, None)
                continue
            return response
        return response

    async def _coordinator(self, group: str) -> Broker:
        """The upstream broker coordinating `group` (FindCoordinator, cached)."""
        broker = self._coordinators.get(group)
        if broker is not None:
            return broker
        upstreams = self.sidecar.upstreams
        cls: Any = rewrite.request_class(FIND_COORDINATOR, 1)
        any_broker, frame = await upstreams.request_any(cls(key=group, key_type=0))
        response = rewrite.decode_response(FIND_COORDINATOR, 1, frame)
        broker = upstreams.brokers.get(int(response.node_id), any_broker)
        if response.error_code == ErrorCode.none:
            self._coordinators[group] = broker
        return broker

    # -- answers passing through -----------------------------------------------------------------

    def observed(self, conn: SlotOwner, frame: bytes, api_key: int) -> tuple[bytes, Slot]:
        """An InitProducerId, AddOffsetsToTxn or EndTxn on its way upstream: the frame to
        forward (AddOffsetsToTxn names the shadow group) and the slot its answer goes through."""
        try:
            _, version, _, request = decode_request(frame)
        except RewriteError as exc:  # forwarded as it is: the upstream answers it
            log.debug("cannot read a transaction request: %s", exc)
            return frame, Slot(conn)
        if api_key == ADD_OFFSETS_TO_TXN:
            shadow = _replace(request, {"group_id": shadow_group(request.group_id)})
            return reencode_request(frame, version, shadow), Slot(conn)

        def then(answer: bytes, release: Callable[[bytes], None]) -> None:
            try:
                response = rewrite.decode_response(api_key, version, answer)
            except RewriteError as exc:
                log.warning("cannot read a transaction answer: %s", exc)
                release(answer)
                return
            if response.error_code != ErrorCode.none:
                release(answer)
            elif api_key == END_TXN:
                self._end_txn(request, answer, release)
            else:
                release(answer)
                self._fenced(request, response)

        return frame, Held(conn, then)

    def _end_txn(self, request: Any, answer: bytes, release: Callable[[bytes], None]) -> None:
        """EndTxn answered: settle that epoch's pending offsets here, then release the answer."""
        core = self.server.core
        pid, epoch = int(request.producer_id), int(request.producer_epoch)
        commit = bool(request.committed)
        fx = Effects()
        for group_id in core.txn_pending_groups():
            ended = ended_by_end_txn(core.txn_pending(group_id), pid, epoch)
            if ended:
                more, count = core.txn_settle(group_id, ended if commit else [],
                                              [] if commit else ended)  # fmt: skip
                self._count(fx, more, "committed" if commit else "aborted", "end_txn", count)
        runtime = self.server.runtime
        if not fx.records or runtime is None:
            release(answer)
            return
        # Released either way: the upstream's transaction is over whatever our log says; a
        # failed write leaves the offsets pending, and the witness settles them later.
        runtime.apply_then(fx, lambda: release(answer), lambda exc: release(answer))

    def _fenced(self, request: Any, response: Any) -> None:
        """InitProducerId answered for a transactional id: its older transactions are over."""
        txn_id = getattr(request, "transactional_id", None)
        if not txn_id:
            return
        core = self.server.core
        pid, epoch = int(response.producer_id), int(response.producer_epoch)
        ended = {
            g: e for g in core.txn_pending_groups()
            if (e := ended_by_fencing(core.txn_pending(g), txn_id, pid, epoch))
        }  # fmt: skip
        if ended:
            self.sidecar.spawn(self._witness(ended, "fencing", abort_rest=True))

    # -- the witness -----------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)  # a period, not a wait for a condition
            try:
                await self.check()
            except (UpstreamUnavailable, RewriteError) as exc:
                log.debug("pending transactional offsets not checked: %s", exc)
            except Exception:
                log.exception("checking pending transactional offsets failed")

    async def check(self) -> None:
        """Settle the pending offsets old enough to ask the upstream about (module docstring)."""
        if self._checking:
            return
        core = self.server.core
        now = time.time() * 1000
        old: dict[str, list[Entry]] = {}
        expired: dict[str, list[Entry]] = {}
        for group_id in core.txn_pending_groups():
            for key, value in core.txn_pending(group_id):
                age = now - value.commit_timestamp_ms
                if age >= WITNESS_AFTER_MS:
                    old.setdefault(group_id, []).append((key, value))
                if age >= ABORT_AFTER_MS:
                    expired.setdefault(group_id, []).append((key, value))
        if not old:
            return
        self._checking = True
        try:
            await self._witness(old, "witness", abort_rest=False)
            if expired:
                await self._witness(expired, "timeout", abort_rest=True)
        finally:
            self._checking = False

    async def _witness(self, ended: dict[str, list[Entry]], source: str, abort_rest: bool) -> None:
        """Commit the entries the shadow groups show committed; with `abort_rest`, drop the
        others (their transactions are known to be over)."""
        shadows = {g: await self._shadow_offsets(g, entries) for g, entries in ended.items()}
        core = self.server.core
        runtime = self.server.runtime
        if runtime is None:
            return
        fx = Effects()
        for group_id, entries in ended.items():
            shadow = shadows[group_id]
            if shadow is None:
                continue
            committed = witnessed(entries, shadow)
            aborted = [e for e in entries if e not in committed] if abort_rest else []
            if not committed and not aborted:
                continue
            more, _ = core.txn_settle(group_id, committed, aborted)
            # Counted by outcome: an entry settled by an earlier call is not pending any more.
            pending = {k for k, _ in core.txn_pending(group_id)}
            self.resolved["committed", source] += sum(1 for k, _ in committed if k not in pending)
            self.resolved["aborted", source] += sum(1 for k, _ in aborted if k not in pending)
            fx.records += more.records
            fx.events += more.events
        if fx.records:
            runtime.apply(fx)

    async def _shadow_offsets(
        self, group_id: str, entries: list[Entry]
    ) -> dict[tuple[str, int], int] | None:
        """The shadow group's committed offsets upstream for the partitions of `entries`; None
        when they cannot be read. The partitions are named: tansu 0.6.0 answers an OffsetFetch
        for all topics (null) with a truncated frame."""
        shadow = shadow_group(group_id)
        cls: Any = rewrite.request_class(OFFSET_FETCH, 7)
        topic_cls = rewrite._nested(cls, "OffsetFetchRequestTopic")
        wanted: dict[str, set[int]] = {}
        for key, _ in entries:
            wanted.setdefault(key.topic, set()).add(key.partition)
        topics = tuple(topic_cls(name=t, partition_indexes=tuple(sorted(p)))
                       for t, p in sorted(wanted.items()))  # fmt: skip
        request = cls(group_id=shadow, topics=topics, require_stable=False)
        try:
            broker = await self._coordinator(shadow)
            frame = await broker.request(request)
            response = rewrite.decode_response(OFFSET_FETCH, 7, frame)
        except (UpstreamUnavailable, RewriteError) as exc:
            log.debug("cannot read the shadow offsets of %s: %s", group_id, exc)
            return None
        if response.error_code != ErrorCode.none:
            self._coordinators.pop(shadow, None)
            return None
        return {
            (t.name, int(p.partition_index)): int(p.committed_offset)
            for t in response.topics for p in t.partitions if p.error_code == ErrorCode.none
        }  # fmt: skip

    def _count(self, fx: Effects, more: Effects, outcome: str, source: str, count: int) -> None:
        fx.records += more.records
        fx.events += more.events
        self.resolved[outcome, source] += count
        log.debug("%d pending transactional offsets %s (%s)", count, outcome, source)

    # -- observation -----------------------------------------------------------------------------

    def pending(self) -> Iterator[tuple[str, Entry]]:
        core = self.server.core
        for group_id in core.txn_pending_groups():
            for entry in core.txn_pending(group_id):
                yield group_id, entry

    def status(self, group_id: str) -> dict[str, str]:
        """The status page's line for a group's pending transactional offsets."""
        entries = self.server.core.txn_pending(group_id)
        if not entries:
            return {}
        now = time.time() * 1000
        shown = ", ".join(
            f"{k.topic}-{k.partition}: {v.offset} (producer {k.producer_id}/{v.producer_epoch}"
            f" {v.transactional_id!r}, {max(0.0, now - v.commit_timestamp_ms) / 1000:.1f} s)"
            for k, v in sorted(entries, key=lambda e: e[0].seq)
        )
        return {"pending transactional offsets": shown}


class TxnCollector:
    """groupcoord_txn_* (prometheus_client custom collector): pending transactional offsets and
    how transactions were settled."""

    def __init__(self, txn: TxnOffsets) -> None:
        self._txn = txn

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        now = time.time() * 1000
        stamps = [v.commit_timestamp_ms for _, (_, v) in self._txn.pending()]
        yield GaugeMetricFamily(
            "groupcoord_txn_pending_offsets",
            "Transactional offsets staged and not yet settled by their transaction's outcome",
            value=len(stamps),
        )
        yield GaugeMetricFamily(
            "groupcoord_txn_pending_oldest_seconds",
            "Age of the oldest pending transactional offset (0 when none)",
            value=max(0.0, (now - min(stamps)) / 1000) if stamps else 0.0,
        )
        resolved = CounterMetricFamily(
            "groupcoord_txn_resolved_offsets",
            "Pending transactional offsets settled, by outcome and by what told the outcome",
            labels=["outcome", "source"],
        )
        for (outcome, source), count in sorted(self._txn.resolved.items()):
            resolved.add_metric([outcome, source], count)
        yield resolved
