"""A commit naming a topic the sidecar has not seen yet asks the upstream first (issue 40).

A Kafka broker knows a topic as soon as it is created; a sidecar learns topics from the Metadata
answers that pass through (only v10+ ones carry the topic id it needs) and from its periodic
refresh. So a producer that creates a topic through an old Metadata version, followed at once by
a consumer's commit, used to meet UNKNOWN_TOPIC_OR_PARTITION from the sidecar for up to a refresh
interval, where Kafka would have accepted the commit.

Rule (the pure part: core.topics.topics_to_look_up): an OffsetCommit or TxnOffsetCommit that
names a topic the catalog does not know, or a partition beyond the count it knows, or a KIP-848
ConsumerGroupHeartbeat subscribing by name to a topic it does not know (Kafka assigns a topic
created a moment ago at once; a sidecar would wait for its next refresh), is held while the
upstream is asked about those topics (one Metadata v12 request, `LOOKUP_TIMEOUT_S`); what the
upstream says is learnt as any Metadata answer is (ClusterView.observe), and then the request
is judged as before, as Kafka would for what the upstream said: a topic the upstream does not
have is still UNKNOWN_TOPIC_OR_PARTITION (a subscription to it: nothing to assign). A look-up
that fails or times out proves nothing; the request is judged on what the sidecar knows.
OffsetFetch needs none: it does not look at the catalog (core.handlers.offset_fetch answers -1,
without an error, for a partition with nothing committed, whether or not its topic is known).

Invariants:
- Single flight: one look-up request upstream at a time. Topics asked for while one is in flight
  either ride on it (it already asks for them) or on the next one, which gathers every topic
  asked for meanwhile.
- Request order per client connection (`HeldRequests`): while one of its requests waits for a
  look-up, the group requests that connection sends after it wait behind it, and are handed to
  the server in the order they came, so that the core sees them in request order (Kafka handles
  one request of a connection at a time). Other requests (forwarded upstream) are not held.
- Standalone mode has none of this: its catalog is the truth, and an unknown topic is answered
  UNKNOWN_TOPIC_OR_PARTITION at once, Kafka's rule.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from coordinator.core.topics import TopicCatalog, topics_to_look_up
from coordinator.sidecar import rewrite
from coordinator.sidecar.rewrite import METADATA, RewriteError
from coordinator.sidecar.txn import TXN_OFFSET_COMMIT
from coordinator.sidecar.txn import decode_request as decode_txn_request
from coordinator.sidecar.upstream import UpstreamUnavailable
from protocol import apis, codec, fastpath

log = logging.getLogger("groupcoord.sidecar")

LOOKUP_TIMEOUT_S: Final = 2.0
LOOKED_UP: Final = frozenset({apis.OFFSET_COMMIT, TXN_OFFSET_COMMIT, apis.CONSUMER_GROUP_HEARTBEAT})

Requested = list[tuple[str, list[int]]]


def requested_partitions(api_key: int, frame: bytes, max_frame_bytes: int) -> Requested:
    """The (topic, partitions) an OffsetCommit or TxnOffsetCommit frame (size prefix included)
    names, or the topics a ConsumerGroupHeartbeat subscribes to by name (no partitions); [] for
    anything else or what cannot be read (the server then answers it as before)."""
    if api_key == apis.OFFSET_COMMIT:
        fast: Requested | None = fastpath.parse_offset_commit(
            frame, max_frame_bytes, _topics_field, _topic, _partition
        )
        if fast is not None:
            return fast
        try:
            _, request = codec.decode_request(frame[4:])
        except codec.DecodeError:
            return []
    elif api_key == apis.CONSUMER_GROUP_HEARTBEAT:
        try:
            _, request = codec.decode_request(frame[4:])
        except codec.DecodeError:
            return []
        names: Any = getattr(request, "subscribed_topic_names", None) or ()
        return [(name, []) for name in names]
    elif api_key == TXN_OFFSET_COMMIT:
        try:
            request = decode_txn_request(frame)[3]
        except RewriteError:
            return []
    else:
        return []
    topics: Any = getattr(request, "topics", None) or ()
    return [(t.name, [int(p.partition_index) for p in t.partitions]) for t in topics]


def _topics_field(*fields: Any) -> Requested:
    return list(fields[-1])  # OffsetCommitFields ends with the topics


def _topic(name: str, partitions: tuple[int, ...]) -> tuple[str, list[int]]:
    return name, list(partitions)


def _partition(partition: int, _offset: int, _epoch: int, _metadata: str | None) -> int:
    return partition


class TopicLookup:
    """Asks the upstream about topics, one Metadata request at a time (single flight).
    `ask(names)` sends a Metadata request for those topics and returns the framed v12 answer;
    `learn(response)` takes it in (Sidecar.observe_metadata, not a complete refresh)."""

    def __init__(
        self,
        catalog: TopicCatalog,
        ask: Callable[[list[str]], Awaitable[bytes]],
        learn: Callable[[Any], None],
        timeout_s: float = LOOKUP_TIMEOUT_S,
    ) -> None:
        self.catalog = catalog
        self._ask = ask
        self._learn = learn
        self.timeout_s = timeout_s
        self._flying: tuple[frozenset[str], asyncio.Future[None]] | None = None
        self._next: tuple[set[str], asyncio.Future[None]] | None = None
        self.requests = 0  # look-ups sent upstream (tests, status)

    def wanted(self, requested: Iterable[tuple[str, Iterable[int]]]) -> tuple[str, ...]:
        return topics_to_look_up(self.catalog, requested)

    def look_up(self, names: Iterable[str]) -> asyncio.Future[None]:
        """A future done once the upstream answered about `names` (or could not)."""
        wanted = set(names)
        flying = self._flying
        if flying is not None and wanted <= flying[0]:
            return flying[1]
        if self._next is None:
            self._next = (set(), asyncio.get_running_loop().create_future())
        self._next[0].update(wanted)
        future = self._next[1]
        if flying is None:
            self._start()
        return future

    def _start(self) -> None:
        gathered, self._next = self._next, None
        if gathered is None:
            return
        names, future = gathered
        self._flying = (frozenset(names), future)
        asyncio.get_running_loop().create_task(self._run(sorted(names), future))

    async def _run(self, names: list[str], future: asyncio.Future[None]) -> None:
        self.requests += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                frame = await self._ask(names)
            self._learn(rewrite.decode_response(METADATA, 12, frame))
        except (TimeoutError, UpstreamUnavailable, RewriteError) as exc:
            log.debug("looking up topics %s upstream failed: %s", ", ".join(names), exc)
        except Exception:  # a bug: the held commits are still answered, as before
            log.exception("looking up topics %s upstream failed", ", ".join(names))
        finally:
            self._flying = None
            if not future.done():
                future.set_result(None)
            self._start()


def metadata_request(names: list[str]) -> MetadataRequest:
    """Metadata v12 for `names` only, never creating them (a commit must not create a topic)."""
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


class HeldRequests:
    """One client connection's group requests, in order, while one of them waits for a look-up.
    `run(api_key, frame, go)`: `go()` hands the request to the server, now or once every request
    before it has been handed over and the look-up it needs (if any) is answered."""

    __slots__ = ("_closed", "_held", "_lookup", "_max_frame_bytes")

    def __init__(
        self, lookup: TopicLookup, max_frame_bytes: int, closed: Callable[[], bool]
    ) -> None:
        self._lookup = lookup
        self._max_frame_bytes = max_frame_bytes
        self._closed = closed
        self._held: deque[Callable[[], None]] | None = None

    def run(self, api_key: int, frame: bytes, go: Callable[[], None]) -> None:
        held = self._held
        if held is not None:
            held.append(lambda: self.run(api_key, frame, go))
            return
        if api_key not in LOOKED_UP:
            go()
            return
        lookup = self._lookup
        names = lookup.wanted(requested_partitions(api_key, frame, self._max_frame_bytes))
        if not names:
            go()
            return
        self._held = deque()
        lookup.look_up(names).add_done_callback(lambda _: self._release(go))

    @property
    def idle(self) -> bool:
        """Nothing held."""
        return self._held is None

    def _release(self, go: Callable[[], None]) -> None:
        held, self._held = self._held, None
        if self._closed():
            return  # nobody to answer
        go()
        while held:
            held.popleft()()
            if self._held is not None:  # that one waits for a look-up in turn: the rest too
                self._held.extend(held)
                return
