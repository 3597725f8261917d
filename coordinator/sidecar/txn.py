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
  * in a fleet, the EndTxn or InitProducerId passes through the client's own member, which
    need not own the group: that member tells the owner (coordinator.sidecar.txn_notice: a
    WriteTxnMarkers request over the fleet links, as Kafka's transaction coordinator tells the
    group coordinator; the groups are the ones it saw named by the transaction's
    AddOffsetsToTxn). An EndTxn's notice carries the outcome, and the EndTxn answer is held
    until every owner took it (durable there): a client reuses its producer id and epoch for
    its next transaction, so a notice arriving after that transaction began could settle the
    wrong offsets. An owner that cannot take it (unreachable, loading after a failover) is
    asked again every CHECK_INTERVAL_S, relocated each time; after NOTICE_DEADLINE_S the client
    connection is closed instead of answered, and the client retries its EndTxn (Kafka answers
    a repeated EndTxn of a completed transaction with its outcome again), which tells the
    owners again. A fencing InitProducerId's notice says "over, ask the shadow group" for the
    older epochs (not held: no later transaction uses them);
  * every CHECK_INTERVAL_S, pending offsets older than WITNESS_AFTER_MS are compared with the
    shadow group's committed offsets (OffsetFetch upstream): one it shows is committed (those
    whose client died while its EndTxn was in flight, and a notice that never arrived);
  * where the upstream offers DescribeTransactions (Apache Kafka; coordinator.sidecar
    .txn_witness), the same pending offsets' transactional ids are described: a transaction
    shown over with its markers written is settled by the shadow group read after it, an
    abort included (a client that died mid-transaction: within seconds of the upstream's
    timeout aborting it); one shown open is kept whatever its age;
  * the bounded fallback, needed for tansu (or a describe that got no answer): a pending offset
    older than ABORT_AFTER_MS (Kafka's transaction.max.timeout.ms, 15 minutes: no transaction
    lives longer upstream) that the shadow does not show is dropped.
Why not Kafka's own way (transactional records in the state topic under the client's producer
id, markers written by the upstream): `--state local` has no state topic; the fleet's claims,
lease checks and loading read the state partitions to their end, which an open transaction would
hold back (read_committed stops at the last stable offset) for as long as the transaction lasts;
and it would need the client's sequence numbers on a partition the client never writes. tansu
0.6.0 offers neither DescribeTransactions nor ListTransactions, and its OffsetFetch does not answer
UNSTABLE_OFFSET_COMMIT (a pending offset reads as absent): the shadow group's committed offsets are
what it says reliably, so there only commits are witnessed and aborts come from EndTxn, fencing,
or the bound; Kafka's DescribeTransactions adds the aborts (above). What tansu needs of this
module, and Kafka no longer does: the 15-minute bound.

Invariants:
- No pending offset becomes committed without a commit seen (an EndTxn(commit) answer, or the
  upstream showing that offset committed in the shadow group). No pending offset is dropped
  for not being shown committed unless its transaction is known over (EndTxn, fencing, a
  described state) or past the bound. An aborted staging equal to the
  previously committed shadow offset reads as committed, which changes no offset.
- A pending offset exists here only if the upstream holds it in the transaction too.
- In a fleet, a TxnOffsetCommit is answered by the group's owner (forwarded there); pending
  offsets are records of the state topic, so a new owner replays them and settles them as the
  old one would have (the notices are relocated to it).
- On a secured listener a TxnOffsetCommit is judged as KafkaApis judges it (coordinator.serve
  .authz: TRANSACTIONAL_ID WRITE, GROUP READ, TOPIC READ) before anything else.
- Standalone mode has no transactions (no data): TxnOffsetCommit is not offered there at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
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
from coordinator.sidecar.txn_notice import (
    AddedOffsets,
    Notice,
    notice_request,
    notice_response,
    read_notices,
    unacknowledged,
)
from coordinator.sidecar.txn_witness import Coordinators, Transactions, shadow_offsets
from coordinator.sidecar.upstream import UpstreamUnavailable
from protocol.codec import RequestHeader

