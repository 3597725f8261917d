"""The state topic's writes: Produce requests of our own on the sidecar's upstream links.

Why not aiokafka's producer (which still writes the claims and the security topic, and whose
consumers still read): measured on 2026-11-28 (py-spy on the members of `python -m bench --only
fleet` during its commit phase, docs/sidecar.md "Performance"), aiokafka's per-message produce
path (its sender task, request encoding, a stream write per request, the response's futures) was
24-27% of each fleet member's event-loop samples; the fleet spent ~350 µs of CPU a commit
against ~100 µs for the whole commit in a `--state local` sidecar. Alone, a one-record write cost
its writer ~61 µs through aiokafka, ~28 µs through this path. With one write in flight per state
partition and 36 committers spread over 50 partitions, nearly every Produce carried one record.

What this does instead:
- `StateProducer.send(partition, batch)` queues one RecordBatch v2 (built by the caller with
  aiokafka's C `DefaultRecordBatchBuilder`: producer id -1, not idempotent, not transactional:
  tansu refuses idempotent producers) for the partition's leader. Everything queued in one turn
  of the event loop goes out as ONE Produce request per broker (v8, acks=-1: every in-sync
  replica), one batch per partition in it.
- Requests are pipelined on one dedicated link per broker (the sidecar's `Broker` pool and its
  connection settings: TLS, SASL, backoff), up to MAX_IN_FLIGHT at a time; what is queued
  meanwhile waits for the next request, so under load each request carries more partitions.
  The broker answers a connection's requests in order.
- Order per partition: one batch of a partition on its way at a time, retries included (the
  next waits for it: a lock per partition, never contended under `PartitionWriter`, which
  keeps one write in flight per partition itself); so a request never carries two batches of
  one partition, and a batch retried never lands after the one behind it.
- A batch is acknowledged (`send` returns its base offset) only when the broker's answer names
  that partition without error. Errors are handled as aiokafka's producer did for the same
  writes: a retriable error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, a timeout, ...) or a
  lost link re-reads the topic's leaders and retries with backoff until DELIVERY_TIMEOUT_S
  (client_options' request timeout) has passed (a request unanswered that long closes its
  link: one timer per request, not per batch); any other error (the upstream refused the
  write) fails at once. Both raise StateUnavailable, which fails every append in the batch
  (the runtime answers their commits NOT_COORDINATOR, which clients retry). A retried batch the
  broker had written after all lands twice: its writer finds the second copy after the offset
  it expected and examines it like any late write (state_topic's docstring: offsets fence).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.produce.v8.response import ProduceResponse
from kio.serial import entity_reader

from coordinator.sidecar import rewrite
from coordinator.sidecar.rewrite import METADATA, RewriteError
from coordinator.sidecar.topic_lookup import metadata_request
from coordinator.sidecar.upstream import CLIENT_ID, Link, Upstreams, UpstreamUnavailable

log = logging.getLogger("groupcoord.fleet.produce")

PRODUCE: Final = 0
PRODUCE_VERSION: Final = 8  # Kafka 4.x serves v3-v12 (v13 names topics by id); tansu 0.6 too
ACKS_ALL: Final = -1
DELIVERY_TIMEOUT_S: Final = 10.0  # client_options' request_timeout_ms, aiokafka's expiry
MAX_IN_FLIGHT: Final = 2  # Produce requests in flight per broker
MAX_REQUEST_BYTES: Final = 8 << 20  # batches put in one request (each <= max.message.bytes)
BACKOFF_MIN_S: Final = 0.05
BACKOFF_MAX_S: Final = 1.0
_HEAD: Final = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_CLIENT: Final = CLIENT_ID.encode()
_read_produce = entity_reader(ProduceResponse)


class StateUnavailableError(Exception):
    """Raised by `send` (state_topic wraps it in its StateUnavailable)."""


class _Retry(Exception):
    """This attempt failed in a way a new attempt may not (leader moved, link lost)."""


Waiter = tuple[int, bytes, "asyncio.Future[int]"]  # partition, batch, its base offset


class _Queue:
    """One broker's batches: those waiting for the next request, and the link they go on."""

    __slots__ = ("connecting", "in_flight", "link", "node_id", "waiting")

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.waiting: list[Waiter] = []
        self.in_flight = 0
        self.link: Link | None = None
        self.connecting = False


