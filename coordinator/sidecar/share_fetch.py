"""ShareFetch (78) and ShareAcknowledge (79), answered by the sidecar (KIP-932 through groupcoord).

The sidecar is every share consumer's partition leader (its Metadata names sidecar listeners), so
a share consumer's ShareFetch and ShareAcknowledge arrive here. The records come from the
upstream leaders with plain Fetch (coordinator.sidecar.share_upstream); which consumer holds which
record, and what became of it, is the share partitions' state (coordinator.sidecar.share_state
over the pure coordinator.core.share rules); the share session (coordinator.sidecar.share_session)
says which partitions a request fetches.

A ShareFetch, in Kafka's order (KafkaApis.handleShareFetchRequest):
1. the session context: a session error is the answer's top-level error, nothing else done;
2. the piggybacked acknowledgements, each partition's made durable before the answer leaves
   (STYLE.md: a response leaves only after the records it depends on are durable) and reported
   in that partition's AcknowledgeErrorCode;
3. the final epoch (-1): the member's acquired records go back (Kafka's releaseSession), nothing
   is fetched;
4. otherwise records are acquired for the member from each of the session's partitions, from
   its next fetch offset, at most MaxRecords in all: out of the partition's read-ahead
   (coordinator.sidecar.share_readahead: upstream batches fetched before they were asked for,
   refilled in the background), else with an upstream Fetch; when none could be acquired the
   request waits, up to MaxWaitMs, for records to arrive upstream or to be released here.
The records returned are the upstream's record batches that hold acquired offsets; the client
keeps only the offsets in AcquiredRecords, as with Kafka.

Versions: 78 and 79 at v1-v2, as Kafka 4.4 offers them (v0 was KIP-932's early access, gone in
4.1). v2's ShareAcquireMode 1 (record_limit) caps MaxRecords exactly; batch_optimized (0) may
exceed it to keep whole batches, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i32Timedelta

from coordinator.core.records import Record
from coordinator.core.share.records import (
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
)
from coordinator.sidecar import rewrite
from coordinator.sidecar.placement import Placement
from coordinator.sidecar.share_readahead import ReadAhead
from coordinator.sidecar.share_session import Context, ShareSessions, TopicIdPartition
from coordinator.sidecar.share_state import Acquired, PartitionKey, ShareState
from coordinator.sidecar.share_upstream import EARLIEST, Fetched, fetch, start_offset
from coordinator.sidecar.upstream import UpstreamUnavailable
from protocol.varint import skip_tagged_fields

if TYPE_CHECKING:
    from coordinator.core.topics import TopicInfo
    from coordinator.sidecar.placement import Locator
    from coordinator.sidecar.upstream import Broker, Upstreams

log = logging.getLogger("groupcoord.share")

SHARE_FETCH: Final = 78
SHARE_ACKNOWLEDGE: Final = 79
SHARE_APIS: Final = frozenset({SHARE_FETCH, SHARE_ACKNOWLEDGE})
VERSIONS: Final = rewrite.SHARE_VERSIONS
_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client id length
_ZERO: Final = i32Timedelta.parse(timedelta(0))
MAX_WAIT_CAP_MS: Final = 30_000
_RECORD_LIMIT_MODE: Final = 1  # ShareAcquireMode record_limit (v2)
_FETCH_MAX_BYTES: Final = 1 << 20  # per partition, toward the upstream
_FETCH_MIN_BYTES: Final = (
    16 << 10
)  # the least a sized upstream Fetch asks for (ShareService._sized)
_FETCH_HEADROOM: Final = 1.25  # records' sizes vary: ask a quarter more than the estimate
_FIRST_PASS_WAIT_MS: Final = 1  # a ShareFetch's first upstream Fetch (ShareService._acquire)
# A refill's upstream MaxWaitMs: tansu 0.6 gathers batches until MaxBytes or MaxWaitMs (a 1 ms
# Fetch brings one batch of 100 records, a longer one 1 MiB in ~10 ms); Kafka answers at once
# when it has records (MinBytes 1), so it costs nothing there.
_READ_AHEAD_WAIT_MS: Final = 50
_REPOLL_S: Final = 0.1  # an upstream that answered early with no records is asked again after it


class Sidecar(Protocol):
    """What the share APIs need of coordinator.sidecar.proxy.Sidecar."""

    upstreams: Upstreams
    locator: Locator | None

    @property
    def topics(self) -> dict[str, TopicInfo]: ...

    @property
    def leaders(self) -> dict[tuple[str, int], int]: ...

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...

    def refresh_soon(self) -> None: ...


# (owner's fleet address, frame, correlation id, reply(None: no answer will come))
Forward = Callable[[tuple[str, int], bytes, int, Callable[[bytes | None], None]], None]


class BadRequest(Exception):
    """The request cannot be read: close the connection (a broker does the same)."""


@dataclass(slots=True)
class _Answer:
    """One partition's part of a ShareFetch answer."""

    error: ErrorCode = ErrorCode.none
    ack_error: ErrorCode | None = None  # None: no acknowledgement in the request
    records: bytes = b""
    acquired: list[Acquired] = field(default_factory=list)