if TYPE_CHECKING:
    from coordinator.serve.http import Observability
    from coordinator.serve.server import Server
    from coordinator.sidecar.forward import PeerLinks, Router
    from coordinator.sidecar.placement import Locator
    from coordinator.sidecar.upstream import Upstreams


class Sidecar(Protocol):
    """What this module needs of coordinator.sidecar.proxy.Sidecar (which imports this one)."""

    server: Server
    locator: Locator | None
    upstreams: Upstreams
    peer_links: PeerLinks

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...


log = logging.getLogger("groupcoord.sidecar.txn")

INIT_PRODUCER_ID: Final = 22
ADD_OFFSETS_TO_TXN: Final = 25
END_TXN: Final = 26
TXN_OFFSET_COMMIT: Final = 28
# Forwarded upstream, read on their way (AddOffsetsToTxn rewritten): handled as whole frames.
OBSERVED: Final = frozenset({INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN})
SHADOW_PREFIX: Final = "__groupcoord_txn."
CHECK_INTERVAL_S: Final = 0.5
WITNESS_AFTER_MS: Final = 1_000
ABORT_AFTER_MS: Final = 900_000  # Kafka's transaction.max.timeout.ms default
# How long an EndTxn answer waits for the owners to take its notice (a failover's loading
# included) before the client connection is closed instead (module docstring).
NOTICE_DEADLINE_S: Final = 15.0
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