def encode_produce(topic: str, batches: list[tuple[int, bytes]], correlation_id: int) -> bytes:
    """A framed Produce v8 request (acks=-1) of one batch per partition. By hand: the request is
    flat, and this runs once per request on the commit path."""
    name = topic.encode()
    parts = [
        _HEAD.pack(PRODUCE, PRODUCE_VERSION, correlation_id, len(_CLIENT)),
        _CLIENT,
        # transactional id: null; acks; timeout (ms); one topic
        struct.pack(">hhii", -1, ACKS_ALL, int(DELIVERY_TIMEOUT_S * 1000), 1),
        struct.pack(">h", len(name)),
        name,
        struct.pack(">i", len(batches)),
    ]
    for partition, data in batches:
        parts.append(struct.pack(">ii", partition, len(data)))
        parts.append(data)
    body = b"".join(parts)
    return struct.pack(">i", len(body)) + body


def produce_results(topic: str, frame: bytes) -> dict[int, tuple[ErrorCode, int]]:
    """{partition: (error, base offset)} for `topic` in a framed Produce v8 response. Raises
    RewriteError."""
    try:
        response, _ = _read_produce(frame, 8)  # after the size and the correlation id (header v0)
    except Exception as exc:
        raise RewriteError(f"Produce v{PRODUCE_VERSION} response: {exc}") from exc
    out: dict[int, tuple[ErrorCode, int]] = {}
    for t in response.responses:
        if t.name != topic:
            continue
        for p in t.partition_responses:
            out[int(p.index)] = (p.error_code, int(p.base_offset))
    return out