def response_module(api_key: int, version: int) -> Any:
    return importlib.import_module(rewrite.response_class(api_key, version).__module__)


def decode(frame: bytes) -> tuple[int, int, int, Any]:
    """(api_key, version, correlation_id, request) of a framed 78/79 request (header v2)."""
    try:
        api_key, version, correlation_id, length = _HEADER.unpack_from(frame, 4)
        low, high = VERSIONS[api_key]
        if not low <= version <= high:
            raise BadRequest(f"API {api_key} v{version} is not offered (v{low}-v{high})")
        offset = skip_tagged_fields(frame, 14 + max(length, 0))
        request: Any
        request, _ = entity_reader(rewrite.request_class(api_key, version))(frame, offset)
    except BadRequest:
        raise
    except Exception as exc:
        raise BadRequest(f"malformed share request: {exc}") from exc
    return api_key, version, correlation_id, request


class ShareService:
    """The sidecar's share groups: sessions, state, and the two APIs (module docstring)."""

    def __init__(self, sidecar: Sidecar, state: ShareState) -> None:
        self._sidecar = sidecar
        self.sessions = ShareSessions()
        self.state = state
        self._starting: set[tuple[str, uuid.UUID, int]] = set()
        # Bytes per record in each partition's last answer: a ShareFetch is offered about what
        # its MaxRecords need (ShareService._sized).
        self._record_bytes: dict[TopicIdPartition, float] = {}
        # Upstream records fetched ahead of the ShareFetches (coordinator.sidecar.share_readahead)
        self.readahead: ReadAhead[PartitionKey] = ReadAhead()
        self._refills: dict[PartitionKey, asyncio.Task[None]] = {}

    def request(
        self,
        frame: bytes,
        answer: Callable[[bytes], None],
        abort: Callable[[str], None],
        connection: object = None,
        forward: Forward | None = None,
    ) -> None:
        """One ShareFetch/ShareAcknowledge `frame`; `answer` gets the framed response. In a fleet
        (`Sidecar.locator`), `forward` sends it to the group's owner; None: a request another
        member forwarded here, answered here or refused, never forwarded again."""
        try:
            api_key, version, correlation_id, request = decode(frame)
        except BadRequest as exc:
            abort(str(exc))
            return
        locator = self._sidecar.locator
        if locator is not None:
            where = locator.locate(request.group_id or "")
            if where.placement is not Placement.LOCAL:
                refused = rewrite.encode_response(
                    correlation_id, api_key, version, _not_here(api_key, version, request)
                )
                if where.placement is Placement.REMOTE and where.address and forward:

                    def relay(response: bytes | None) -> None:
                        answer(refused if response is None else response)

                    forward(where.address, frame, correlation_id, relay)
                else:
                    answer(refused)
                return
        if api_key == SHARE_FETCH:
            work = self._share_fetch(version, request, connection)
        else:
            work = self._share_acknowledge(version, request)

        async def serve() -> None:
            try:
                entity = await work
                data = rewrite.encode_response(correlation_id, api_key, version, entity)
            except Exception:  # a bug: logged, and the client sees its connection close
                log.exception("share request failed")
                abort("share request failed")
                return
            answer(data)

        self._sidecar.spawn(serve())

    # -- topics ----------------------------------------------------------------------------------

    def _names(self) -> dict[uuid.UUID, str]:
        return {info.topic_id: name for name, info in self._sidecar.topics.items()}

    def _known(self, names: dict[uuid.UUID, str], tp: TopicIdPartition) -> bool:
        name = names.get(tp[0])
        info = self._sidecar.topics.get(name) if name is not None else None
        return info is not None and 0 <= tp[1] < info.partitions

    # -- ShareFetch ------------------------------------------------------------------------------

    def connection_closed(self, connection: object) -> None:
        """A client connection closed: its share sessions end, their members' records go back."""
        for session in self.sessions.connection_closed(connection):
            self.state.release_member_soon(session.group_id, session.member_id)

    def records_applied(self, records: list[Record]) -> None:
        """The core wrote records: a share assignment naming a share partition not started yet
        starts it now (its start offset read and made durable), not at the member's first
        ShareFetch. Kafka initializes a share partition before assigning it, so records produced
        after a member got its assignment are delivered even under share.auto.offset.reset
        latest; groupcoord assigns at once and starts the partition right behind (a window of one
        ListOffsets and one write)."""
        for record in records:
            if type(record.key) is not ShareGroupTargetAssignmentMemberKey:
                continue
            value = record.value
            if not isinstance(value, ShareGroupTargetAssignmentMemberValue):
                continue
            group_id = record.key.group_id
            for tps in value.topic_partitions:
                for partition in tps.partitions:
                    key = (group_id, tps.topic_id, partition)
                    if key not in self.state.partitions and key not in self._starting:
                        self._starting.add(key)
                        self._sidecar.spawn(self._start(group_id, (tps.topic_id, partition)))

    async def _start(self, group_id: str, tp: TopicIdPartition) -> None:
        try:
            names = self._names()
            topic = names.get(tp[0])
            leader = self._sidecar.leaders.get((topic, tp[1])) if topic else None
            broker = self._sidecar.upstreams.brokers.get(leader) if leader is not None else None
            if topic is None or broker is None:
                return  # the first ShareFetch starts it
            await self.state.fetch_offset(group_id, tp, topic, broker)
        except Exception as exc:  # the first ShareFetch tries again
            log.debug("share partition %s of %s not started: %s", tp, group_id, exc)
        finally:
            self._starting.discard((group_id, tp[0], tp[1]))

    def member_left(self, group_id: str, member_id: str) -> None:
        """For the share-group membership: a member left or was fenced (session timeout)."""
        self.sessions.drop_member(group_id, member_id)
        self.state.release_member_soon(group_id, member_id)

    async def _share_fetch(self, version: int, request: Any, connection: object) -> Any:
        group_id = request.group_id or ""
        member_id = request.member_id or ""
        if not group_id or not member_id:
            return self._fetch_error(
                version, ErrorCode.invalid_request, "GroupId and MemberId are required"
            )
        wanted = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
        forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
        acks = {
            (t.topic_id, p.partition_index): p.acknowledgement_batches
            for t in request.topics
            for p in t.partitions
            if p.acknowledgement_batches
        }
        now_ms = _now_ms()
        context = self.sessions.fetch_context(
            group_id,
            member_id,
            request.share_session_epoch,
            wanted,
            forgotten,
            bool(acks),
            now_ms,
            connection,
        )
        if context.error != ErrorCode.none:
            return self._fetch_error(version, context.error, None)
        names = self._names()
        answers: dict[TopicIdPartition, _Answer] = {}
        # The acknowledgements are applied first, in order, then made durable while the records
        # are fetched: the answer waits for both, not for one after the other (an fsync, then an
        # upstream Fetch: bench/scenario_share.py). Each task applies its partition's
        # acknowledgements in its first step (ShareState.acknowledge), which the sleep(0) lets
        # run before anything here goes on.
        durable: dict[TopicIdPartition, asyncio.Task[ErrorCode]] = {}
        for tp, batches in acks.items():
            answer = answers.setdefault(tp, _Answer())
            if not self._known(names, tp):
                answer.ack_error = ErrorCode.unknown_topic_or_partition
                continue
            durable[tp] = asyncio.ensure_future(
                self.state.acknowledge(group_id, member_id, tp, _ack_batches(batches), _now_ms())
            )
        if durable:
            await asyncio.sleep(0)
        try:
            await self._fetch_after_acks(request, context, group_id, member_id, names, answers)
        finally:
            for tp, task in durable.items():
                answers[tp].ack_error = await task
        if context.final:
            await self.state.release_member(group_id, member_id, context.released)
        return self._fetch_response(version, group_id, answers)

    async def _fetch_after_acks(
        self,
        request: Any,
        context: Context,
        group_id: str,
        member_id: str,
        names: dict[uuid.UUID, str],
        answers: dict[TopicIdPartition, _Answer],
    ) -> None:
        """A ShareFetch's records, acquired into `answers` (none on the final epoch)."""
        if context.final:
            return  # the member's records go back once its acknowledgements are durable
        if getattr(request, "is_renew_ack", False):
            # v2, KIP-1222: a fetch that only renews acquisition locks acquires nothing (the
            # member is still busy with what it holds); our reading of the KIP, not checked
            # against a broker.
            return
        fetchable = []
        for tp in context.partitions:
            if self._known(names, tp):
                fetchable.append(tp)
            else:  # the client retries; meanwhile this sidecar reads the cluster again
                answers.setdefault(tp, _Answer()).error = ErrorCode.unknown_topic_id
                self._sidecar.refresh_soon()
        if fetchable:
            max_records = int(request.max_records)
            exact = getattr(request, "share_acquire_mode", 0) == _RECORD_LIMIT_MODE
            wait_ms = min(max(int(request.max_wait.total_seconds() * 1000), 0), MAX_WAIT_CAP_MS)
            batch_size = int(request.batch_size) if request.batch_size > 0 else None
            await self._acquire(
                group_id,
                member_id,
                names,
                fetchable,
                max_records,
                exact,
                wait_ms,
                answers,
                batch_size,
                # MaxBytes per partition, toward the upstream (whose Fetch returns a first batch
                # larger than that whole, KIP-74, as Kafka's ShareFetch does)
                max(1, min(int(request.max_bytes), _FETCH_MAX_BYTES)),
            )

    async def _acquire(
        self,
        group_id: str,
        member_id: str,
        names: dict[uuid.UUID, str],
        partitions: list[TopicIdPartition],
        max_records: int,
        exact: bool,
        wait_ms: int,
        answers: dict[TopicIdPartition, _Answer],
        batch_size: int | None = None,
        max_bytes: int = _FETCH_MAX_BYTES,
    ) -> None:
        """Fetch upstream and acquire, waiting up to `wait_ms` for something to acquire: for
        records to arrive upstream (the upstream Fetch's own wait) or to be released here (a
        lock expiry, another member's release), whichever comes first (Kafka's
        DelayedShareFetch)."""
        deadline = time.monotonic() + wait_ms / 1000
        # The first pass takes what the upstream has now, without its long poll: the partitions'
        # Fetches are gathered, so one caught-up partition waiting out MaxWaitMs would hold up
        # the records of all the others (a 4-partition share group read 20x slower than a
        # 1-partition one: bench/scenario_share.py). Only when it found nothing do the next
        # passes long-poll the upstream. (1 ms, not 0: tansu 0.6 answers a Fetch whose MaxWaitMs
        # is 0 with no partitions at all.)
        first_pass = True
        while True:
            changed = self.state.changed_event()
            remaining_ms = (
                _FIRST_PASS_WAIT_MS
                if first_pass
                else max(0, int((deadline - time.monotonic()) * 1000))
            )
            fetching = asyncio.ensure_future(
                asyncio.gather(
                    *(
                        self._fetch_one(
                            group_id,
                            names,
                            tp,
                            remaining_ms,
                            self._sized(tp, max_bytes, max_records),
                        )
                        for tp in partitions
                    )
                )
            )
            if first_pass:
                # A 1 ms upstream wait: nothing worth racing. (A change here meanwhile, this
                # request's own acknowledgements made durable among them, would otherwise cancel
                # the Fetches, and closing their links, for nothing.)
                fetched = await fetching
            elif not await _first(fetching, changed):
                continue  # released here meanwhile: fetch again, from the released records
            else:
                fetched = fetching.result()
            left = max_records
            got = False
            for tp, result in zip(partitions, fetched, strict=True):
                answer = answers.setdefault(tp, _Answer())
                if isinstance(result, ErrorCode):
                    answer.error = result
                    continue
                if left <= 0:
                    continue
                acquired = self.state.acquire(
                    group_id, member_id, tp, result, left, exact, _now_ms(), batch_size
                )
                if acquired:
                    got = True
                    left -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
                    answer.acquired = acquired
                    answer.records = _covering(result, acquired)
            remaining = deadline - time.monotonic()
            if got or remaining <= 0 or any(a.error != ErrorCode.none for a in answers.values()):
                return
            # Nothing to acquire: records were there upstream but held by others, or the
            # upstream answered early with nothing. Wait for a release here (or, for the
            # latter, a moment before asking the upstream again), up to the deadline.
            data = any(isinstance(r, Fetched) and r.batches for r in fetched)
            if first_pass and not data:
                first_pass = False
                continue  # nothing upstream yet: long-poll it now
            first_pass = False
            try:
                async with asyncio.timeout(remaining if data else min(remaining, _REPOLL_S)):
                    await changed.wait()
            except TimeoutError:
                if data:
                    return

    def _sized(self, tp: TopicIdPartition, max_bytes: int, max_records: int) -> int:
        """The bytes of a partition's records one ShareFetch is offered (out of the read-ahead,
        or of a redelivery's upstream Fetch): about what `max_records` records take, by the
        partition's last answer, within `max_bytes`. A share consumer asks for a few hundred
        records; offering it the whole 1 MiB of small records meant acquiring and sending far
        more batches than it takes. A first batch larger than this still comes whole (KIP-74),
        so a low estimate costs a round trip, never progress."""
        per_record = self._record_bytes.get(tp)
        if per_record is None:
            return max_bytes
        wanted = int(per_record * max_records * _FETCH_HEADROOM)
        return max(1, min(max_bytes, max(wanted, _FETCH_MIN_BYTES)))

    async def _fetch_one(
        self,
        group_id: str,
        names: dict[uuid.UUID, str],
        tp: TopicIdPartition,
        wait_ms: int,
        max_bytes: int = _FETCH_MAX_BYTES,
    ) -> Fetched | ErrorCode:
        topic = names[tp[0]]
        sidecar = self._sidecar
        leader = sidecar.leaders.get((topic, tp[1]))
        broker = sidecar.upstreams.brokers.get(leader) if leader is not None else None
        if broker is None:
            sidecar.refresh_soon()
            return ErrorCode.not_leader_or_follower
        try:
            offset = await self.state.fetch_offset(group_id, tp, topic, broker)
            if offset is None:  # as many records in flight as it may have: wait for some
                return Fetched(ErrorCode.none)
            committed = self.state.read_committed(group_id)
            key = (group_id, tp[0], tp[1])
            view = await self._buffered(key, offset, max_bytes, committed, wait_ms)
            if view is not None:
                self._refill(key, broker, topic, offset, committed)
                return view
            held = self.readahead.buffered(key)
            if held is not None and offset == held[1] + 1:
                # Caught up with the read-ahead: its refill is this partition's upstream Fetch,
                # in the background. Each ShareFetch of a 4-partition share group otherwise
                # waited for an upstream round trip of a drained partition (bench/
                # scenario_share.py: 3 ms of every 4 ms), while the others' records were here.
                self._refill(key, broker, topic, offset, committed)
                view = await self._buffered(key, offset, max_bytes, committed, wait_ms)
                if view is not None:
                    return view
            # Not read ahead: fetched now, the read-ahead's worth and kept, unless the offset
            # lies below what the buffer holds (a redelivery: the records past it are there).
            below = held is not None and offset < held[0]
            size = max_bytes if below else max(max_bytes, self.readahead.limit)
            result = await fetch(broker, topic, tp[1], offset, size, wait_ms, committed)
        except (UpstreamUnavailable, rewrite.RewriteError) as exc:
            log.debug("share fetch of %s-%d upstream failed: %s", topic, tp[1], exc)
            sidecar.refresh_soon()
            return ErrorCode.not_leader_or_follower
        if result.error == ErrorCode.offset_out_of_range:
            # The records were deleted upstream (retention): the partition starts again at the
            # log start (Kafka's SharePartition.updateCacheAndOffsets).
            try:
                earliest = await start_offset(broker, topic, tp[1], EARLIEST)
            except (UpstreamUnavailable, rewrite.RewriteError):
                earliest = None
            if earliest is not None:
                self.state.out_of_range(group_id, tp, earliest)
            return Fetched(ErrorCode.none)
        if result.error == ErrorCode.unknown_topic_or_partition:
            # The topic is in this sidecar's metadata: the upstream has not caught up (tansu
            # 0.6.0 answers so at times right after the topic was created). Nothing to deliver
            # yet; the metadata is read again, and a topic really gone leaves it (then
            # UNKNOWN_TOPIC_ID), so the client is not told of a failure the broker will outgrow.
            sidecar.refresh_soon()
            return Fetched(ErrorCode.none)
        if result.error != ErrorCode.none:
            sidecar.refresh_soon()
            return ErrorCode.not_leader_or_follower  # a leader moved, or is being elected
        if below:
            return result
        self.readahead.keep(key, result, committed, offset)
        view = self.readahead.take(key, offset, max_bytes, committed)
        if view is None:
            return result
        if view.batches:
            count = view.batches[-1].last_offset - view.batches[0].base_offset + 1
            self._record_bytes[tp] = (view.batches[-1].end - view.batches[0].start) / count
        self._refill(key, broker, topic, offset, committed)
        return view

    async def _buffered(
        self, key: PartitionKey, offset: int, max_bytes: int, committed: bool, wait_ms: int
    ) -> Fetched | None:
        """The records from `offset` out of the read-ahead, waiting up to `wait_ms` for a refill
        under way that will hold them (nothing yet: an empty answer); None when the caller must
        fetch them upstream."""
        view = self.readahead.take(key, offset, max_bytes, committed)
        if view is not None:
            return view
        refill = self._refills.get(key)
        held = self.readahead.buffered(key)
        if refill is None or held is None or not held[0] <= offset <= held[1] + 1:
            return None
        await asyncio.wait({refill}, timeout=wait_ms / 1000)
        view = self.readahead.take(key, offset, max_bytes, committed)
        if view is None and not refill.done():
            return Fetched(ErrorCode.none)  # still on its way: the caller waits, or asks again
        return view

    def _refill(
        self, key: PartitionKey, broker: Broker, topic: str, offset: int, committed: bool
    ) -> None:
        """Fetch the next chunk of `key`'s records in the background, if its read-ahead runs
        low (ReadAhead.wanted) and no refill is under way (coordinator.sidecar.share_readahead)."""
        if key in self._refills:
            return
        held = self.readahead.buffered(key)
        size = self.readahead.wanted(key, offset)
        if held is None or size <= 0:
            return

        async def refill() -> None:
            try:
                result = await fetch(
                    broker, topic, key[2], held[1] + 1, size, _READ_AHEAD_WAIT_MS, committed
                )
                self.readahead.keep(key, result, committed, held[1] + 1)
            except (UpstreamUnavailable, rewrite.RewriteError) as exc:
                log.debug("share read-ahead of %s-%d failed: %s", topic, key[2], exc)
            finally:
                self._refills.pop(key, None)

        self._refills[key] = self._sidecar.spawn(refill())

    def _fetch_error(self, version: int, error: ErrorCode, message: str | None) -> Any:
        module = response_module(SHARE_FETCH, version)
        return module.ShareFetchResponse(
            throttle_time=_ZERO,
            error_code=error,
            error_message=message,
            acquisition_lock_timeout=_ZERO,
            responses=(),
            node_endpoints=(),
        )

    def _fetch_response(
        self, version: int, group_id: str, answers: dict[TopicIdPartition, _Answer]
    ) -> Any:
        module = response_module(SHARE_FETCH, version)
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for (topic_id, partition), answer in answers.items():
            by_topic.setdefault(topic_id, []).append(
                module.PartitionData(
                    partition_index=partition,
                    error_code=answer.error,
                    acknowledge_error_code=answer.ack_error or ErrorCode.none,
                    current_leader=module.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                    records=answer.records,
                    acquired_records=tuple(
                        module.AcquiredRecords(
                            first_offset=a.first_offset,
                            last_offset=a.last_offset,
                            delivery_count=a.delivery_count,
                        )
                        for a in answer.acquired
                    ),
                )
            )
        return module.ShareFetchResponse(
            throttle_time=_ZERO,
            error_code=ErrorCode.none,
            acquisition_lock_timeout=_ms(self.state.lock_duration_ms(group_id)),
            responses=tuple(
                module.ShareFetchableTopicResponse(topic_id=t, partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
            node_endpoints=(),
        )

    # -- ShareAcknowledge ------------------------------------------------------------------------

    async def _share_acknowledge(self, version: int, request: Any) -> Any:
        module = response_module(SHARE_ACKNOWLEDGE, version)
        group_id = request.group_id or ""
        member_id = request.member_id or ""
        context = self.sessions.acknowledge_context(
            group_id, member_id, request.share_session_epoch, _now_ms()
        )
        error = context.error
        if not group_id or not member_id:
            error = ErrorCode.invalid_request
        if error != ErrorCode.none:
            return self._ack_response(module, group_id, error, {})
        names = self._names()
        results: dict[TopicIdPartition, ErrorCode] = {}
        durable: dict[TopicIdPartition, asyncio.Task[ErrorCode]] = {}
        for t in request.topics:
            for p in t.partitions:
                tp = (t.topic_id, p.partition_index)
                if not self._known(names, tp):
                    results[tp] = ErrorCode.unknown_topic_or_partition
                    continue
                # applied in this order (each task's first step), made durable together
                durable[tp] = asyncio.ensure_future(
                    self.state.acknowledge(
                        group_id, member_id, tp, _ack_batches(p.acknowledgement_batches), _now_ms()
                    )
                )
        for tp, task in durable.items():
            results[tp] = await task
        if context.final:
            await self.state.release_member(group_id, member_id, context.released)
        return self._ack_response(module, group_id, ErrorCode.none, results)

    def _ack_response(
        self,
        module: Any,
        group_id: str,
        error: ErrorCode,
        results: dict[TopicIdPartition, ErrorCode],
    ) -> Any:
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for (topic_id, partition), code in results.items():
            by_topic.setdefault(topic_id, []).append(
                module.PartitionData(
                    partition_index=partition,
                    error_code=code,
                    current_leader=module.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                )
            )
        fields: dict[str, Any] = {
            "throttle_time": _ZERO,
            "error_code": error,
            "responses": tuple(
                module.ShareAcknowledgeTopicResponse(topic_id=t, partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
            "node_endpoints": (),
        }
        if "acquisition_lock_timeout" in module.ShareAcknowledgeResponse.__dataclass_fields__:
            fields["acquisition_lock_timeout"] = _ms(self.state.lock_duration_ms(group_id))
        return module.ShareAcknowledgeResponse(**fields)


async def _first(fetching: asyncio.Future[Any], changed: asyncio.Event) -> bool:
    """Wait for `fetching` or for `changed`; False (and `fetching` cancelled) if `changed` came
    first."""
    waking = asyncio.ensure_future(changed.wait())
    try:
        await asyncio.wait({fetching, waking}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waking.cancel()
    if fetching.done():
        return True
    fetching.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await fetching
    return False


def _not_here(api_key: int, version: int, request: Any) -> Any:
    """The answer of a fleet member that cannot serve the group now (its owner is unknown,
    loading, or unreachable): NOT_LEADER_OR_FOLLOWER for every partition, on which share
    consumers refresh their metadata and try again, as when a partition leader moves."""
    module = response_module(api_key, version)
    moved = ErrorCode.not_leader_or_follower
    unknown = module.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
    if api_key == SHARE_FETCH:
        topics = tuple(
            module.ShareFetchableTopicResponse(
                topic_id=t.topic_id,
                partitions=tuple(
                    module.PartitionData(
                        partition_index=p.partition_index,
                        error_code=moved,
                        acknowledge_error_code=moved if p.acknowledgement_batches else 0,
                        current_leader=unknown,
                        records=b"",
                        acquired_records=(),
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
        return module.ShareFetchResponse(
            throttle_time=_ZERO,
            error_code=ErrorCode.none,
            acquisition_lock_timeout=_ZERO,
            responses=topics,
            node_endpoints=(),
        )
    fields: dict[str, Any] = {
        "throttle_time": _ZERO,
        "error_code": ErrorCode.none,
        "responses": tuple(
            module.ShareAcknowledgeTopicResponse(
                topic_id=t.topic_id,
                partitions=tuple(
                    module.PartitionData(
                        partition_index=p.partition_index, error_code=moved, current_leader=unknown
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
        "node_endpoints": (),
    }
    if "acquisition_lock_timeout" in module.ShareAcknowledgeResponse.__dataclass_fields__:
        fields["acquisition_lock_timeout"] = _ZERO
    return module.ShareAcknowledgeResponse(**fields)


def _ack_batches(batches: Any) -> list[tuple[int, int, tuple[int, ...]]]:
    return [
        (int(b.first_offset), int(b.last_offset), tuple(int(t) for t in b.acknowledge_types))
        for b in batches
    ]


def _covering(fetched: Fetched, acquired: list[Acquired]) -> bytes:
    """The fetched batches that hold an acquired offset, as one slice of the upstream's bytes
    (batches are contiguous in the answer, so the slice from the first to the last is whole)."""
    low = min(a.first_offset for a in acquired)
    high = max(a.last_offset for a in acquired)
    hit = [b for b in fetched.batches if b.last_offset >= low and b.base_offset <= high]
    if not hit:
        return b""
    return fetched.records[hit[0].start : hit[-1].end]


def _ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=value))


def _now_ms() -> int:
    # The loop's clock: the lock timers (share_state) are loop timers.
    return int(asyncio.get_running_loop().time() * 1000)