def amended(
    answer: Callable[[bytes], None], version: int, amend: Callable[[Any], Any]
) -> Callable[[bytes], None]:
    """`answer` with the gate's `amend` applied (the denied topics put back with their error)."""

    def send(data: bytes) -> None:
        response = rewrite.decode_response(TXN_OFFSET_COMMIT, version, data)
        correlation_id = rewrite.response_correlation_id(data)
        answer(rewrite.encode_response(correlation_id, TXN_OFFSET_COMMIT, version, amend(response)))

    return send


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
        self.coordinators = Coordinators(sidecar)  # the upstream's, of shadow groups and txn ids
        self.transactions = Transactions(self.coordinators)
        self._checking = False
        self.added = AddedOffsets()  # in a fleet: what to tell the owners (txn_notice)

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
        gate = self.server.gate
        if gate is not None and gate.options.authorizer and not conn.from_peer:
            # Judged by the member the client is connected to, as the group APIs are.
            header = RequestHeader(TXN_OFFSET_COMMIT, version, correlation_id, "")
            plan = gate.judge(conn, header, request)
            if plan.error is not None:
                error = plan.error
                answer(response_frame(correlation_id, version, uniform(to_command(request), error)))
                return
            if plan.request is not request:  # without the topics it may not read
                request = plan.request
                frame = reencode_request(frame, version, request)
            if plan.amend is not None:
                answer = amended(answer, version, plan.amend)
        cmd = to_command(request)
        if not cmd.topics:
            answer(response_frame(correlation_id, version, OffsetCommitResult(())))
            return
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
            broker = await self.coordinators.find(shadow.group_id)
            frame = await broker.request(shadow)
            response = rewrite.decode_response(TXN_OFFSET_COMMIT, version, frame)
            errors = {p.error_code for t in response.topics for p in t.partitions}
            if attempt == 0 and errors & _RETRIABLE_UPSTREAM:
                self.coordinators.forget(shadow.group_id)
                continue
            return response
        return response

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
            if self.sidecar.locator is not None:
                self.added.add(request.transactional_id, int(request.producer_id),
                               int(request.producer_epoch), request.group_id,
                               time.time() * 1000)  # fmt: skip
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
                self._end_txn(conn, request, answer, release)
            else:
                release(answer)
                self._fenced(request, response)

        return frame, Held(conn, then)

    def _end_txn(
        self, conn: SlotOwner, request: Any, answer: bytes, release: Callable[[bytes], None]
    ) -> None:
        """EndTxn answered: settle that epoch's pending offsets here and, in a fleet, tell the
        owners of its other groups; then release the answer."""
        notice = Notice(int(request.producer_id), int(request.producer_epoch),
                        bool(request.committed))  # fmt: skip
        groups = self.added.ended(notice.producer_id, notice.producer_epoch)
        fx = self._settle_told(notice, None, "end_txn")

        def settled() -> None:
            if not groups:
                release(answer)
                return
            # Held until every owner took the notice: the client cannot start its next
            # transaction (same producer id and epoch) before this one is settled everywhere.
            self.sidecar.spawn(self._tell_then(notice, groups, conn, answer, release))

        runtime = self.server.runtime
        if not fx.records or runtime is None:
            settled()
            return
        # Released either way: the upstream's transaction is over whatever our log says; a
        # failed write leaves the offsets pending, and the witness settles them later.
        runtime.apply_then(fx, settled, lambda exc: settled())

    def _settle_told(self, notice: Notice, group_ids: list[str] | None, source: str) -> Effects:
        """The pending offsets of `notice`'s producer id and epoch settled as it tells, in
        `group_ids` (None: every group here); the records to write."""
        core = self.server.core
        commit = bool(notice.committed)
        fx = Effects()
        for group_id in core.txn_pending_groups() if group_ids is None else group_ids:
            pending = core.txn_pending(group_id)
            ended = ended_by_end_txn(pending, notice.producer_id, notice.producer_epoch)
            if ended:
                more, count = core.txn_settle(group_id, ended if commit else [],
                                              [] if commit else ended)  # fmt: skip
                self._count(fx, more, "committed" if commit else "aborted", source, count)
        return fx

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
        for notice, groups in self.added.fenced(txn_id, pid, epoch):
            self.sidecar.spawn(self._tell(notice, groups))  # not held: only older epochs

    # -- the fleet's outcome notices (coordinator.sidecar.txn_notice) ----------------------------

    async def _tell_then(self, notice: Notice, groups: set[str], conn: SlotOwner, answer: bytes,
                         release: Callable[[bytes], None]) -> None:  # fmt: skip
        """The EndTxn `answer` released once every owner took `notice`; if they did not within
        NOTICE_DEADLINE_S, the client connection is closed instead (module docstring)."""
        if await self._tell(notice, groups):
            release(answer)
        else:
            conn.abort("the transaction's outcome could not be told to its groups' owners")

    async def _tell(self, notice: Notice, groups: set[str]) -> bool:
        """Tell the owner of each of `groups` (this member, for the ones it owns now) about
        `notice`, again every CHECK_INTERVAL_S while one has not taken it (loading after a
        failover, unreachable); True once all did, False at NOTICE_DEADLINE_S."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + NOTICE_DEADLINE_S
        left = set(groups)
        while True:
            left = await self._tell_once(notice, left)
            if not left:
                return True
            if loop.time() + CHECK_INTERVAL_S > deadline:
                log.warning("the owners of %s did not take the outcome of producer %d/%d",
                            sorted(left), notice.producer_id, notice.producer_epoch)  # fmt: skip
                return False
            await asyncio.sleep(CHECK_INTERVAL_S)  # a retry period, bounded by the deadline

    async def _tell_once(self, notice: Notice, groups: set[str]) -> set[str]:
        """One round of `_tell`: the groups still to tell."""
        locator = self.sidecar.locator
        left: set[str] = set()
        by_owner: dict[tuple[str, int], list[str]] = {}
        for group_id in sorted(groups):
            where = locator.locate(group_id) if locator is not None else None
            if where is None or where.placement is Placement.LOCAL:
                if not await self._settle_here(notice, group_id):
                    left.add(group_id)
            elif where.placement is Placement.REMOTE and where.address is not None:
                by_owner.setdefault(where.address, []).append(group_id)
            else:
                left.add(group_id)
        for address, owned in by_owner.items():
            member = self.sidecar.peer_links.member(address)
            try:
                frame = await member.request(notice_request(notice, owned))
            except UpstreamUnavailable as exc:
                log.debug("cannot tell %s an outcome: %s", member.label, exc)
                left.update(owned)
                continue
            left |= unacknowledged(frame, owned)
        return left

    def notice(self, conn: SlotOwner, frame: bytes, answer: Callable[[bytes], None]) -> None:
        """Another member's notice (WriteTxnMarkers, on the fleet listener): settle the named
        groups owned here; answer per group whether it was taken."""
        try:
            _, version, correlation_id, request = decode_request(frame)
        except RewriteError as exc:
            conn.abort(f"malformed notice: {exc}")
            return

        async def take() -> None:
            locator = self.sidecar.locator
            answers = []
            for notice, groups in read_notices(request):
                errors: dict[str, ErrorCode] = {}
                for group_id in groups:
                    where = locator.locate(group_id).placement if locator else Placement.LOCAL
                    if where is Placement.LOADING:
                        errors[group_id] = ErrorCode.coordinator_load_in_progress
                    elif where is not Placement.LOCAL:
                        errors[group_id] = ErrorCode.not_coordinator
                    elif await self._settle_here(notice, group_id):
                        errors[group_id] = ErrorCode.none
                    else:  # a failed write: the sender asks again
                        errors[group_id] = ErrorCode.not_coordinator
                answers.append((notice, errors))
            answer(notice_response(correlation_id, version, answers))

        self.sidecar.spawn(take())

    async def _settle_here(self, notice: Notice, group_id: str) -> bool:
        """`notice` applied to `group_id`'s pending offsets here; True once durable."""
        if notice.committed is None:  # over, outcome unknown: the shadow group says
            core = self.server.core
            entries = [(k, v) for k, v in core.txn_pending(group_id)
                       if k.producer_id == notice.producer_id
                       and v.producer_epoch == notice.producer_epoch]  # fmt: skip
            if entries:
                return await self._witness({group_id: entries}, "fencing", abort_rest=True)
            return True
        fx = self._settle_told(notice, [group_id], "notice")
        runtime = self.server.runtime
        if not fx.records or runtime is None:
            return True
        durable: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def done(ok: bool) -> None:
            if not durable.done():
                durable.set_result(ok)

        runtime.apply_then(fx, lambda: done(True), lambda exc: done(False))
        return await durable

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
        self.added.prune(now - ABORT_AFTER_MS)
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
            # What the shadow groups show committed (every upstream); never an abort: an offset
            # not shown may belong to a transaction still open, or one whose markers are late.
            await self._witness(old, "witness", abort_rest=False)
            # Where the upstream describes transactions (Kafka; tansu 0.6.0 does not): those it
            # shows over are settled by the shadow read after it, aborts included; those it
            # shows open are kept, whatever their age (coordinator.sidecar.txn_witness).
            over, unknown = await self.transactions.ended(self._still_pending(old))
            if over:
                await self._witness(over, "describe", abort_rest=True)
            # The bound, only where the state could not be learned (tansu, or no answer).
            expired = {g: kept for g, entries in expired.items()
                       if (kept := [e for e in entries if e in unknown.get(g, ())])}  # fmt: skip
            if expired:
                await self._witness(expired, "timeout", abort_rest=True)
        finally:
            self._checking = False

    def _still_pending(self, entries: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
        core = self.server.core
        return {g: kept for g, listed in entries.items()
                if (kept := [e for e in core.txn_pending(g) if e in listed])}  # fmt: skip

    async def _witness(self, ended: dict[str, list[Entry]], source: str, abort_rest: bool) -> bool:
        """Commit the entries the shadow groups show committed; with `abort_rest`, drop the
        others (their transactions are known to be over). False: a shadow could not be read."""
        shadows = {
            g: await shadow_offsets(self.coordinators, shadow_group(g), entries)
            for g, entries in ended.items()
        }
        core = self.server.core
        runtime = self.server.runtime
        if runtime is None:
            return False
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
        return all(shadow is not None for shadow in shadows.values())

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