class StateProducer:
    """Writes record batches to one topic's partitions (module docstring)."""

    def __init__(
        self,
        upstreams: Upstreams,
        topic: str,
        observe: Callable[[Any], None] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.upstreams = upstreams
        self.topic = topic
        # Every Metadata answer read here: the sidecar learns new brokers from it (it must
        # listen for them before a client is told of them). None: only `upstreams` learns.
        self._observe = observe
        self.max_in_flight = max_in_flight
        self.leaders: dict[int, int] = {}  # partition -> leader node id
        self._queues: dict[int, _Queue] = {}
        self._locks: dict[int, asyncio.Lock] = {}  # per partition: one batch on its way at a time
        self._refreshing: asyncio.Future[None] | None = None
        self._flush_soon: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._seq = 0
        self.closed = False
        self.requests = 0  # Produce requests sent (batches / requests: partitions per request)
        self.batches = 0

    def close(self) -> None:
        self.closed = True
        for queue in self._queues.values():
            if queue.link is not None:
                queue.link.close()  # fails what is in flight
            for _, _, future in queue.waiting:
                if not future.done():
                    future.set_exception(StateUnavailableError("the producer was closed"))
            queue.waiting.clear()

    async def send(self, partition: int, batch: bytes) -> int:
        """Append `batch` (one RecordBatch v2) to the partition; its base offset once acknowledged
        by every in-sync replica. Raises StateUnavailableError."""
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        async with lock:  # in order per partition, retries included
            return await self._send(partition, batch)

    async def _send(self, partition: int, batch: bytes) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DELIVERY_TIMEOUT_S
        backoff = BACKOFF_MIN_S
        while True:
            if self.closed:
                raise StateUnavailableError("the producer was closed")
            try:  # (bounded: a request unanswered for DELIVERY_TIMEOUT_S closes its link)
                return await self._attempt(partition, batch)
            except _Retry as exc:
                if loop.time() + backoff >= deadline:
                    raise StateUnavailableError(
                        f"{self.topic}[{partition}]: {exc} (for {DELIVERY_TIMEOUT_S:.0f} s)"
                    ) from None
                log.debug("write to %s[%d] retried: %s", self.topic, partition, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                self.leaders.pop(partition, None)  # ask again

    async def _attempt(self, partition: int, batch: bytes) -> int:
        node = self.leaders.get(partition)
        if node is None:
            await self._refresh()
            node = self.leaders.get(partition)
            if node is None or node < 0:
                raise _Retry("no leader known")
        queue = self._queues.get(node)
        if queue is None:
            queue = self._queues[node] = _Queue(node)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        queue.waiting.append((partition, batch, future))
        self._schedule(queue)
        # Given up on (the writer stopping) while its request is in flight: the answer that may
        # still come finds the future done and is dropped.
        return await future

    # -- requests --------------------------------------------------------------------------------

    def _schedule(self, queue: _Queue) -> None:
        """Send at the end of this turn of the loop: what is queued until then goes together."""
        if queue.node_id not in self._flush_soon:
            self._flush_soon.add(queue.node_id)
            asyncio.get_running_loop().call_soon(self._flush, queue)

    def _flush(self, queue: _Queue) -> None:
        self._flush_soon.discard(queue.node_id)
        if self.closed or not queue.waiting or queue.in_flight >= self.max_in_flight:
            return
        link = queue.link
        if link is None or link.closed:
            queue.link = None
            if not queue.connecting:
                queue.connecting = True
                task = asyncio.get_running_loop().create_task(self._connect(queue))
                self._tasks.add(task)  # (a task nobody refers to may be collected mid-way)
                task.add_done_callback(self._tasks.discard)
            return
        taken: list[Waiter] = []
        left: list[Waiter] = []
        partitions: set[int] = set()
        size = 0
        for waiter in queue.waiting:
            partition, data, future = waiter
            if future.done():
                continue  # given up on (timed out, cancelled)
            if partition in partitions or (taken and size + len(data) > MAX_REQUEST_BYTES):
                left.append(waiter)  # the next request: one batch per partition in each
                continue
            partitions.add(partition)
            size += len(data)
            taken.append(waiter)
        queue.waiting = left
        if not taken:
            return
        self._seq = (self._seq + 1) & 0x7FFFFFFF
        frame = encode_produce(self.topic, [(p, d) for p, d, _ in taken], self._seq)
        queue.in_flight += 1
        self.requests += 1
        self.batches += len(taken)
        # One timer per request, not per batch: unanswered in time, the link is closed, which
        # fails every request on it (retried, or StateUnavailable once past their deadline).
        timer = asyncio.get_running_loop().call_later(DELIVERY_TIMEOUT_S, _expired, link, taken)

        def answered(answer: bytes | None) -> None:
            timer.cancel()
            self._answered(queue, taken, answer)

        link.expect(self._seq, answered)
        link.write(frame)
        if left:
            self._schedule(queue)

    def _answered(self, queue: _Queue, taken: list[Waiter], frame: bytes | None) -> None:
        queue.in_flight -= 1
        if frame is None:
            _fail(taken, _Retry("the connection to the upstream broker was lost"))
        else:
            try:
                results = produce_results(self.topic, frame)
            except RewriteError as exc:
                log.warning("undecodable Produce answer from node %d: %s", queue.node_id, exc)
                if queue.link is not None:
                    queue.link.close()
                _fail(taken, _Retry(f"undecodable answer: {exc}"))
                results = {}
            for partition, _, future in taken:
                if future.done():
                    continue
                result = results.get(partition)
                if result is None:
                    future.set_exception(_Retry("the answer did not name the partition"))
                    continue
                error, base = result
                if error == ErrorCode.none:
                    future.set_result(base)
                elif error.retriable:
                    future.set_exception(_Retry(error.name.upper()))
                else:  # refused: no retry makes it accepted (too large, not authorized, ...)
                    future.set_exception(
                        StateUnavailableError(
                            f"{self.topic}[{partition}]: the upstream refused the write: "
                            f"{error.name.upper()}"
                        )
                    )
        if queue.waiting:
            self._schedule(queue)

    async def _connect(self, queue: _Queue) -> None:
        try:
            broker = self.upstreams.brokers.get(queue.node_id)
            if broker is None:
                raise UpstreamUnavailable(f"node {queue.node_id} is not known")
            queue.link = await broker.connect()
        except Exception as exc:  # UpstreamUnavailable; anything else must not strand the queue
            if not isinstance(exc, UpstreamUnavailable):
                log.warning("connecting to node %d for state writes: %r", queue.node_id, exc)
            self._drop_leaders(queue.node_id)
            waiting, queue.waiting = queue.waiting, []
            _fail(waiting, _Retry(str(exc)))
        finally:
            queue.connecting = False
        if queue.waiting:
            self._schedule(queue)

    def _drop_leaders(self, node_id: int) -> None:
        for partition in [p for p, n in self.leaders.items() if n == node_id]:
            del self.leaders[partition]

    # -- leaders ---------------------------------------------------------------------------------

    async def _refresh(self) -> None:
        """Read the topic's leaders (one read at a time, shared by every writer waiting)."""
        running = self._refreshing
        if running is not None:
            await asyncio.shield(running)
            return
        future = self._refreshing = asyncio.get_running_loop().create_future()
        try:
            _, frame = await self.upstreams.request_any(metadata_request([self.topic]))
            response = rewrite.decode_response(METADATA, 12, frame)
            if self._observe is not None:
                self._observe(response)
            else:
                self.upstreams.update(rewrite.metadata_brokers(response))
            _, _, leaders = rewrite.topic_infos(response)
            self.leaders.update({p: n for (t, p), n in leaders.items() if t == self.topic})
        except Exception as exc:  # UpstreamUnavailable, RewriteError: retried (send's deadline)
            raise _Retry(f"reading the leaders of {self.topic}: {exc!r}") from None
        finally:
            self._refreshing = None
            future.set_result(None)


def _expired(link: Link, taken: list[Waiter]) -> None:
    if any(not future.done() for _, _, future in taken):
        log.warning("upstream %s: a state write unanswered; closing the link", link.broker.label)
        link.close()


def _fail(waiters: list[Waiter], exc: BaseException) -> None:
    for _, _, future in waiters:
        if not future.done():
            future.set_exception(exc)
